// SPDX-License-Identifier: GPL-2.0
/* Kernel drop tracer for the ingest port:
 *  - skb:kfree_skb: packets to the ingest port freed with a drop reason, counted per reason;
 *  - sock:inet_sock_set_state: a connection established ends its SYN attempt in spw_syn_seen.
 * SYN-path listen overflows and the SYN-retry gap are measured in the XDP program (see
 * xdp_allow.bpf.c): this kernel frees refused SYNs with consume_skb, so kfree_skb never names
 * them, and kprobe/fentry attachment is not available on every host we run on. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

#define SPW_PROG_TRACE
#include "spillway_maps.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6

static __always_inline void inc(void *map, __u32 key, __u64 by)
{
	__u64 *c = bpf_map_lookup_elem(map, &key);
	if (c)
		*c += by;
}

static __always_inline __u16 ingest_port(void)
{
	__u32 zero = 0;
	struct spw_trace_config *cfg = bpf_map_lookup_elem(&spw_trace_config, &zero);
	return cfg ? cfg->ingest_port : 0;
}

/* Reads the client address/port and TCP flags of an skb whose network header is set.
 * Returns 0 when it is TCP over IPv4/IPv6. proto is host order. */
static __always_inline int parse_skb(struct sk_buff *skb, __u16 proto, struct spw_flow *flow,
				     __u16 *dport, __u8 *flags)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	unsigned char *l4;
	struct tcphdr th;

	__builtin_memset(flow, 0, sizeof(*flow));
	if (proto == ETH_P_IP) {
		struct iphdr ip;
		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh) || ip.protocol != IPPROTO_TCP)
			return -1;
		flow->family = 4;
		__builtin_memcpy(flow->saddr, &ip.saddr, 4);
		l4 = head + nh + ip.ihl * 4;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr ip6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh) || ip6.nexthdr != IPPROTO_TCP)
			return -1;
		flow->family = 6;
		__builtin_memcpy(flow->saddr, &ip6.saddr, 16);
		l4 = head + nh + sizeof(ip6);
	} else {
		return -1;
	}
	if (bpf_probe_read_kernel(&th, sizeof(th), l4))
		return -1;
	flow->sport = th.source;
	*dport = bpf_ntohs(th.dest);
	*flags = ((__u8 *)&th)[13];
	return 0;
}

SEC("tracepoint/skb/kfree_skb")
int spw_kfree_skb(struct trace_event_raw_kfree_skb *ctx)
{
	struct sk_buff *skb = ctx->skbaddr;
	__u32 reason = (__u32)ctx->reason;
	__u16 proto = ctx->protocol, dport, port;
	struct spw_flow flow;
	__u8 flags;

	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return 0;
	if (parse_skb(skb, proto, &flow, &dport, &flags))
		return 0;
	port = ingest_port();
	if (port && dport != port)
		return 0;
	if (reason >= SPW_MAX_REASONS)
		reason = SPW_MAX_REASONS - 1;
	inc(&spw_drop_reasons, reason, 1);
	if (reason == (__u32)bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_TCP_LISTEN_OVERFLOW))
		inc(&spw_trace_stats, SPW_T_LISTEN_OVERFLOW_ACK, 1);
	return 0;
}

/* A connection to the ingest port reaching ESTABLISHED on the server side ends its SYN attempt:
 * forget it, so a later reuse of the client port starts a fresh one. */
SEC("tracepoint/sock/inet_sock_set_state")
int spw_sock_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	__u16 port = ingest_port();
	struct spw_flow flow = {};

	if (ctx->protocol != IPPROTO_TCP || ctx->newstate != 1 /* TCP_ESTABLISHED */ ||
	    ctx->oldstate != 3 /* TCP_SYN_RECV: server side only */)
		return 0;
	if (port && ctx->sport != port)
		return 0;
	flow.sport = bpf_htons(ctx->dport); /* the client's port, network order like the skb */
	if (ctx->family == 2 /* AF_INET */) {
		flow.family = 4;
		bpf_probe_read_kernel(flow.saddr, 4, ctx->daddr);
	} else {
		flow.family = 6;
		bpf_probe_read_kernel(flow.saddr, 16, ctx->daddr_v6);
	}
	bpf_map_delete_elem(&spw_syn_seen, &flow);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
