/* Map definitions, pin layout and sizes shared by the BPF programs and the loader. Each
 * each progs/ program defines one of SPW_PROG_XDP, SPW_PROG_STEER, SPW_PROG_TRACE before including this
 * file to get its maps; userspace includes it for the constants only. */
#ifndef SPILLWAY_MAPS_H
#define SPILLWAY_MAPS_H

#include "spillway_structs.h"

/* Default pin root on bpffs; tests and multi-instance hosts pass --pin-root. Maps are pinned by
 * name directly under <root> (libbpf LIBBPF_PIN_BY_NAME), links under <root>/links, so re-attaching
 * keeps counters and ranges, and `detach` is "unlink the link pins". */
#define SPW_PIN_ROOT_DEFAULT "/sys/fs/bpf/spillway"

#ifdef SPW_PROG_XDP
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spw_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SPW_LPM4_MAX);
	__type(key, struct spw_lpm4_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_lpm4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SPW_LPM6_MAX);
	__type(key, struct spw_lpm6_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_lpm6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_V_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_verdicts SEC(".maps");
#endif

#if defined(SPW_PROG_XDP) || defined(SPW_PROG_TRACE)
/* Shared by the XDP program and the tracer: same pin names, so both objects use one map. */
/* Drops of packets to the ingest port, indexed by enum skb_drop_reason (names are read from the
 * running kernel's tracepoint format by the loader: the enum is not a stable ABI). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_MAX_REASONS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_drop_reasons SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_T_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_trace_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_GAP_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_gap_hist SEC(".maps");

/* First-SYN time per client (address, port): bounded by LRU so floods cannot grow it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct spw_flow);
	__type(value, struct spw_syn_seen);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_syn_seen SEC(".maps");
#endif

#ifdef SPW_PROG_STEER
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spw_steer_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_steer_config SEC(".maps");

/* Listening sockets of the SO_REUSEPORT group, index = worker slot. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, SPW_MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_workers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SPW_MAX_WORKERS);
	__type(key, __u32);
	__type(value, struct spw_worker_load);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_worker_load SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_S_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_steer_stats SEC(".maps");

/* New connections steered to each worker slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SPW_MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_steer_picks SEC(".maps");
#endif

#ifdef SPW_PROG_TRACE
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spw_trace_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} spw_trace_config SEC(".maps");

#endif

#endif
