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

#define SPW_PROG_XDP
#include "spillway_maps.h"

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
		int allowed, blocked;

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
		return judge(cfg, allowed, blocked);
	}

	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct spw_lpm6_key k = {};
		void *l4;
		__u8 nexthdr;
		int allowed, blocked;

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
		return judge(cfg, allowed, blocked);
	}

	return count(SPW_V_NOT_JUDGED);
}

char LICENSE[] SEC("license") = "GPL";
