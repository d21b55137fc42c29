/*
 * Differential test of verify.c against the JS verifiers: reads cases the JS side answered (one per
 * line, tab-separated, every field hex; "-" for an absent header):
 *   kind secret sig id ts now_ms(decimal) body expected(ok|missing_signature|bad_signature|timestamp) seed
 * ("=" for a present but empty value)
 * and checks that the C verifier gives the same outcome, with the body fed in pseudo-random pieces
 * (the ring hands it over as it is de-chunked). Prints "verify differential: N cases, M mismatches".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"

static int unhex(const char *s, char **out, size_t *n) {
  if (strcmp(s, "-") == 0) {
    *out = NULL;
    *n = 0;
    return 1;
  }
  if (strcmp(s, "=") == 0) s = "";
  size_t l = strlen(s);
  if (l % 2) return 0;
  char *b = malloc(l / 2 + 1);
  for (size_t i = 0; i < l / 2; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) {
      free(b);
      return 0;
    }
    b[i] = (char)v;
  }
  b[l / 2] = 0;
  *out = b;
  *n = l / 2;
  return 1;
}

static const char *name(int r) {
  switch (r) {
    case SPW_V_OK: return "ok";
    case SPW_V_MISSING_SIGNATURE: return "missing_signature";
    case SPW_V_BAD_SIGNATURE: return "bad_signature";
    case SPW_V_TIMESTAMP: return "timestamp";
    default: return "?";
  }
}

/* The whsec_ rule (packages/shared/src/whsec.ts): a standard secret needs the prefix and base64. */
static int whsec_rule_ok(void) {
  static const struct {
    const char *secret;
    int ok;
  } cases[] = {
    {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1},
    {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa==", 1},
    {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 0}, /* no prefix: refused, as parseWhsec does */
    {"whsec_", 0},
    {"whsec_Mf-Q9r8G", 0},  /* base64url is not the rule */
    {"whsec_MfKQ=9r8", 0},  /* '=' inside */
    {"whsec_MfKQ9r8===", 0}, /* three '=' */
    {"whsec_A", 0},          /* no whole byte */
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *secrets[1] = {cases[i].secret};
    size_t lens[1] = {strlen(cases[i].secret)};
    spw_vsource src;
    int ok = spw_vsource_init(&src, SPW_KIND_STANDARD, secrets, lens, 1) == 0;
    if (ok) spw_vsource_free(&src);
    if (ok != cases[i].ok) {
      fprintf(stderr, "whsec rule: %s %s, expected %s\n", cases[i].secret, ok ? "accepted" : "refused",
              cases[i].ok ? "accepted" : "refused");
      bad++;
    }
  }
  /* A rotation list keeps its usable keys. */
  const char *two[2] = {"bare-key", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"};
  size_t two_lens[2] = {8, strlen(two[1])};
  spw_vsource src;
  if (spw_vsource_init(&src, SPW_KIND_STANDARD, two, two_lens, 2) != 0 || src.n_keys != 1) {
    fprintf(stderr, "whsec rule: a list with one usable key should keep it\n");
    bad++;
  } else {
    spw_vsource_free(&src);
  }
  return bad == 0;
}

int main(int argc, char **argv) {
  if (!whsec_rule_ok()) return 1;
  printf("whsec rule: ok\n");
  if (argc < 2) {
    fprintf(stderr, "usage: test_verify <cases.tsv>\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  size_t cap = 1 << 22;
  char *line = malloc(cap);
  long cases = 0, mismatches = 0;
  while (fgets(line, (int)cap, f)) {
    line[strcspn(line, "\n")] = 0;
    char *field[9];
    int nf = 0;
    for (char *tok = strtok(line, "\t"); tok && nf < 9; tok = strtok(NULL, "\t")) field[nf++] = tok;
    if (nf != 9) {
      fprintf(stderr, "bad line %ld\n", cases + 1);
      return 2;
    }
    int kind = atoi(field[0]);
    char *secret, *sig, *id, *ts, *body;
    size_t secret_n, sig_n, id_n, ts_n, body_n;
    if (!unhex(field[1], &secret, &secret_n) || !unhex(field[2], &sig, &sig_n) || !unhex(field[3], &id, &id_n) ||
        !unhex(field[4], &ts, &ts_n) || !unhex(field[6], &body, &body_n)) {
      fprintf(stderr, "bad hex on line %ld\n", cases + 1);
      return 2;
    }
    long long now = atoll(field[5]);
    unsigned seed = (unsigned)strtoul(field[8], NULL, 10);
    const char *secrets[1] = {secret ? secret : ""};
    size_t lens[1] = {secret_n};
    spw_vsource src;
    if (spw_vsource_init(&src, kind, secrets, lens, 1) != 0) return 2;
    spw_vheaders h = {sig, sig_n, id, id_n, ts, ts_n};
    spw_verifier v;
    int r = spw_verify_begin(&v, &src, &h, now);
    if (r == SPW_V_OK) {
      size_t off = 0;
      while (off < body_n) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 1500;
        if (piece > body_n - off) piece = body_n - off;
        spw_verify_update(&v, body + off, piece);
        off += piece;
      }
      r = spw_verify_finish(&v);
    }
    cases++;
    if (strcmp(name(r), field[7]) != 0) {
      mismatches++;
      if (mismatches <= 20)
        fprintf(stderr, "case %ld (kind %d): C says %s, JS said %s\n", cases, kind, name(r), field[7]);
    }
    spw_vsource_free(&src);
    free(secret);
    free(sig);
    free(id);
    free(ts);
    free(body);
  }
  fclose(f);
  free(line);
  printf("verify differential: %ld cases, %ld mismatches\n", cases, mismatches);
  return mismatches ? 1 : 0;
}
