/* Structs and constants shared by the BPF programs (progs/) and userspace (loader/, test/).
 * Layout changes here are ABI changes for pinned maps: bump SPW_ABI_VERSION and re-attach. */
#ifndef SPILLWAY_STRUCTS_H
#define SPILLWAY_STRUCTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define SPW_ABI_VERSION 1

/* --- XDP allowlist ------------------------------------------------------------------------- */

enum spw_mode {
	SPW_MODE_OFF = 0,     /* judge nothing, pass everything */
	SPW_MODE_MONITOR = 1, /* judge and count, pass everything */
	SPW_MODE_ENFORCE = 2, /* judge, count, drop what is refused */
};

/* Per-CPU counters, indexed by verdict. "Judged" means TCP to the ingest port. */
enum spw_verdict {
	SPW_V_NOT_JUDGED = 0,      /* not TCP to the ingest port (other port/proto, non-IP, VLAN) */
	SPW_V_OFF = 1,             /* mode off: judged nothing */
	SPW_V_ALLOWED = 2,         /* source inside the allowlist */
	SPW_V_NO_ALLOWLIST = 3,    /* allowlist empty, source not blocked: passed */
	SPW_V_DROP_BLOCKED = 4,    /* enforce: source inside the blocklist, dropped */
	SPW_V_DROP_NOT_ALLOWED = 5,/* enforce: source outside a non-empty allowlist, dropped */
	SPW_V_MON_BLOCKED = 6,     /* monitor: would have dropped (blocklist) */
	SPW_V_MON_NOT_ALLOWED = 7, /* monitor: would have dropped (not allowed) */
	SPW_V_FRAGMENT = 8,        /* non-first IP fragment: no L4 header, passed (see docs/edge.md) */
	SPW_V_MALFORMED = 9,       /* truncated headers: passed to the stack, which drops them */
	SPW_V_MAX = 10,
};

/* The allow and block sets of both generations live in one LPM trie per family; the key's data
 * starts with {generation, list} so that one trie holds all four sets and a lookup fixes both
 * bytes (prefixlen counts them: 16 + CIDR length). The controller fills the inactive generation,
 * flips spw_config.active_gen (one byte, one map write), then deletes the old generation. */
enum spw_list { SPW_LIST_ALLOW = 0, SPW_LIST_BLOCK = 1 };

struct spw_lpm4_key {
	__u32 prefixlen; /* 16 + CIDR bits */
	__u8 gen;
	__u8 list;
	__u8 addr[4];
};

struct spw_lpm6_key {
	__u32 prefixlen; /* 16 + CIDR bits */
	__u8 gen;
	__u8 list;
	__u8 addr[16];
};

#define SPW_LPM4_MAX 65536
#define SPW_LPM6_MAX 65536

struct spw_config {
	__u32 abi;
	__u32 mode;          /* enum spw_mode */
	__u16 ingest_port;   /* host order */
	__u8 active_gen;     /* 0 or 1 */
	__u8 pad;
	__u32 allow_count[2]; /* entries per generation (both families) */
	__u32 block_count[2];
	__u64 loaded_at_ns[2]; /* CLOCK_REALTIME ns when the generation was activated */
	/* Drop tracer hooks in XDP (set by `attach` unless --no-trace): for each SYN to the ingest
	 * port, look up its listener and apply the kernel's own accept-queue test, and track SYN
	 * retransmissions. Needed because the kernel frees refused SYNs with consume_skb (no reason
	 * on skb:kfree_skb) and kprobes/fentry are not available everywhere. */
	__u32 trace_syn;
	__u32 listen_overflow_reason; /* enum skb_drop_reason value of TCP_LISTEN_OVERFLOW */
};

/* --- SK_REUSEPORT steering ------------------------------------------------------------------ */

#define SPW_MAX_WORKERS 16

struct spw_steer_config {
	__u32 nworkers;       /* sockets in spw_workers, indexes 0..nworkers-1 */
	__u32 busy_pct;       /* skip a worker whose accept queue is >= busy_pct % of its backlog */
	__u32 enabled;        /* 0: always fall back to the kernel hash */
	__u32 pad;
	__u64 stale_ns;       /* load entries older than this are not trusted */
};

/* Accept-queue depth of each worker's listener, published by the loader's steering daemon
 * (TCP_INFO on the listening socket: tcpi_unacked/tcpi_sacked). Entries older than
 * stale_ns are ignored, so a dead publisher degrades to the kernel hash, not to bad steering. */
struct spw_worker_load {
	__u32 qlen;
	__u32 qmax;
	__u64 updated_ns; /* CLOCK_MONOTONIC, same clock as bpf_ktime_get_ns */
};

enum spw_steer_stat {
	SPW_S_SELECTED_HASHED = 0,  /* first candidate (by hash) was fine */
	SPW_S_SELECTED_SKIPPED = 1, /* steered away from at least one busy worker */
	SPW_S_FALLBACK_ALL_BUSY = 2,/* every worker busy: kernel hash */
	SPW_S_FALLBACK_EMPTY = 3,   /* no worker registered / disabled: kernel hash */
	SPW_S_SELECT_ERROR = 4,     /* bpf_sk_select_reuseport failed: kernel hash */
	SPW_S_FALLBACK_STALE = 5,   /* load data too old (publisher gone): kernel hash */
	SPW_S_MAX = 6,
};

/* --- drop tracer ---------------------------------------------------------------------------- */

#define SPW_MAX_REASONS 256

struct spw_trace_config {
	__u16 ingest_port; /* host order; 0 = every port */
	__u16 pad;
	__u32 pad2;
};

/* SYN-retry gap histogram: log2 buckets of milliseconds, bucket i counts gaps in [2^(i-1), 2^i)
 * ms (bucket 0: < 1 ms). Prometheus buckets are derived from these upper bounds. */
#define SPW_GAP_BUCKETS 20

struct spw_syn_seen {
	__u64 first_ns; /* first SYN of this attempt */
	__u32 seq;      /* its ISN: a retransmission carries the same one */
	__u32 retries;
};

struct spw_flow {
	__u8 family; /* 4 or 6 */
	__u8 pad;
	__u16 sport; /* network order */
	__u8 saddr[16];
};

enum spw_trace_stat {
	SPW_T_LISTEN_OVERFLOW_SYN = 0, /* SYN meeting a full accept queue (XDP, kernel's test) */
	SPW_T_LISTEN_OVERFLOW_ACK = 1, /* skb:kfree_skb with reason TCP_LISTEN_OVERFLOW */
	SPW_T_SYN_DROPS = 2,           /* SYN retransmissions seen (each one = a refused SYN) */
	SPW_T_GAP_SUM_MS = 3,          /* sum of observed SYN-retry gaps (ms) */
	SPW_T_GAP_COUNT = 4,
	SPW_T_MAX = 5,
};

#endif
