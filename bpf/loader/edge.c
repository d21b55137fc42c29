/* spillway-edge: loads, attaches, configures and reads the Spillway BPF programs.
 *
 *   spillway-edge [--pin-root DIR] <command> ...
 *     check                                   exit 0 if BPF is usable here, 77 if not permitted
 *     attach [--dev IF]... [--port N] [--mode off|monitor|enforce] [--xdp-mode auto|skb|native]
 *            [--no-trace]                     XDP on each IF + drop tracer; pinned, survives exit
 *     detach [--dev IF]... [--purge]          unpin links (all when no --dev); --purge drops maps
 *     mode off|monitor|enforce                set the XDP mode
 *     ranges [--allow FILE]... [--block FILE]...   parse, then swap the sets atomically
 *     dump | status                           everything as one JSON object on stdout
 *     steer --port N [--busy-pct P] [--interval-us U] [--stale-ms S]
 *                                             foreground: SK_REUSEPORT steering for every TCP
 *                                             listener on :N (any process), publishes queue depths
 *     steer-detach --port N                   detach the SK_REUSEPORT program from the group
 *
 * Exit codes: 0 ok, 1 failure, 2 usage, 77 not permitted (needs root: CAP_BPF, CAP_NET_ADMIN,
 * CAP_PERFMON, CAP_SYS_ADMIN for pidfd_getfd). Errors are one line on stderr. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "spillway_maps.h"
#include "ranges.h"
#include "xdp_allow.skel.h"
#include "droptrace.skel.h"
#include "reuseport_steer.skel.h"

#ifndef SO_ATTACH_REUSEPORT_EBPF
#define SO_ATTACH_REUSEPORT_EBPF 52
#endif
#ifndef SO_DETACH_REUSEPORT_BPF
#define SO_DETACH_REUSEPORT_BPF 68
#endif

static char pin_root[512] = SPW_PIN_ROOT_DEFAULT;
static int ncpus;

static const char *verdict_names[SPW_V_MAX] = {
	"not_judged", "off", "allowed", "no_allowlist", "drop_blocked",
	"drop_not_allowed", "monitor_blocked", "monitor_not_allowed", "fragment", "malformed",
};
static const char *steer_names[SPW_S_MAX] = {
	"selected_hashed", "selected_skipped_busy", "fallback_all_busy",
	"fallback_no_workers", "select_error", "fallback_stale",
};
static const char *mode_names[] = {"off", "monitor", "enforce"};

static void fail(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "spillway-edge: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* One place turns an errno from bpf()/setsockopt into the exit code. */
static void fail_errno(const char *what, int err)
{
	if (err < 0)
		err = -err;
	if (err == EPERM || err == EACCES)
		fail(77, "%s: not permitted (run as root: needs CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON)",
		     what);
	fail(1, "%s: %s", what, strerror(err));
}

static int libbpf_quiet(enum libbpf_print_level lvl, const char *fmt, va_list ap)
{
	if (lvl == LIBBPF_WARN && getenv("SPILLWAY_EDGE_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	if (lvl == LIBBPF_DEBUG && getenv("SPILLWAY_EDGE_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	return 0;
}

static void mkdirs(const char *path)
{
	char buf[600];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			mkdir(buf, 0700);
			*p = '/';
		}
	mkdir(buf, 0700);
}

static void ensure_fs(void)
{
	struct statfs st;
	if (statfs("/sys/fs/bpf", &st) == 0 && st.f_type != BPF_FS_MAGIC)
		if (mount("bpf", "/sys/fs/bpf", "bpf", 0, NULL) && errno != EBUSY)
			fail_errno("mount bpffs on /sys/fs/bpf", errno);
	if (access("/sys/kernel/tracing/events", F_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events", F_OK) != 0)
		mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL); /* best effort */
	char links[600];
	snprintf(links, sizeof(links), "%s/links", pin_root);
	mkdirs(links);
}

static int pinned(const char *name)
{
	char p[700];
	snprintf(p, sizeof(p), "%s/%s", pin_root, name);
	return bpf_obj_get(p);
}

static __u64 sum_percpu(int fd, __u32 key)
{
	__u64 vals[ncpus > 0 ? ncpus : 1], s = 0;
	if (bpf_map_lookup_elem(fd, &key, vals))
		return 0;
	for (int i = 0; i < ncpus; i++)
		s += vals[i];
	return s;
}

/* --- loading ------------------------------------------------------------------------------- */

#define OPEN_OPTS LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = pin_root)

static struct xdp_allow_bpf *load_xdp(void)
{
	OPEN_OPTS;
	struct xdp_allow_bpf *s = xdp_allow_bpf__open_opts(&oo);
	if (!s)
		fail_errno("open xdp program", errno);
	int err = xdp_allow_bpf__load(s);
	if (err)
		fail_errno("load xdp program", err);
	return s;
}

/* Maps of the XDP program: the pinned ones, created by a load when absent. */
static void xdp_maps(int *cfg, int *l4, int *l6)
{
	*cfg = pinned("spw_config");
	if (*cfg < 0) {
		ensure_fs();
		xdp_allow_bpf__destroy(load_xdp()); /* pins the maps */
		*cfg = pinned("spw_config");
		if (*cfg < 0)
			fail_errno("open pinned spw_config", errno);
	}
	*l4 = pinned("spw_lpm4");
	*l6 = pinned("spw_lpm6");
	if (*l4 < 0 || *l6 < 0)
		fail_errno("open pinned LPM tries", errno);
}

static char *reason_names[SPW_MAX_REASONS];
static void load_reason_names(void);

static __u32 reason_id(const char *name, __u32 dflt)
{
	load_reason_names();
	for (__u32 i = 0; i < SPW_MAX_REASONS; i++)
		if (reason_names[i] && !strcmp(reason_names[i], name))
			return i;
	return dflt;
}

/* trace: -1 keep, 0 off, 1 on */
static void config_init2(int fd, int port, int mode, int trace)
{
	struct spw_config c;
	__u32 zero = 0;
	if (bpf_map_lookup_elem(fd, &zero, &c))
		fail_errno("read spw_config", errno);
	if (c.abi == 0) { /* fresh maps: safe defaults */
		c.abi = SPW_ABI_VERSION;
		c.mode = SPW_MODE_MONITOR;
		c.ingest_port = 8080;
	}
	if (port > 0)
		c.ingest_port = (__u16)port;
	if (mode >= 0)
		c.mode = (__u32)mode;
	if (trace >= 0)
		c.trace_syn = (__u32)trace;
	if (!c.listen_overflow_reason)
		c.listen_overflow_reason = reason_id("TCP_LISTEN_OVERFLOW", 40);
	if (bpf_map_update_elem(fd, &zero, &c, BPF_ANY))
		fail_errno("write spw_config", errno);
}

static void config_init(int fd, int port, int mode) { config_init2(fd, port, mode, -1); }

static int parse_mode(const char *s)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, mode_names[i]))
			return i;
	fail(2, "mode must be off, monitor or enforce (got \"%s\")", s);
	return -1;
}

static int attach_xdp(struct xdp_allow_bpf *s, const char *dev, const char *xmode)
{
	char path[700];
	unsigned ifindex = if_nametoindex(dev);
	__u32 flags = 0;
	int fd;

	if (!ifindex)
		fail(1, "no such interface: %s", dev);
	snprintf(path, sizeof(path), "%s/links/xdp_%s", pin_root, dev);
	fd = bpf_obj_get(path);
	if (fd >= 0) { /* already attached: swap in the freshly loaded program */
		if (bpf_link_update(fd, bpf_program__fd(s->progs.spw_xdp_allow), NULL))
			fail_errno("update xdp link", errno);
		close(fd);
		return 0;
	}
	if (!strcmp(xmode, "skb"))
		flags = XDP_FLAGS_SKB_MODE;
	else if (!strcmp(xmode, "native"))
		flags = XDP_FLAGS_DRV_MODE;
	LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = flags);
	fd = bpf_link_create(bpf_program__fd(s->progs.spw_xdp_allow), (int)ifindex, BPF_XDP, &lo);
	if (fd < 0 && !strcmp(xmode, "auto")) {
		lo.flags = XDP_FLAGS_SKB_MODE;
		fd = bpf_link_create(bpf_program__fd(s->progs.spw_xdp_allow), (int)ifindex, BPF_XDP,
				     &lo);
	}
	if (fd < 0)
		fail_errno("attach xdp", errno);
	if (bpf_obj_pin(fd, path))
		fail_errno("pin xdp link", errno);
	close(fd);
	return 0;
}

static void attach_trace(int port)
{
	OPEN_OPTS;
	struct droptrace_bpf *s = droptrace_bpf__open_opts(&oo);
	struct bpf_program *p;
	char path[700];
	__u32 zero = 0;

	if (!s)
		fail_errno("open drop tracer", errno);
	int err = droptrace_bpf__load(s);
	if (err)
		fail_errno("load drop tracer", err);
	struct spw_trace_config tc = {.ingest_port = (__u16)(port > 0 ? port : 8080)};
	struct spw_trace_config cur;
	if (port <= 0 && bpf_map_lookup_elem(bpf_map__fd(s->maps.spw_trace_config), &zero, &cur) == 0 &&
	    cur.ingest_port)
		tc = cur;
	bpf_map_update_elem(bpf_map__fd(s->maps.spw_trace_config), &zero, &tc, BPF_ANY);
	bpf_object__for_each_program(p, s->obj) {
		snprintf(path, sizeof(path), "%s/links/trace_%s", pin_root, bpf_program__name(p));
		if (access(path, F_OK) == 0)
			continue; /* attached by an earlier run; maps are shared, so it keeps counting */
		struct bpf_link *l = bpf_program__attach(p);
		if (!l)
			fail_errno(bpf_program__name(p), errno);
		if (bpf_link__pin(l, path))
			fail_errno("pin tracer link", errno);
		bpf_link__disconnect(l);
		bpf_link__destroy(l);
	}
	droptrace_bpf__destroy(s);
}

static int cmd_attach(int argc, char **argv)
{
	const char *devs[16];
	int ndev = 0, port = -1, mode = -1, trace = 1;
	const char *xmode = "auto";
	static struct option o[] = {{"dev", 1, 0, 'd'},      {"port", 1, 0, 'p'},
				    {"mode", 1, 0, 'm'},     {"xdp-mode", 1, 0, 'x'},
				    {"no-trace", 0, 0, 'T'}, {0}};
	int c;
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (c == 'd' && ndev < 16)
			devs[ndev++] = optarg;
		else if (c == 'p')
			port = atoi(optarg);
		else if (c == 'm')
			mode = parse_mode(optarg);
		else if (c == 'x')
			xmode = optarg;
		else if (c == 'T')
			trace = 0;
		else
			fail(2, "attach: bad option");
	}
	ensure_fs();
	struct xdp_allow_bpf *s = load_xdp();
	config_init2(bpf_map__fd(s->maps.spw_config), port, mode, trace);
	for (int i = 0; i < ndev; i++)
		attach_xdp(s, devs[i], xmode);
	xdp_allow_bpf__destroy(s);
	if (trace)
		attach_trace(port);
	printf("{\"attached\":true,\"devices\":%d,\"trace\":%s}\n", ndev, trace ? "true" : "false");
	return 0;
}

static int cmd_detach(int argc, char **argv)
{
	const char *devs[16];
	int ndev = 0, purge = 0, removed = 0;
	static struct option o[] = {{"dev", 1, 0, 'd'}, {"purge", 0, 0, 'P'}, {0}};
	int c;
	char path[1100], dir[700];
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (c == 'd' && ndev < 16)
			devs[ndev++] = optarg;
		else if (c == 'P')
			purge = 1;
		else
			fail(2, "detach: bad option");
	}
	snprintf(dir, sizeof(dir), "%s/links", pin_root);
	if (ndev) {
		for (int i = 0; i < ndev; i++) {
			snprintf(path, sizeof(path), "%s/xdp_%s", dir, devs[i]);
			removed += unlink(path) == 0;
		}
	} else {
		DIR *d = opendir(dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			removed += unlink(path) == 0;
		}
		if (d)
			closedir(d);
	}
	if (!ndev) {
		int cfd = pinned("spw_config");
		struct spw_config c;
		__u32 z = 0;
		if (cfd >= 0 && bpf_map_lookup_elem(cfd, &z, &c) == 0) {
			c.trace_syn = 0;
			bpf_map_update_elem(cfd, &z, &c, BPF_ANY);
		}
	}
	if (purge) {
		DIR *d = opendir(pin_root);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (strncmp(e->d_name, "spw_", 4))
				continue;
			snprintf(path, sizeof(path), "%s/%s", pin_root, e->d_name);
			unlink(path);
		}
		if (d)
			closedir(d);
		rmdir(dir);
		rmdir(pin_root);
	}
	printf("{\"detached\":%d,\"purged\":%s}\n", removed, purge ? "true" : "false");
	return 0;
}

static int cmd_mode(int argc, char **argv)
{
	int cfg, l4, l6;
	if (argc < 2)
		fail(2, "mode: off|monitor|enforce");
	int m = parse_mode(argv[1]);
	xdp_maps(&cfg, &l4, &l6);
	config_init(cfg, -1, m);
	printf("{\"mode\":\"%s\"}\n", mode_names[m]);
	return 0;
}

static int cmd_ranges(int argc, char **argv)
{
	struct spw_cidr_set allow = {}, block = {};
	struct spw_swap_result res;
	char err[512];
	int c, cfg, l4, l6;
	static struct option o[] = {{"allow", 1, 0, 'a'}, {"file", 1, 0, 'a'}, {"block", 1, 0, 'b'}, {0}};
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (c == 'a' || c == 'b') {
			if (spw_ranges_parse_file(optarg, c == 'a' ? &allow : &block, err, sizeof(err)))
				fail(1, "%s", err);
		} else {
			fail(2, "ranges: bad option");
		}
	}
	xdp_maps(&cfg, &l4, &l6);
	config_init(cfg, -1, -1);
	int rc = spw_ranges_swap(cfg, l4, l6, &allow, &block, &res, err, sizeof(err));
	if (rc)
		fail_errno(err, rc);
	printf("{\"generation\":%u,\"allow\":%u,\"block\":%u,\"removed\":%u}\n", res.gen, res.allow,
	       res.block, res.removed);
	return 0;
}

/* --- dump ------------------------------------------------------------------------------------ */

/* Drop-reason names of the running kernel, from the tracepoint's print format. */
static void load_reason_names(void)
{
	static int loaded;
	if (loaded++)
		return;
	/* `ip netns exec` remounts /sys without tracefs: mount it (best effort) */
	if (access("/sys/kernel/tracing/events", F_OK) != 0 &&
	    access("/sys/kernel/debug/tracing/events", F_OK) != 0)
		mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL);
	const char *paths[] = {"/sys/kernel/tracing/events/skb/kfree_skb/format",
			       "/sys/kernel/debug/tracing/events/skb/kfree_skb/format"};
	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(paths[i], "r");
		if (!f)
			continue;
		static char buf[65536];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		fclose(f);
		char *p = strstr(buf, "__print_symbolic");
		while (p && (p = strstr(p, "{ "))) {
			int num;
			char name[96];
			if (sscanf(p, "{ %d, \"%95[^\"]\" }", &num, name) == 2 && num >= 0 &&
			    num < SPW_MAX_REASONS)
				reason_names[num] = strdup(name);
			p += 2;
		}
		return;
	}
}

static int list_links(const char *prefix, int print)
{
	char dir[700];
	int n = 0;
	snprintf(dir, sizeof(dir), "%s/links", pin_root);
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t pl = strlen(prefix);
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, pl))
			continue;
		if (print)
			printf("%s\"%s\"", n ? "," : "", e->d_name + pl);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* The kernel's own counters for this network namespace (what nstat shows). */
static void print_netstat(void)
{
	const char *want[] = {"ListenOverflows", "ListenDrops", "TCPSynRetrans", "TCPReqQFullDrop"};
	unsigned long long val[4] = {0};
	FILE *f = fopen("/proc/net/netstat", "r");
	static char names[8192], vals[8192];
	while (f && fgets(names, sizeof(names), f) && fgets(vals, sizeof(vals), f)) {
		if (strncmp(names, "TcpExt:", 7))
			continue;
		char *sn, *sv;
		char *n = strtok_r(names + 7, " \n", &sn), *v = strtok_r(vals + 7, " \n", &sv);
		while (n && v) {
			for (int i = 0; i < 4; i++)
				if (!strcmp(n, want[i]))
					val[i] = strtoull(v, NULL, 10);
			n = strtok_r(NULL, " \n", &sn);
			v = strtok_r(NULL, " \n", &sv);
		}
	}
	if (f)
		fclose(f);
	printf("\"netstat\":{");
	for (int i = 0; i < 4; i++)
		printf("%s\"%s\":%llu", i ? "," : "", want[i], val[i]);
	printf("},");
}

static void require_bpf(void);

static int cmd_dump(void)
{
	__u32 zero = 0;
	int fd;
	ncpus = libbpf_num_possible_cpus();
	/* Without the privileges every pin is unreadable and the dump would look like "nothing
	 * attached": say "not permitted" (77) instead, so callers report the edge as unavailable. */
	require_bpf();
	fd = pinned("spw_config");
	if (fd < 0 && (errno == EPERM || errno == EACCES))
		fail_errno("open pinned maps", errno);
	if (fd >= 0)
		close(fd);
	printf("{\"pinRoot\":\"%s\",\"abi\":%d,\"attached\":{\"xdp\":[", pin_root, SPW_ABI_VERSION);
	list_links("xdp_", 1);
	printf("],\"trace\":%s},", list_links("trace_", 0) ? "true" : "false");
	print_netstat();

	fd = pinned("spw_config");
	struct spw_config c;
	if (fd >= 0 && bpf_map_lookup_elem(fd, &zero, &c) == 0) {
		unsigned g = c.active_gen & 1;
		printf("\"xdp\":{\"traceSyn\":%s,\"mode\":\"%s\",\"port\":%u,\"generation\":%u,\"allow\":%u,"
		       "\"block\":%u,\"loadedAtMs\":%llu,\"verdicts\":{",
		       c.trace_syn ? "true" : "false", c.mode < 3 ? mode_names[c.mode] : "?", c.ingest_port, g, c.allow_count[g],
		       c.block_count[g], (unsigned long long)(c.loaded_at_ns[g] / 1000000));
		int vfd = pinned("spw_verdicts");
		for (__u32 k = 0; k < SPW_V_MAX; k++)
			printf("%s\"%s\":%llu", k ? "," : "", verdict_names[k],
			       vfd >= 0 ? (unsigned long long)sum_percpu(vfd, k) : 0ull);
		printf("}},");
	} else {
		printf("\"xdp\":null,");
	}

	fd = pinned("spw_drop_reasons");
	if (fd >= 0) {
		struct spw_trace_config tc = {};
		int tfd = pinned("spw_trace_config"), sfd = pinned("spw_trace_stats"),
		    hfd = pinned("spw_gap_hist");
		if (tfd >= 0)
			bpf_map_lookup_elem(tfd, &zero, &tc);
		load_reason_names();
		printf("\"trace\":{\"port\":%u,\"dropsByReason\":{", tc.ingest_port);
		int first = 1;
		for (__u32 r = 0; r < SPW_MAX_REASONS; r++) {
			__u64 v = sum_percpu(fd, r);
			if (!v)
				continue;
			if (reason_names[r])
				printf("%s\"%s\":%llu", first ? "" : ",", reason_names[r],
				       (unsigned long long)v);
			else
				printf("%s\"REASON_%u\":%llu", first ? "" : ",", r, (unsigned long long)v);
			first = 0;
		}
		printf("},\"listenOverflows\":{\"syn\":%llu,\"ack\":%llu},\"synRetransmits\":%llu,",
		       (unsigned long long)sum_percpu(sfd, SPW_T_LISTEN_OVERFLOW_SYN),
		       (unsigned long long)sum_percpu(sfd, SPW_T_LISTEN_OVERFLOW_ACK),
		       (unsigned long long)sum_percpu(sfd, SPW_T_SYN_DROPS));
		printf("\"synRetryGap\":{\"sumMs\":%llu,\"count\":%llu,\"bucketsMs\":[",
		       (unsigned long long)sum_percpu(sfd, SPW_T_GAP_SUM_MS),
		       (unsigned long long)sum_percpu(sfd, SPW_T_GAP_COUNT));
		/* bucket i holds gaps in [2^(i-1), 2^i) ms (bucket 0: < 1 ms; the last one everything
		 * from 2^(N-2) ms up); printed as [upper bound, count] */
		for (__u32 b = 0; b < SPW_GAP_BUCKETS; b++)
			printf("%s[%llu,%llu]", b ? "," : "", b == 0 ? 1ull : (1ull << b),
			       (unsigned long long)sum_percpu(hfd, b));
		printf("]}},");
	} else {
		printf("\"trace\":null,");
	}

	fd = pinned("spw_steer_config");
	struct spw_steer_config sc;
	if (fd >= 0 && bpf_map_lookup_elem(fd, &zero, &sc) == 0) {
		int sfd = pinned("spw_steer_stats"), pfd = pinned("spw_steer_picks"),
		    lfd = pinned("spw_worker_load");
		printf("\"steer\":{\"enabled\":%s,\"workers\":%u,\"busyPct\":%u,\"stats\":{",
		       sc.enabled ? "true" : "false", sc.nworkers, sc.busy_pct);
		for (__u32 k = 0; k < SPW_S_MAX; k++)
			printf("%s\"%s\":%llu", k ? "," : "", steer_names[k],
			       (unsigned long long)sum_percpu(sfd, k));
		printf("},\"workersDetail\":[");
		for (__u32 i = 0; i < sc.nworkers && i < SPW_MAX_WORKERS; i++) {
			struct spw_worker_load ld = {};
			bpf_map_lookup_elem(lfd, &i, &ld);
			printf("%s{\"slot\":%u,\"picks\":%llu,\"queue\":%u,\"backlog\":%u}", i ? "," : "",
			       i, (unsigned long long)sum_percpu(pfd, i), ld.qlen, ld.qmax);
		}
		printf("]}");
	} else {
		printf("\"steer\":null");
	}
	printf("}\n");
	return 0;
}

/* --- SK_REUSEPORT steering -------------------------------------------------------------------- */

struct listener {
	unsigned long inode;
	int pid, fd;  /* owner's fd */
	int local_fd; /* our duplicate (pidfd_getfd) */
};

/* Inodes of TCP sockets listening on :port in this network namespace. */
static int find_listen_inodes(int port, unsigned long *inodes, int max)
{
	const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	int n = 0;
	for (int f = 0; f < 2; f++) {
		FILE *fp = fopen(files[f], "r");
		char line[512];
		if (!fp)
			continue;
		fgets(line, sizeof(line), fp);
		while (fgets(line, sizeof(line), fp)) {
			char local[128];
			unsigned st, lport;
			unsigned long inode;
			if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*d %*d %lu", local, &st,
				   &inode) != 3)
				continue;
			char *colon = strrchr(local, ':');
			if (!colon || sscanf(colon + 1, "%x", &lport) != 1)
				continue;
			if (st == 0x0A && (int)lport == port && n < max)
				inodes[n++] = inode;
		}
		fclose(fp);
	}
	return n;
}

static int find_listeners(int port, struct listener *out, int max)
{
	unsigned long inodes[64];
	int ni = find_listen_inodes(port, inodes, 64), n = 0;
	DIR *proc = opendir("/proc");
	struct dirent *pe;
	while (proc && (pe = readdir(proc)) && n < max) {
		int pid = atoi(pe->d_name);
		if (pid <= 0 || pid == getpid())
			continue;
		char fddir[64];
		snprintf(fddir, sizeof(fddir), "/proc/%d/fd", pid);
		DIR *fds = opendir(fddir);
		struct dirent *fe;
		while (fds && (fe = readdir(fds)) && n < max) {
			char lp[400], target[64];
			snprintf(lp, sizeof(lp), "%s/%s", fddir, fe->d_name);
			ssize_t l = readlink(lp, target, sizeof(target) - 1);
			unsigned long ino;
			if (l <= 0)
				continue;
			target[l] = 0;
			if (sscanf(target, "socket:[%lu]", &ino) != 1)
				continue;
			for (int i = 0; i < ni; i++) {
				if (inodes[i] != ino)
					continue;
				int dup = 0;
				for (int j = 0; j < n; j++)
					dup |= out[j].inode == ino;
				if (!dup)
					out[n++] = (struct listener){ino, pid, atoi(fe->d_name), -1};
			}
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
	/* stable slots: by (pid, fd) */
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (out[j].pid < out[i].pid || (out[j].pid == out[i].pid && out[j].fd < out[i].fd)) {
				struct listener t = out[i];
				out[i] = out[j];
				out[j] = t;
			}
	return n;
}

static int grab_fd(int pid, int fd)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0)
		return -1;
	int r = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
	close(pfd);
	return r;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = 1; }

static __u64 mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
}

static int cmd_steer(int argc, char **argv)
{
	int port = 0, busy = 50, interval_us = 1000, stale_ms = 250, c;
	static struct option o[] = {{"port", 1, 0, 'p'},        {"busy-pct", 1, 0, 'b'},
				    {"interval-us", 1, 0, 'i'}, {"stale-ms", 1, 0, 's'}, {0}};
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (c == 'p') port = atoi(optarg);
		else if (c == 'b') busy = atoi(optarg);
		else if (c == 'i') interval_us = atoi(optarg);
		else if (c == 's') stale_ms = atoi(optarg);
		else fail(2, "steer: bad option");
	}
	if (port <= 0 || busy <= 0 || busy > 100 || interval_us < 50)
		fail(2, "steer: --port N required; --busy-pct 1..100; --interval-us >= 50");
	ensure_fs();
	OPEN_OPTS;
	struct reuseport_steer_bpf *s = reuseport_steer_bpf__open_opts(&oo);
	if (!s)
		fail_errno("open steering program", errno);
	int err = reuseport_steer_bpf__load(s);
	if (err)
		fail_errno("load steering program", err);
	int cfg_fd = bpf_map__fd(s->maps.spw_steer_config);
	int arr_fd = bpf_map__fd(s->maps.spw_workers);
	int load_fd = bpf_map__fd(s->maps.spw_worker_load);
	int prog_fd = bpf_program__fd(s->progs.spw_reuseport_steer);
	__u32 zero = 0;
	struct listener ls[SPW_MAX_WORKERS];
	int n = 0;
	__u64 last_scan = 0;

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop) {
		__u64 now = mono_ns();
		if (now - last_scan > 500000000ull) { /* re-scan twice a second: workers come and go */
			struct listener found[SPW_MAX_WORKERS];
			int nf = find_listeners(port, found, SPW_MAX_WORKERS), changed = nf != n;
			for (int i = 0; i < nf && !changed; i++)
				changed = found[i].inode != ls[i].inode;
			if (changed) {
				for (int i = 0; i < n; i++)
					close(ls[i].local_fd);
				n = 0;
				for (int i = 0; i < nf; i++) {
					found[i].local_fd = grab_fd(found[i].pid, found[i].fd);
					if (found[i].local_fd < 0)
						fail_errno("pidfd_getfd (needs CAP_SYS_PTRACE)", errno);
					ls[n++] = found[i];
				}
				struct spw_steer_config sc = {.nworkers = 0, .busy_pct = (__u32)busy,
							      .enabled = 0, .stale_ns = (__u64)stale_ms * 1000000ull};
				bpf_map_update_elem(cfg_fd, &zero, &sc, BPF_ANY);
				for (__u32 i = 0; i < SPW_MAX_WORKERS; i++)
					bpf_map_delete_elem(arr_fd, &i);
				for (__u32 i = 0; i < (__u32)n; i++) {
					__u64 v = (__u64)ls[i].local_fd;
					if (bpf_map_update_elem(arr_fd, &i, &v, BPF_ANY))
						fail_errno("register listener in spw_workers", errno);
					if (setsockopt(ls[i].local_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF,
						       &prog_fd, sizeof(prog_fd)))
						fail_errno("SO_ATTACH_REUSEPORT_EBPF", errno);
				}
				sc.nworkers = (__u32)n;
				sc.enabled = n > 0;
				bpf_map_update_elem(cfg_fd, &zero, &sc, BPF_ANY);
				printf("{\"steering\":{\"port\":%d,\"workers\":[", port);
				for (int i = 0; i < n; i++)
					printf("%s{\"slot\":%d,\"pid\":%d,\"fd\":%d}", i ? "," : "", i,
					       ls[i].pid, ls[i].fd);
				printf("]}}\n");
			}
			last_scan = now;
		}
		for (__u32 i = 0; i < (__u32)n; i++) {
			struct tcp_info ti;
			socklen_t tl = sizeof(ti);
			struct spw_worker_load ld = {.updated_ns = mono_ns()};
			if (getsockopt(ls[i].local_fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0) {
				/* for a listener: unacked = accept queue length, sacked = its backlog */
				ld.qlen = ti.tcpi_unacked;
				ld.qmax = ti.tcpi_sacked ? ti.tcpi_sacked : 1;
			}
			bpf_map_update_elem(load_fd, &i, &ld, BPF_ANY);
		}
		struct timespec ts = {0, interval_us * 1000L};
		nanosleep(&ts, NULL);
	}
	/* leave the group on the kernel hash, not on a program whose data goes stale */
	if (n > 0)
		setsockopt(ls[0].local_fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &zero, sizeof(zero));
	struct spw_steer_config off = {0};
	bpf_map_update_elem(cfg_fd, &zero, &off, BPF_ANY);
	printf("{\"steering\":{\"port\":%d,\"detached\":true}}\n", port);
	reuseport_steer_bpf__destroy(s);
	return 0;
}

static int cmd_steer_detach(int argc, char **argv)
{
	int port = 0, c, done = 0, zero = 0;
	static struct option o[] = {{"port", 1, 0, 'p'}, {0}};
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1)
		if (c == 'p') port = atoi(optarg);
	struct listener ls[SPW_MAX_WORKERS];
	int n = find_listeners(port, ls, SPW_MAX_WORKERS);
	for (int i = 0; i < n; i++) {
		int fd = grab_fd(ls[i].pid, ls[i].fd);
		if (fd >= 0) {
			done += setsockopt(fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &zero, sizeof(zero)) == 0;
			close(fd);
		}
	}
	printf("{\"steerDetached\":%d,\"listeners\":%d}\n", done, n);
	return 0;
}

/* Exits 77 when bpf() is not permitted here (a tiny map that is closed at once). */
static void require_bpf(void)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "spw_check", 4, 4, 1, NULL);
	if (fd < 0)
		fail_errno("bpf(BPF_MAP_CREATE)", errno);
	close(fd);
}

static int cmd_check(void)
{
	require_bpf();
	printf("{\"ok\":true}\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *env = getenv("SPILLWAY_BPF_PIN_ROOT");
	int i = 1;
	if (env && *env)
		snprintf(pin_root, sizeof(pin_root), "%s", env);
	libbpf_set_print(libbpf_quiet);
	ncpus = libbpf_num_possible_cpus();
	if (i + 1 < argc && !strcmp(argv[i], "--pin-root")) {
		snprintf(pin_root, sizeof(pin_root), "%s", argv[i + 1]);
		i += 2;
	}
	if (i >= argc)
		fail(2, "usage: spillway-edge [--pin-root DIR] check|attach|detach|mode|ranges|dump|status|steer|steer-detach");
	const char *cmd = argv[i];
	argc -= i;
	argv += i;
	optind = 1;
	if (!strcmp(cmd, "check")) return cmd_check();
	if (!strcmp(cmd, "attach")) return cmd_attach(argc, argv);
	if (!strcmp(cmd, "detach")) return cmd_detach(argc, argv);
	if (!strcmp(cmd, "mode")) return cmd_mode(argc, argv);
	if (!strcmp(cmd, "ranges")) return cmd_ranges(argc, argv);
	if (!strcmp(cmd, "dump") || !strcmp(cmd, "status")) return cmd_dump();
	if (!strcmp(cmd, "steer")) return cmd_steer(argc, argv);
	if (!strcmp(cmd, "steer-detach")) return cmd_steer_detach(argc, argv);
	fail(2, "unknown command: %s", cmd);
	return 2;
}
