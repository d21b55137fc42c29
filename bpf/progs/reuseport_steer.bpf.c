// SPDX-License-Identifier: GPL-2.0
/* SK_REUSEPORT steering for the ingest workers. For each new connection (SYN) the kernel asks this
 * program which listening socket of the SO_REUSEPORT group gets it. Starting from the slot the
 * kernel hash suggests, it picks the first worker whose accept queue is below busy_pct % of its
 * backlog. Queue depths come from spw_worker_load, which the loader's steering daemon refreshes
 * from TCP_INFO (sk_reuseport programs can neither release a looked-up socket nor use skc_to_*
 * helpers, so they cannot read the queue themselves). When every worker is busy, the data is
 * stale, or no worker is registered, it selects nothing: the kernel hash decides. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define SPW_PROG_STEER
#include "spillway_maps.h"

static __always_inline void inc(void *map, __u32 key)
{
	__u64 *c = bpf_map_lookup_elem(map, &key);
	if (c)
		*c += 1;
}

SEC("sk_reuseport")
int spw_reuseport_steer(struct sk_reuseport_md *md)
{
	__u32 zero = 0, n, start, skipped = 0;
	struct spw_steer_config *cfg = bpf_map_lookup_elem(&spw_steer_config, &zero);
	__u64 now = bpf_ktime_get_ns();

	if (!cfg || !cfg->enabled || cfg->nworkers == 0) {
		inc(&spw_steer_stats, SPW_S_FALLBACK_EMPTY);
		return SK_PASS;
	}
	n = cfg->nworkers;
	if (n > SPW_MAX_WORKERS)
		n = SPW_MAX_WORKERS;
	start = md->hash % n;

	for (__u32 i = 0; i < SPW_MAX_WORKERS; i++) {
		struct spw_worker_load *ld;
		__u32 idx;

		if (i >= n)
			break;
		idx = start + i;
		if (idx >= n)
			idx -= n;
		ld = bpf_map_lookup_elem(&spw_worker_load, &idx);
		if (!ld)
			continue;
		if (now - ld->updated_ns > cfg->stale_ns) {
			inc(&spw_steer_stats, SPW_S_FALLBACK_STALE);
			return SK_PASS;
		}
		if ((__u64)ld->qlen * 100 >= (__u64)ld->qmax * cfg->busy_pct) {
			skipped++;
			continue;
		}
		if (bpf_sk_select_reuseport(md, &spw_workers, &idx, 0)) {
			/* empty slot or a socket that left the group */
			skipped++;
			continue;
		}
		inc(&spw_steer_stats, skipped ? SPW_S_SELECTED_SKIPPED : SPW_S_SELECTED_HASHED);
		inc(&spw_steer_picks, idx);
		return SK_PASS;
	}
	inc(&spw_steer_stats, SPW_S_FALLBACK_ALL_BUSY);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
