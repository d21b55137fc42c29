/*
 * libFuzzer target for http_parser.c. Besides "no crash, no sanitizer report" it checks that
 * framing does not depend on how the bytes were split across recv() calls: the head scan and the
 * body decoder are run once over the whole input and once fed in pieces, and must agree exactly.
 * Build and run: native/fuzz.sh [seconds|runs]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parser.h"

#define ASSERT(c) do { if (!(c)) __builtin_trap(); } while (0)

static const hp_limits k_lim = {.max_head_bytes = 2048, .max_headers = 16};

/* Decodes the body in pieces of at most `step` bytes; returns status, fills out (cap bytes). */
static int decode(const hp_head *h, const char *in, size_t len, size_t step, char *out, size_t *out_len, size_t *used_total) {
  hp_body b;
  hp_body_init(&b, h);
  size_t pos = 0, olen = 0;
  int r = HP_AGAIN;
  for (;;) {
    size_t end = step ? (pos + step < len ? pos + step : len) : len;
    size_t used;
    const char *o;
    size_t ol;
    r = hp_body_feed(&b, in + pos, end - pos, &used, &o, &ol);
    ASSERT(used <= end - pos);
    pos += used;
    if (r == HP_DATA) {
      ASSERT(o >= in && o + ol <= in + len && ol > 0);
      memcpy(out + olen, o, ol);
      olen += ol;
      ASSERT(b.total == olen);
      if (!h->chunked) ASSERT((int64_t)olen <= h->content_length);
      continue;
    }
    if (r == HP_AGAIN) {
      ASSERT(pos == end);
      if (end == len) break;
      continue;
    }
    break;
  }
  *out_len = olen;
  *used_total = pos;
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned step = data[0] % 17; /* 0 = whole input at once */
  const char *in = (const char *)data + 1;
  size_t len = size - 1;

  hp_scan whole = {0};
  size_t head_len = 0;
  int r1 = hp_scan_head(&whole, in, len, &k_lim, &head_len);

  hp_scan inc = {0};
  size_t head_len2 = 0;
  int r2 = HP_AGAIN;
  for (size_t have = step ? 0 : len; ; ) {
    have = step ? (have + step < len ? have + step : len) : len;
    r2 = hp_scan_head(&inc, in, have, &k_lim, &head_len2);
    if (r2 != HP_AGAIN || have == len) break;
  }
  ASSERT(r1 == r2);
  if (r1 != HP_OK) return 0;
  ASSERT(head_len == head_len2 && head_len <= len);

  hp_head *h = malloc(sizeof *h);
  int pr = hp_parse_head(in, head_len, &k_lim, h);
  if (pr == HP_OK) {
    ASSERT(h->method.p >= in && h->method.p + h->method.len <= in + head_len);
    ASSERT(h->target.p >= in && h->target.p + h->target.len <= in + head_len && h->target.p[0] == '/');
    ASSERT(!(h->chunked && h->content_length >= 0));
    for (uint32_t i = 0; i < h->n_headers; i++) {
      ASSERT(h->headers[i].name.len > 0);
      ASSERT(h->headers[i].value.p >= in && h->headers[i].value.p + h->headers[i].value.len <= in + head_len);
      for (uint32_t k = 0; k < h->headers[i].value.len; k++) ASSERT(h->headers[i].value.p[k] != '\r' && h->headers[i].value.p[k] != '\n');
    }
    const char *body = in + head_len;
    size_t blen = len - head_len;
    char *o1 = malloc(blen + 1), *o2 = malloc(blen + 1);
    size_t l1, l2, u1, u2;
    int b1 = decode(h, body, blen, 0, o1, &l1, &u1);
    int b2 = decode(h, body, blen, step ? step : 1, o2, &l2, &u2);
    ASSERT(b1 == b2 && l1 == l2 && u1 == u2 && memcmp(o1, o2, l1) == 0);
    free(o1);
    free(o2);
  } else {
    ASSERT(pr == HP_E_BAD || pr == HP_E_HEADERS_TOO_LARGE || pr == HP_E_VERSION || pr == HP_E_NOT_IMPLEMENTED);
    ASSERT(h->error != NULL);
  }
  free(h);
  return 0;
}
