#include "ranges.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ctype.h>
#include <bpf/bpf.h>

#include "spillway_maps.h"

static int set_push(struct spw_cidr_set *set, const struct spw_cidr *c)
{
	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 64;
		void *v = realloc(set->v, cap * sizeof(*c));
		if (!v)
			return -1;
		set->v = v;
		set->cap = cap;
	}
	set->v[set->n++] = *c;
	return 0;
}

void spw_cidr_set_free(struct spw_cidr_set *set)
{
	free(set->v);
	memset(set, 0, sizeof(*set));
}

int spw_cidr_parse(const char *s, struct spw_cidr *out)
{
	char buf[128];
	char *slash;
	long bits = -1;
	size_t len = strlen(s);

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len + 1);
	slash = strchr(buf, '/');
	if (slash) {
		char *end;
		*slash = 0;
		errno = 0;
		bits = strtol(slash + 1, &end, 10);
		if (errno || *end || end == slash + 1)
			return -1;
	}
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, out->addr) == 1) {
		out->family = 4;
		if (bits < 0)
			bits = 32;
		if (bits > 32)
			return -1;
	} else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
		out->family = 6;
		if (bits < 0)
			bits = 128;
		if (bits > 128)
			return -1;
	} else {
		return -1;
	}
	out->bits = (uint8_t)bits;
	/* clear host bits so equal networks are equal keys */
	for (int i = 0; i < 16; i++) {
		int keep = (int)bits - i * 8;
		if (keep >= 8)
			continue;
		out->addr[i] &= keep <= 0 ? 0 : (uint8_t)(0xFF << (8 - keep));
	}
	return 0;
}

void spw_cidr_format(const struct spw_cidr *c, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	inet_ntop(c->family == 4 ? AF_INET : AF_INET6, c->addr, a, sizeof(a));
	snprintf(buf, len, "%s/%u", a, c->bits);
}

static int add_entry(const char *tok, const char *name, int line, struct spw_cidr_set *set,
		     char *err, size_t errlen)
{
	struct spw_cidr c;
	if (spw_cidr_parse(tok, &c)) {
		snprintf(err, errlen, "%s:%d: not a CIDR or address: \"%s\"", name, line, tok);
		return -1;
	}
	if (set_push(set, &c)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* Minimal JSON walk: strings are collected only inside the array value of a wanted key (or of a
 * top-level array). Provider files are small and flat; anything else is an error, not a guess. */
static int parse_json(const char *t, const char *name, struct spw_cidr_set *set, char *err,
		      size_t errlen)
{
	const char *p = t;
	int line = 1, depth = 0, collect_depth = -1, found = 0;
	char last_str[128] = "", tok[128];
	int top_array = 0;

	while (*p && isspace((unsigned char)*p))
		p++;
	top_array = *p == '[';
	for (; *p; p++) {
		char ch = *p;
		if (ch == '\n')
			line++;
		if (ch == '"') {
			size_t n = 0;
			p++;
			while (*p && *p != '"') {
				if (*p == '\\' && p[1])
					p++;
				if (n < sizeof(tok) - 1)
					tok[n++] = *p;
				p++;
			}
			tok[n] = 0;
			if (!*p)
				break;
			if (collect_depth >= 0 && depth == collect_depth) {
				if (add_entry(tok, name, line, set, err, errlen))
					return -1;
			} else {
				snprintf(last_str, sizeof(last_str), "%s", tok);
			}
			continue;
		}
		if (ch == '[' || ch == '{') {
			depth++;
			if (ch == '[' && collect_depth < 0) {
				const char *q = p - 1;
				while (q > t && isspace((unsigned char)*q))
					q--;
				if ((top_array && depth == 1) ||
				    (*q == ':' && (!strcmp(last_str, "hooks") ||
						   !strcmp(last_str, "WEBHOOKS")))) {
					collect_depth = depth;
					found = 1;
				}
			}
		} else if (ch == ']' || ch == '}') {
			if (depth == collect_depth)
				collect_depth = -1;
			depth--;
		}
	}
	if (!found) {
		snprintf(err, errlen,
			 "%s: JSON without a \"hooks\" (GitHub meta) or \"WEBHOOKS\" (Stripe) array",
			 name);
		return -1;
	}
	return 0;
}

int spw_ranges_parse_text(const char *text, const char *name, struct spw_cidr_set *set, char *err,
			  size_t errlen)
{
	const char *p = text;
	int line = 0;

	while (*p && isspace((unsigned char)*p))
		p++;
	if (*p == '{' || *p == '[')
		return parse_json(text, name, set, err, errlen);

	p = text;
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char buf[256];
		char *s, *e;
		line++;
		if (len >= sizeof(buf)) {
			snprintf(err, errlen, "%s:%d: line too long", name, line);
			return -1;
		}
		memcpy(buf, p, len);
		buf[len] = 0;
		if ((s = strchr(buf, '#')))
			*s = 0;
		s = buf;
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = 0;
		if (*s && add_entry(s, name, line, set, err, errlen))
			return -1;
		p = eol ? eol + 1 : p + len;
	}
	return 0;
}

int spw_ranges_parse_file(const char *path, struct spw_cidr_set *set, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;
	int rc;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	if (n < 0 || n > 64L << 20) {
		fclose(f);
		snprintf(err, errlen, "%s: unreadable or larger than 64 MiB", path);
		return -1;
	}
	buf = malloc(n + 1);
	if (!buf || fread(buf, 1, n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		snprintf(err, errlen, "%s: read failed", path);
		return -1;
	}
	buf[n] = 0;
	fclose(f);
	rc = spw_ranges_parse_text(buf, path, set, err, errlen);
	free(buf);
	return rc;
}

/* Deletes every key of generation gen from a trie; returns the count or -errno. */
static int purge_gen(int fd, size_t keysz, unsigned gen)
{
	uint8_t key[sizeof(struct spw_lpm6_key)], next[sizeof(struct spw_lpm6_key)];
	uint8_t *batch = NULL;
	size_t n = 0, cap = 0;
	int removed = 0, rc;
	void *prev = NULL;

	/* Collect first, delete after: deleting while iterating a trie restarts the walk. */
	while ((rc = bpf_map_get_next_key(fd, prev, next)) == 0) {
		if (((struct spw_lpm4_key *)next)->gen == gen) {
			if (n == cap) {
				cap = cap ? cap * 2 : 256;
				uint8_t *b = realloc(batch, cap * keysz);
				if (!b) {
					free(batch);
					return -ENOMEM;
				}
				batch = b;
			}
			memcpy(batch + n * keysz, next, keysz);
			n++;
		}
		memcpy(key, next, keysz);
		prev = key;
	}
	for (size_t i = 0; i < n; i++)
		if (bpf_map_delete_elem(fd, batch + i * keysz) == 0)
			removed++;
	free(batch);
	return removed;
}

static int insert_set(int fd4, int fd6, const struct spw_cidr_set *set, unsigned gen, unsigned list,
		      char *err, size_t errlen)
{
	uint8_t one = 1;
	for (size_t i = 0; i < set->n; i++) {
		const struct spw_cidr *c = &set->v[i];
		int rc;
		if (c->family == 4) {
			struct spw_lpm4_key k = {.prefixlen = 16 + c->bits, .gen = gen, .list = list};
			memcpy(k.addr, c->addr, 4);
			rc = bpf_map_update_elem(fd4, &k, &one, BPF_ANY);
		} else {
			struct spw_lpm6_key k = {.prefixlen = 16 + c->bits, .gen = gen, .list = list};
			memcpy(k.addr, c->addr, 16);
			rc = bpf_map_update_elem(fd6, &k, &one, BPF_ANY);
		}
		if (rc) {
			char b[64];
			spw_cidr_format(c, b, sizeof(b));
			snprintf(err, errlen, "map update for %s failed: %s", b, strerror(errno));
			return -errno;
		}
	}
	return 0;
}

int spw_ranges_swap(int cfg_fd, int lpm4_fd, int lpm6_fd, const struct spw_cidr_set *allow,
		    const struct spw_cidr_set *block, struct spw_swap_result *res, char *err,
		    size_t errlen)
{
	struct spw_config cfg;
	struct timespec ts;
	__u32 zero = 0;
	unsigned old, next;
	int rc, r4, r6;

	if (bpf_map_lookup_elem(cfg_fd, &zero, &cfg)) {
		snprintf(err, errlen, "config map lookup: %s", strerror(errno));
		return -errno;
	}
	old = cfg.active_gen & 1;
	next = old ^ 1;
	/* leftovers of an interrupted swap */
	purge_gen(lpm4_fd, sizeof(struct spw_lpm4_key), next);
	purge_gen(lpm6_fd, sizeof(struct spw_lpm6_key), next);
	if ((rc = insert_set(lpm4_fd, lpm6_fd, allow, next, SPW_LIST_ALLOW, err, errlen)) ||
	    (rc = insert_set(lpm4_fd, lpm6_fd, block, next, SPW_LIST_BLOCK, err, errlen))) {
		purge_gen(lpm4_fd, sizeof(struct spw_lpm4_key), next);
		purge_gen(lpm6_fd, sizeof(struct spw_lpm6_key), next);
		return rc;
	}
	/* Two writes: the counts of the inactive generation first (no reader uses them yet), then the
	 * one-byte flip, so no reader can pair the new generation with stale counts. */
	clock_gettime(CLOCK_REALTIME, &ts);
	cfg.allow_count[next] = (__u32)allow->n;
	cfg.block_count[next] = (__u32)block->n;
	cfg.loaded_at_ns[next] = (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
	if (bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY))
		goto fail;
	cfg.active_gen = (__u8)next;
	if (bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY))
		goto fail;
	r4 = purge_gen(lpm4_fd, sizeof(struct spw_lpm4_key), old);
	r6 = purge_gen(lpm6_fd, sizeof(struct spw_lpm6_key), old);
	cfg.allow_count[old] = cfg.block_count[old] = 0;
	bpf_map_update_elem(cfg_fd, &zero, &cfg, BPF_ANY);
	if (res) {
		res->gen = next;
		res->allow = (unsigned)allow->n;
		res->block = (unsigned)block->n;
		res->removed = (unsigned)((r4 > 0 ? r4 : 0) + (r6 > 0 ? r6 : 0));
	}
	return 0;
fail:
	snprintf(err, errlen, "config map update: %s", strerror(errno));
	return -errno;
}
