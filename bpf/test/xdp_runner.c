/* Runs the XDP allowlist program over a fixture table with BPF_PROG_TEST_RUN and checks, for each
 * crafted packet, the verdict, the counter that moved and that the packet comes out unchanged.
 *
 * usage: xdp_runner <fixture.tbl>
 * Output: one JSON object per fixture, then a summary line; exit 0 only if every fixture holds.
 * Table syntax: see test/fixtures/xdp_allow.tbl. Maps are not pinned: the run leaves nothing behind. */
#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <linux/if_ether.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "spillway_maps.h"
#include "ranges.h"
#include "xdp_allow.skel.h"

static const char *verdict_names[SPW_V_MAX] = {
	"NOT_JUDGED", "OFF", "ALLOWED", "NO_ALLOWLIST", "DROP_BLOCKED",
	"DROP_NOT_ALLOWED", "MON_BLOCKED", "MON_NOT_ALLOWED", "FRAGMENT", "MALFORMED",
};

static int ncpus;

static int verdict_by_name(const char *s)
{
	for (int i = 0; i < SPW_V_MAX; i++)
		if (!strcmp(s, verdict_names[i]))
			return i;
	return -1;
}

static void read_counters(int fd, __u64 *out)
{
	__u64 *vals = calloc(ncpus, sizeof(__u64));
	for (__u32 k = 0; k < SPW_V_MAX; k++) {
		out[k] = 0;
		if (bpf_map_lookup_elem(fd, &k, vals) == 0)
			for (int c = 0; c < ncpus; c++)
				out[k] += vals[c];
	}
	free(vals);
}

static __u16 csum(const void *p, size_t n)
{
	const __u8 *b = p;
	__u32 s = 0;
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (b[i] << 8) | b[i + 1];
	if (n & 1)
		s += b[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xFFFF) + (s >> 16);
	return htons((__u16)~s);
}

/* Builds an Ethernet frame. l2: eth | vlan | arp; l4: tcp | udp | icmp; flags: comma list of
 * syn, frag0 (first fragment, MF set), fragN (offset > 0), trunc (L4 header cut short),
 * ext (IPv6 hop-by-hop + destination options before L4), v6frag0 / v6fragN (IPv6 fragment header). */
static int build(__u8 *pkt, const char *l2, const char *src, const char *dst, const char *l4,
		 int dport, const char *flags)
{
	__u8 *p = pkt;
	__u8 s6[16], d6[16];
	int v6 = strchr(src, ':') != NULL;
	int has = 0;
	int frag0 = strstr(flags, "frag0") && !strstr(flags, "v6frag0");
	int fragn = strstr(flags, "fragN") && !strstr(flags, "v6fragN");
	int trunc = strstr(flags, "trunc") != NULL;
	__u8 proto = !strcmp(l4, "tcp") ? 6 : !strcmp(l4, "udp") ? 17 : v6 ? 58 : 1;

	memcpy(p, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01", 12);
	p += 12;
	if (!strcmp(l2, "vlan")) {
		memcpy(p, "\x81\x00\x00\x64", 4); /* VID 100 */
		p += 4;
	}
	if (!strcmp(l2, "arp")) {
		memcpy(p, "\x08\x06", 2);
		p += 2;
		memcpy(p, "\x00\x01\x08\x00\x06\x04\x00\x01", 8);
		p += 8;
		memset(p, 0, 20);
		return (int)(p + 20 - pkt);
	}
	*p++ = v6 ? 0x86 : 0x08;
	*p++ = v6 ? 0xDD : 0x00;

	__u8 l4buf[64];
	int l4len;
	memset(l4buf, 0, sizeof(l4buf));
	if (proto == 6) {
		l4buf[0] = 0xC3; l4buf[1] = 0x50; /* sport 50000 */
		l4buf[2] = dport >> 8; l4buf[3] = dport & 0xFF;
		l4buf[4] = 1; /* seq */
		l4buf[12] = 5 << 4;
		l4buf[13] = strstr(flags, "syn") ? 0x02 : 0x10;
		l4buf[14] = 0xFF; l4buf[15] = 0xFF;
		l4len = 20;
	} else if (proto == 17) {
		l4buf[0] = 0xC3; l4buf[1] = 0x50;
		l4buf[2] = dport >> 8; l4buf[3] = dport & 0xFF;
		l4buf[5] = 8;
		l4len = 8;
	} else {
		l4buf[0] = v6 ? 128 : 8; /* echo request */
		l4len = 8;
	}
	if (trunc)
		l4len = 6; /* ports present (UDP/TCP), rest missing */

	if (!v6) {
		__u8 *ip = p;
		int tot = 20 + l4len;
		memset(ip, 0, 20);
		ip[0] = 0x45;
		ip[2] = tot >> 8; ip[3] = tot & 0xFF;
		if (frag0) ip[6] = 0x20;                /* MF, offset 0 */
		if (fragn) { ip[6] = 0x00; ip[7] = 0x10; } /* offset 16*8 */
		ip[8] = 64; ip[9] = proto;
		if (inet_pton(AF_INET, src, ip + 12) != 1 || inet_pton(AF_INET, dst, ip + 16) != 1)
			return -1;
		__u16 c = csum(ip, 20);
		memcpy(ip + 10, &c, 2);
		p += 20;
	} else {
		__u8 *ip = p;
		int ext = strstr(flags, "ext") != NULL;
		int f6 = strstr(flags, "v6frag") != NULL;
		int plen = l4len + (ext ? 16 : 0) + (f6 ? 8 : 0);
		memset(ip, 0, 40);
		ip[0] = 0x60;
		ip[4] = plen >> 8; ip[5] = plen & 0xFF;
		ip[7] = 64;
		if (inet_pton(AF_INET6, src, s6) != 1 || inet_pton(AF_INET6, dst, d6) != 1)
			return -1;
		memcpy(ip + 8, s6, 16);
		memcpy(ip + 24, d6, 16);
		p += 40;
		__u8 *nh = ip + 6;
		if (ext) {
			*nh = 0; /* hop-by-hop */
			memset(p, 0, 8); p[2] = 1; p[3] = 4; /* PadN */
			nh = p; p += 8;
			*nh = 60; /* destination options */
			memset(p, 0, 8); p[2] = 1; p[3] = 4;
			nh = p; p += 8;
		}
		if (f6) {
			*nh = 44;
			memset(p, 0, 8);
			if (strstr(flags, "v6fragN")) { p[2] = 0x00; p[3] = 0x80; } /* offset 16 */
			else p[3] = 0x01; /* M flag, offset 0 */
			nh = p; p += 8;
		}
		*nh = proto;
	}
	if (fragn && !v6) {
		/* a non-first fragment carries payload, not an L4 header: make it look like garbage
		 * that would match the port if it were wrongly parsed */
	}
	memcpy(p, l4buf, l4len);
	p += l4len;
	(void)has;
	return (int)(p - pkt);
}

static int load_ranges(struct xdp_allow_bpf *skel, const char *dir, const char *allowf,
		       const char *blockf)
{
	struct spw_cidr_set allow = {}, block = {};
	struct spw_swap_result res;
	char err[256], path[2100];
	int rc = 0;

	if (strcmp(allowf, "-")) {
		snprintf(path, sizeof(path), "%s/%s", dir, allowf);
		if (spw_ranges_parse_file(path, &allow, err, sizeof(err)))
			goto bad;
	}
	if (blockf && strcmp(blockf, "-")) {
		snprintf(path, sizeof(path), "%s/%s", dir, blockf);
		if (spw_ranges_parse_file(path, &block, err, sizeof(err)))
			goto bad;
	}
	if (spw_ranges_swap(bpf_map__fd(skel->maps.spw_config), bpf_map__fd(skel->maps.spw_lpm4),
			    bpf_map__fd(skel->maps.spw_lpm6), &allow, &block, &res, err, sizeof(err)))
		goto bad;
	printf("{\"ranges\":{\"allow\":%u,\"block\":%u,\"gen\":%u,\"removed\":%u}}\n", res.allow,
	       res.block, res.gen, res.removed);
	goto out;
bad:
	fprintf(stderr, "ranges: %s\n", err);
	rc = -1;
out:
	spw_cidr_set_free(&allow);
	spw_cidr_set_free(&block);
	return rc;
}

int main(int argc, char **argv)
{
	struct xdp_allow_bpf *skel;
	struct bpf_map *m;
	char line[512], dir[1024];
	int pass = 0, fail = 0, lineno = 0;
	__u32 zero = 0;
	FILE *f;

	if (argc != 2) {
		fprintf(stderr, "usage: %s <fixture.tbl>\n", argv[0]);
		return 2;
	}
	{
		char tmp[1024];
		snprintf(tmp, sizeof(tmp), "%s", argv[1]);
		snprintf(dir, sizeof(dir), "%s", dirname(tmp));
	}
	ncpus = libbpf_num_possible_cpus();
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	skel = xdp_allow_bpf__open();
	if (!skel) {
		fprintf(stderr, "open: %s\n", strerror(errno));
		return 2;
	}
	bpf_object__for_each_map(m, skel->obj) bpf_map__set_pin_path(m, NULL);
	if (xdp_allow_bpf__load(skel)) {
		fprintf(stderr, "load: %s (need CAP_BPF)\n", strerror(errno));
		return 77;
	}
	int cfg_fd = bpf_map__fd(skel->maps.spw_config);
	int cnt_fd = bpf_map__fd(skel->maps.spw_verdicts);
	int prog_fd = bpf_program__fd(skel->progs.spw_xdp_allow);
	struct spw_config cfg = {.abi = SPW_ABI_VERSION, .mode = SPW_MODE_ENFORCE, .ingest_port = 8080};
	bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY);

	while (fgets(line, sizeof(line), f)) {
		char *t[10];
		int n = 0;
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		for (char *s = strtok(line, " \t\r\n"); s && n < 10; s = strtok(NULL, " \t\r\n"))
			t[n++] = s;
		if (n == 0)
			continue;
		if (!strcmp(t[0], "port") && n == 2) {
			bpf_map_lookup_elem(cfg_fd, &zero, &cfg);
			cfg.ingest_port = (__u16)atoi(t[1]);
			bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY);
			continue;
		}
		if (!strcmp(t[0], "mode") && n == 2) {
			bpf_map_lookup_elem(cfg_fd, &zero, &cfg);
			cfg.mode = !strcmp(t[1], "off") ? SPW_MODE_OFF
				   : !strcmp(t[1], "monitor") ? SPW_MODE_MONITOR
							       : SPW_MODE_ENFORCE;
			bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY);
			continue;
		}
		if (!strcmp(t[0], "ranges") && n >= 2) {
			if (load_ranges(skel, dir, t[1], n > 2 ? t[2] : NULL)) {
				fail++;
				break;
			}
			continue;
		}
		if (n != 9) {
			fprintf(stderr, "%s:%d: expected 9 columns, got %d\n", argv[1], lineno, n);
			fail++;
			continue;
		}
		/* name l2 src dst l4 dport flags expect counter */
		__u8 pkt[256], out[256];
		__u64 before[SPW_V_MAX], after[SPW_V_MAX];
		int len = build(pkt, t[1], t[2], t[3], t[4], atoi(t[5]), t[6]);
		int want_act = !strcmp(t[7], "DROP") ? XDP_DROP : XDP_PASS;
		int want_ctr = verdict_by_name(t[8]);
		if (len < 0 || want_ctr < 0) {
			fprintf(stderr, "%s:%d: bad fixture\n", argv[1], lineno);
			fail++;
			continue;
		}
		read_counters(cnt_fd, before);
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = (__u32)len,
			    .data_out = out, .data_size_out = sizeof(out), .repeat = 1);
		int rc = bpf_prog_test_run_opts(prog_fd, &opts);
		read_counters(cnt_fd, after);
		int moved = -1, nmoved = 0;
		for (int i = 0; i < SPW_V_MAX; i++)
			if (after[i] != before[i]) {
				moved = i;
				nmoved += (int)(after[i] - before[i]);
			}
		int same = opts.data_size_out == (__u32)len && !memcmp(pkt, out, len);
		int ok = rc == 0 && (int)opts.retval == want_act && moved == want_ctr && nmoved == 1 &&
			 same;
		printf("{\"name\":\"%s\",\"ok\":%s,\"verdict\":\"%s\",\"counter\":\"%s\","
		       "\"expected\":\"%s/%s\",\"unchanged\":%s,\"len\":%d}\n",
		       t[0], ok ? "true" : "false",
		       rc ? "ERROR" : opts.retval == XDP_DROP ? "DROP" : opts.retval == XDP_PASS ? "PASS" : "OTHER",
		       moved >= 0 ? verdict_names[moved] : "none", t[7], t[8], same ? "true" : "false", len);
		ok ? pass++ : fail++;
	}
	fclose(f);
	printf("{\"summary\":{\"pass\":%d,\"fail\":%d}}\n", pass, fail);
	xdp_allow_bpf__destroy(skel);
	return fail ? 1 : 0;
}
