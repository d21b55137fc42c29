/*
 * libFuzzer target for verify.c (native/fuzz.sh verify). The input is split on 0xff bytes into
 * kind, secret, signature header, webhook-id, webhook-timestamp, a clock offset and the body. Beyond
 * crashes and sanitizer reports it checks that the outcome does not depend on how the body is split
 * into pieces (the ring feeds it as it is de-chunked), and that a header refused before the body is
 * refused the same way every time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"

static int run(const spw_vsource *src, const spw_vheaders *h, int64_t now, const uint8_t *body, size_t n,
               size_t piece) {
  spw_verifier v;
  int r = spw_verify_begin(&v, src, h, now);
  if (r != SPW_V_OK) return r;
  for (size_t off = 0; off < n;) {
    size_t k = piece && piece < n - off ? piece : n - off;
    spw_verify_update(&v, body + off, k);
    off += k;
  }
  return spw_verify_finish(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *field[7] = {0};
  size_t len[7] = {0};
  int nf = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && nf < 7; i++) {
    if (i == size || (data[i] == 0xff && nf < 6)) {
      field[nf] = data + start;
      len[nf] = i - start;
      nf++;
      start = i + 1;
    }
  }
  if (nf < 2 || len[0] < 1) return 0;
  int kind = 1 + data[0] % 4;
  const char *secret = (const char *)field[1];
  spw_vsource src;
  if (spw_vsource_init(&src, kind, &secret, &len[1], 1) != 0) return 0;
  spw_vheaders h = {
      nf > 2 ? (const char *)field[2] : NULL, len[2], nf > 3 ? (const char *)field[3] : NULL, len[3],
      nf > 4 ? (const char *)field[4] : NULL, len[4],
  };
  int64_t now = 1764000000000;
  if (nf > 5)
    for (size_t i = 0; i < len[5] && i < 6; i++) now += (int64_t)(field[5][i] - 128) * 997;
  const uint8_t *body = nf > 6 ? field[6] : (const uint8_t *)"";
  size_t body_n = nf > 6 ? len[6] : 0;
  int whole = run(&src, &h, now, body, body_n, 0);
  /* Bytewise over short bodies only: it is one HMAC update per byte, and the split that matters is
   * at the boundaries, which odd pieces cover for long ones. */
  int bytewise = run(&src, &h, now, body, body_n, body_n <= 256 ? 1 : 7);
  int odd = run(&src, &h, now, body, body_n, 1 + (size % 13));
  if (whole != bytewise || whole != odd) abort();
  uint8_t out[64];
  spw_base64_lenient((const char *)data, size, out, sizeof out);
  spw_vsource_free(&src);
  return 0;
}
