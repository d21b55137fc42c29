/* synflood: a bounded SYN flood for the edge benchmark (test/bench/benchmarks/edge.ts). This kernel
 * has no pktgen, so this sends prebuilt Ethernet frames with sendmmsg(2) on an AF_PACKET socket
 * bound to one interface (PACKET_QDISC_BYPASS, as pktgen does). It only ever sends on the interface
 * it is given, which the benchmark creates as one end of a veth pair inside its own network
 * namespace; it stops at --count frames or --seconds, whichever comes first.
 *
 *   synflood --dev IF --src-mac MAC --dst-mac MAC --src-net A.B.0.0 --dst IP --dport N
 *            --count N --seconds S
 *
 * Frames: IPv4 TCP SYN with an MSS option, 64 Ki distinct (source address in A.B.0.0/16, source
 * port, ISN) tuples sent round-robin, with valid IP and TCP checksums. Prints one JSON line:
 *   {"sent":N,"seconds":T,"pps":P,"user_us":U,"sys_us":S}
 * Exit codes: 0 ok, 1 failure, 2 usage. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NFRAMES 65536
#define FRAME_LEN (14 + 20 + 24)
#define BATCH 64
#define MAX_COUNT 100000000ULL
#define MAX_SECONDS 60.0

static void die(int code, const char *msg)
{
	fprintf(stderr, "synflood: %s%s%s\n", msg, errno ? ": " : "", errno ? strerror(errno) : "");
	exit(code);
}

static int parse_mac(const char *s, uint8_t *mac)
{
	return sscanf(s, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4],
		      &mac[5]) == 6 ? 0 : -1;
}

static uint32_t sum16(const void *p, size_t n, uint32_t acc)
{
	const uint8_t *b = p;
	for (size_t i = 0; i + 1 < n; i += 2)
		acc += (uint32_t)b[i] << 8 | b[i + 1];
	if (n & 1)
		acc += (uint32_t)b[n - 1] << 8;
	return acc;
}

static uint16_t fold(uint32_t acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return htons((uint16_t)~acc);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	uint8_t smac[6], dmac[6];
	int have_smac = 0, have_dmac = 0;
	struct in_addr src_net = {0}, dst = {0};
	long dport = 0;
	unsigned long long count = 0;
	double seconds = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--dev"))
			dev = v;
		else if (!strcmp(k, "--src-mac"))
			have_smac = parse_mac(v, smac) == 0;
		else if (!strcmp(k, "--dst-mac"))
			have_dmac = parse_mac(v, dmac) == 0;
		else if (!strcmp(k, "--src-net"))
			inet_pton(AF_INET, v, &src_net);
		else if (!strcmp(k, "--dst"))
			inet_pton(AF_INET, v, &dst);
		else if (!strcmp(k, "--dport"))
			dport = strtol(v, NULL, 10);
		else if (!strcmp(k, "--count"))
			count = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--seconds"))
			seconds = strtod(v, NULL);
		else {
			fprintf(stderr, "synflood: unknown option %s\n", k);
			return 2;
		}
	}
	errno = 0;
	if (!dev || !have_smac || !have_dmac || !src_net.s_addr || !dst.s_addr || dport <= 0 || dport > 65535)
		die(2, "usage: --dev IF --src-mac MAC --dst-mac MAC --src-net A.B.0.0 --dst IP --dport N --count N --seconds S");
	if (count == 0 || count > MAX_COUNT || seconds <= 0 || seconds > MAX_SECONDS)
		die(2, "--count must be 1..100000000 and --seconds 0..60 (the flood is always bounded)");

	unsigned ifindex = if_nametoindex(dev);
	if (!ifindex)
		die(1, "no such interface");
	int fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: send only, never receive */
	if (fd < 0)
		die(1, "socket(AF_PACKET)");
	int one = 1;
	/* Not fatal: older kernels queue through the qdisc instead. */
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_ifindex = (int)ifindex, .sll_halen = 6};
	memcpy(sll.sll_addr, dmac, 6);
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		die(1, "bind");

	uint8_t *frames = calloc(NFRAMES, FRAME_LEN);
	if (!frames)
		die(1, "calloc");
	uint32_t base = ntohl(src_net.s_addr) & 0xffff0000u;
	uint32_t seed = 0x9e3779b9u;
	for (uint32_t i = 0; i < NFRAMES; i++) {
		uint8_t *f = frames + (size_t)i * FRAME_LEN;
		memcpy(f, dmac, 6);
		memcpy(f + 6, smac, 6);
		f[12] = 0x08;
		f[13] = 0x00;
		struct iphdr *ip = (struct iphdr *)(f + 14);
		ip->version = 4;
		ip->ihl = 5;
		ip->tot_len = htons(20 + 24);
		ip->id = htons((uint16_t)i);
		ip->ttl = 64;
		ip->protocol = IPPROTO_TCP;
		/* skip .0 and .255 host parts, which some stacks treat specially */
		ip->saddr = htonl(base | ((i % 65024u) / 254u + 1) << 8 | ((i % 254u) + 1));
		ip->daddr = dst.s_addr;
		ip->check = fold(sum16(ip, 20, 0));
		struct tcphdr *tcp = (struct tcphdr *)(f + 34);
		seed = seed * 1664525u + 1013904223u;
		tcp->source = htons((uint16_t)(1024 + (i * 7919u) % 64000u));
		tcp->dest = htons((uint16_t)dport);
		tcp->seq = htonl(seed);
		tcp->doff = 6;
		tcp->syn = 1;
		tcp->window = htons(64240);
		uint8_t *opt = f + 34 + 20;
		opt[0] = 2; /* MSS 1460 */
		opt[1] = 4;
		opt[2] = 1460 >> 8;
		opt[3] = 1460 & 0xff;
		uint8_t pseudo[12];
		memcpy(pseudo, &ip->saddr, 4);
		memcpy(pseudo + 4, &ip->daddr, 4);
		pseudo[8] = 0;
		pseudo[9] = IPPROTO_TCP;
		pseudo[10] = 0;
		pseudo[11] = 24;
		tcp->check = fold(sum16(tcp, 24, sum16(pseudo, 12, 0)));
	}

	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int j = 0; j < BATCH; j++) {
		msgs[j].msg_hdr.msg_iov = &iov[j];
		msgs[j].msg_hdr.msg_iovlen = 1;
		iov[j].iov_len = FRAME_LEN;
	}
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	double t0 = now_s(), deadline = t0 + seconds;
	unsigned long long sent = 0, next = 0, errors = 0;
	while (sent < count) {
		int n = count - sent < BATCH ? (int)(count - sent) : BATCH;
		for (int j = 0; j < n; j++)
			iov[j].iov_base = frames + (size_t)((next + j) % NFRAMES) * FRAME_LEN;
		int k = sendmmsg(fd, msgs, n, 0);
		if (k < 0) {
			if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
				die(1, "sendmmsg");
			errors++;
			k = 0;
		}
		sent += k;
		next += k;
		if (now_s() > deadline) /* vDSO clock: cheap next to 64 sends */
			break;
	}
	double t1 = now_s();
	getrusage(RUSAGE_SELF, &r1);
	long long user = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1000000LL + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec);
	long long sys = (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000LL + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
	printf("{\"sent\":%llu,\"seconds\":%.6f,\"pps\":%.0f,\"user_us\":%lld,\"sys_us\":%lld,\"send_errors\":%llu}\n", sent,
	       t1 - t0, sent / (t1 - t0), user, sys, errors);
	return 0;
}
