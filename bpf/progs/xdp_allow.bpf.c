// SPDX-License-Identifier: GPL-2.0
/* XDP allowlist/blocklist for the ingest port. Only TCP to spw_config.ingest_port is judged;
 * everything else (other ports and protocols, ARP, VLAN-tagged frames, non-first fragments) passes
 * untouched. The program never rewrites packets. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define SPW_PROG_XDP
#include "spillway_maps.h"

/* CO-RE view of the two struct sock fields the listen-overflow test reads ("___spw" is a libbpf
 * flavour suffix: it relocates against the kernel's struct sock). */
struct sock___spw {
	__u32 sk_ack_backlog;
	__u32 sk_max_ack_backlog;
} __attribute__((preserve_access_index));

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60

static __always_inline int count(__u32 v)
{
	__u64 *c = bpf_map_lookup_elem(&spw_verdicts, &v);
	if (c)
		*c += 1;
	return XDP_PASS;
}

static __always_inline void inc(void *map, __u32 key, __u64 by)
{
	__u64 *c = bpf_map_lookup_elem(map, &key);
	if (c)
		*c += by;
}

static __always_inline __u32 log2_bucket(__u64 ms)
{
	__u32 b = 0;
#pragma unroll
	for (int i = 0; i < SPW_GAP_BUCKETS - 1; i++)
		if (ms >= (1ull << i))
			b = i + 1;
	return b;
}

/* Drop-tracer work for a SYN that the stack is about to see (it passed the allowlist):
 *  1. listen overflow: find its listener and apply the kernel's sk_acceptq_is_full() test. The
 *     stack will refuse this SYN and free it with consume_skb, which no tracepoint names.
 *  2. SYN-retry gap: a SYN with the ISN of an attempt already seen is a retransmission; the time
 *     since that attempt's first SYN is the wait the sender sees (≈1 s, 3 s, 7 s ...). */
static __always_inline void trace_syn(struct xdp_md *ctx, struct spw_config *cfg,
				      struct bpf_sock_tuple *tuple, __u32 tuple_len,
				      struct spw_flow *flow, struct tcphdr *tcp)
{
	struct bpf_sock *sk;
	struct spw_syn_seen *seen, fresh = {};
	__u64 now = bpf_ktime_get_ns();
	__u32 seq = bpf_ntohl(tcp->seq);

	sk = bpf_skc_lookup_tcp(ctx, tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		if (sk->state == 10 /* TCP_LISTEN */) {
			struct sock___spw *s = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct sock___spw));
			if (s->sk_ack_backlog > s->sk_max_ack_backlog) {
				inc(&spw_trace_stats, SPW_T_LISTEN_OVERFLOW_SYN, 1);
				inc(&spw_drop_reasons, cfg->listen_overflow_reason & (SPW_MAX_REASONS - 1), 1);
			}
		}
		bpf_sk_release(sk);
	}

	seen = bpf_map_lookup_elem(&spw_syn_seen, flow);
	if (seen && seen->seq == seq) {
		__u64 ms = (now - seen->first_ns) / 1000000;
		seen->retries++;
		inc(&spw_trace_stats, SPW_T_SYN_DROPS, 1);
		inc(&spw_gap_hist, log2_bucket(ms), 1);
		inc(&spw_trace_stats, SPW_T_GAP_SUM_MS, ms);
		inc(&spw_trace_stats, SPW_T_GAP_COUNT, 1);
		return;
	}
	fresh.first_ns = now;
	fresh.seq = seq;
	bpf_map_update_elem(&spw_syn_seen, flow, &fresh, BPF_ANY);
}

/* Returns XDP_PASS or XDP_DROP for a judged packet, counting the verdict. */
static __always_inline int judge(struct spw_config *cfg, int allowed, int blocked)
{
	__u32 gen = cfg->active_gen & 1;
	int enforce = cfg->mode == SPW_MODE_ENFORCE;
	__u32 v;

	if (blocked)
		v = enforce ? SPW_V_DROP_BLOCKED : SPW_V_MON_BLOCKED;
	else if (allowed)
		v = SPW_V_ALLOWED;
	else if (cfg->allow_count[gen] == 0)
		v = SPW_V_NO_ALLOWLIST;
	else
		v = enforce ? SPW_V_DROP_NOT_ALLOWED : SPW_V_MON_NOT_ALLOWED;

	count(v);
	return (v == SPW_V_DROP_BLOCKED || v == SPW_V_DROP_NOT_ALLOWED) ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int spw_xdp_allow(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	struct spw_config *cfg;
	struct tcphdr *tcp;

	cfg = bpf_map_lookup_elem(&spw_config, &zero);
	if (!cfg)
		return XDP_PASS;
	if (cfg->mode == SPW_MODE_OFF)
		return count(SPW_V_OFF);
	if ((void *)(eth + 1) > data_end)
		return count(SPW_V_MALFORMED);

	/* 802.1Q/802.1ad frames pass: the ingest port is served on untagged interfaces; a tagged
	 * frame here belongs to a VLAN sub-interface that gets its own XDP attachment if needed. */
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		struct spw_lpm4_key k = {};
		__u32 ihl;
		int allowed, blocked, verdict;

		if ((void *)(ip + 1) > data_end)
			return count(SPW_V_MALFORMED);
		if (ip->protocol != IPPROTO_TCP)
			return count(SPW_V_NOT_JUDGED);
		/* A non-first fragment has no TCP header. Passing it is safe: if the first fragment was
		 * dropped the stack cannot reassemble the datagram and discards the rest itself. */
		if (ip->frag_off & bpf_htons(IP_OFFSET))
			return count(SPW_V_FRAGMENT);
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			return count(SPW_V_MALFORMED);
		tcp = (void *)ip + ihl;
		if ((void *)(tcp + 1) > data_end)
			return count(SPW_V_MALFORMED);
		if (tcp->dest != bpf_htons(cfg->ingest_port))
			return count(SPW_V_NOT_JUDGED);

		k.prefixlen = 16 + 32;
		k.gen = cfg->active_gen & 1;
		__builtin_memcpy(k.addr, &ip->saddr, 4);
		k.list = SPW_LIST_ALLOW;
		allowed = bpf_map_lookup_elem(&spw_lpm4, &k) != NULL;
		k.list = SPW_LIST_BLOCK;
		blocked = bpf_map_lookup_elem(&spw_lpm4, &k) != NULL;
		verdict = judge(cfg, allowed, blocked);
		if (verdict == XDP_PASS && cfg->trace_syn && tcp->syn && !tcp->ack) {
			struct bpf_sock_tuple t = {};
			struct spw_flow fl = {.family = 4, .sport = tcp->source};
			t.ipv4.saddr = ip->saddr;
			t.ipv4.daddr = ip->daddr;
			t.ipv4.sport = tcp->source;
			t.ipv4.dport = tcp->dest;
			__builtin_memcpy(fl.saddr, &ip->saddr, 4);
			trace_syn(ctx, cfg, &t, sizeof(t.ipv4), &fl, tcp);
		}
		return verdict;
	}

	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct spw_lpm6_key k = {};
		void *l4;
		__u8 nexthdr;
		int allowed, blocked, verdict;

		if ((void *)(ip6 + 1) > data_end)
			return count(SPW_V_MALFORMED);
		nexthdr = ip6->nexthdr;
		l4 = ip6 + 1;
		/* Walk at most four extension headers (hop-by-hop, routing, destination, fragment). */
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (nexthdr == NEXTHDR_FRAGMENT) {
				__u8 *fh = l4;
				if ((void *)(fh + 8) > data_end)
					return count(SPW_V_MALFORMED);
				/* fragment offset: 13 high bits of bytes 2-3 */
				if (((fh[2] << 8) | fh[3]) & 0xFFF8)
					return count(SPW_V_FRAGMENT);
				nexthdr = fh[0];
				l4 = fh + 8;
			} else if (nexthdr == NEXTHDR_HOP || nexthdr == NEXTHDR_ROUTING ||
				   nexthdr == NEXTHDR_DEST) {
				__u8 *eh = l4;
				if ((void *)(eh + 2) > data_end)
					return count(SPW_V_MALFORMED);
				nexthdr = eh[0];
				l4 = eh + (eh[1] + 1) * 8;
			} else {
				break;
			}
		}
		if (nexthdr != IPPROTO_TCP)
			return count(SPW_V_NOT_JUDGED);
		tcp = l4;
		if ((void *)(tcp + 1) > data_end)
			return count(SPW_V_MALFORMED);
		if (tcp->dest != bpf_htons(cfg->ingest_port))
			return count(SPW_V_NOT_JUDGED);

		k.prefixlen = 16 + 128;
		k.gen = cfg->active_gen & 1;
		__builtin_memcpy(k.addr, &ip6->saddr, 16);
		k.list = SPW_LIST_ALLOW;
		allowed = bpf_map_lookup_elem(&spw_lpm6, &k) != NULL;
		k.list = SPW_LIST_BLOCK;
		blocked = bpf_map_lookup_elem(&spw_lpm6, &k) != NULL;
		verdict = judge(cfg, allowed, blocked);
		if (verdict == XDP_PASS && cfg->trace_syn && tcp->syn && !tcp->ack) {
			struct bpf_sock_tuple t = {};
			struct spw_flow fl = {.family = 6, .sport = tcp->source};
			__builtin_memcpy(t.ipv6.saddr, &ip6->saddr, 16);
			__builtin_memcpy(t.ipv6.daddr, &ip6->daddr, 16);
			t.ipv6.sport = tcp->source;
			t.ipv6.dport = tcp->dest;
			__builtin_memcpy(fl.saddr, &ip6->saddr, 16);
			trace_syn(ctx, cfg, &t, sizeof(t.ipv6), &fl, tcp);
		}
		return verdict;
	}

	return count(SPW_V_NOT_JUDGED);
}

char LICENSE[] SEC("license") = "GPL";
