/* Provider range files -> CIDR sets, and the atomic swap of the XDP allow/block maps. */
#ifndef SPW_RANGES_H
#define SPW_RANGES_H

#include <stddef.h>
#include <stdint.h>

struct spw_cidr {
	uint8_t family; /* 4 or 6 */
	uint8_t bits;
	uint8_t addr[16];
};

struct spw_cidr_set {
	struct spw_cidr *v;
	size_t n, cap;
};

/* Parses GitHub meta JSON (only the "hooks" array is taken), Stripe JSON ("WEBHOOKS"), a bare JSON
 * array of strings, or plain lines (one CIDR or address per line, '#' comments). Appends to set.
 * Returns 0, or -1 with a message naming file and entry in err. */
int spw_ranges_parse_file(const char *path, struct spw_cidr_set *set, char *err, size_t errlen);
int spw_ranges_parse_text(const char *text, const char *name, struct spw_cidr_set *set, char *err,
			  size_t errlen);
int spw_cidr_parse(const char *s, struct spw_cidr *out);
void spw_cidr_format(const struct spw_cidr *c, char *buf, size_t len);
void spw_cidr_set_free(struct spw_cidr_set *set);

struct spw_swap_result {
	unsigned gen;          /* generation now active */
	unsigned allow, block; /* entries loaded */
	unsigned removed;      /* entries of the previous generation deleted */
};

/* Loads allow and block into the inactive generation of the tries, flips the active generation in
 * the config map, then deletes the previous generation. Readers see either the old sets or the new
 * ones, never a mix. Returns 0 or -errno (err filled). */
int spw_ranges_swap(int cfg_fd, int lpm4_fd, int lpm6_fd, const struct spw_cidr_set *allow,
		    const struct spw_cidr_set *block, struct spw_swap_result *res, char *err,
		    size_t errlen);

#endif
