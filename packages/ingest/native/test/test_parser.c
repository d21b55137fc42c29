/* Unit tests for http_parser.c. Run with native/test/run.sh (ASan + UBSan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "http_parser.h"

static const hp_limits lim = {.max_head_bytes = 1024, .max_headers = 8};

/* Scans and parses a complete head; returns the parser status, fills h and head_len. */
static int head_of(const char *raw, hp_head *h, size_t *head_len) {
  hp_scan sc = {0};
  int r = hp_scan_head(&sc, raw, strlen(raw), &lim, head_len);
  if (r != HP_OK) return r;
  return hp_parse_head(raw, *head_len, &lim, h);
}

static int status_of(const char *raw) {
  static hp_head h;
  size_t n;
  return head_of(raw, &h, &n);
}

/* Decodes a body fed one byte at a time; returns final status and the decoded bytes. */
static int body_bytewise(const hp_head *h, const char *in, size_t len, char *out, size_t *out_len, size_t *used) {
  hp_body b;
  hp_body_init(&b, h);
  size_t o = 0, pos = 0;
  int r = HP_AGAIN;
  while (pos <= len) {
    size_t avail = pos < len ? 1 : 0;
    size_t u;
    const char *d;
    size_t dl;
    r = hp_body_feed(&b, in + pos, avail, &u, &d, &dl);
    pos += u;
    if (r == HP_DATA) {
      memcpy(out + o, d, dl);
      o += dl;
      continue;
    }
    if (r != HP_AGAIN || pos == len) break;
  }
  *out_len = o;
  *used = pos;
  return r;
}

static void test_scan_incremental(void) {
  const char *raw = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
  hp_scan sc = {0};
  size_t hl = 0;
  int r = HP_AGAIN;
  size_t n;
  for (n = 1; n <= strlen(raw) && r == HP_AGAIN; n++) r = hp_scan_head(&sc, raw, n, &lim, &hl);
  CHECK(r == HP_OK);
  CHECK(hl == strlen(raw) - 3);
  /* A CR at the very end of the input is not judged until its successor arrives. */
  hp_scan sc2 = {0};
  CHECK(hp_scan_head(&sc2, "POST / HTTP/1.1\r", 16, &lim, &hl) == HP_AGAIN);
  CHECK(hp_scan_head(&sc2, "POST / HTTP/1.1\rX", 17, &lim, &hl) == HP_E_BAD);
}

static void test_valid_heads(void) {
  hp_head h;
  size_t hl;
  CHECK(head_of("POST /ingest/s1?x=1 HTTP/1.1\r\nHost: a\r\nX-Sig:  v1,abc \t\r\nContent-Length: 12\r\n\r\n", &h, &hl) == HP_OK);
  CHECK(h.method.len == 4 && memcmp(h.method.p, "POST", 4) == 0);
  CHECK(h.target.len == 14 && memcmp(h.target.p, "/ingest/s1?x=1", 14) == 0);
  CHECK(h.version_minor == 1 && h.keep_alive == 1 && h.content_length == 12 && !h.chunked);
  CHECK(h.n_headers == 3);
  CHECK(h.headers[1].value.len == 6 && memcmp(h.headers[1].value.p, "v1,abc", 6) == 0);
  CHECK(head_of("\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\n\r\n", &h, &hl) == HP_OK); /* leading empty lines */
  CHECK(h.content_length == -1);
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ChUnKeD\r\n\r\n", &h, &hl) == HP_OK && h.chunked);
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n", &h, &hl) == HP_OK && !h.keep_alive);
  CHECK(head_of("POST / HTTP/1.0\r\n\r\n", &h, &hl) == HP_OK && !h.keep_alive);
  CHECK(head_of("POST / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h, &hl) == HP_OK && h.keep_alive);
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", &h, &hl) == HP_OK && h.expect_continue);
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nX-Latin: caf\xe9\r\n\r\n", &h, &hl) == HP_OK); /* obs-text */
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n", &h, &hl) == HP_OK && h.content_length == 7);
}

/* Heads the parser must refuse, and the status each gets. */
static const struct {
  const char *raw;
  int want;
} k_refused[] = {
  {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1,1\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", HP_E_NOT_IMPLEMENTED},
  {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", HP_E_BAD},
  {"POST * HTTP/1.1\r\nHost: a\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/3.0\r\nHost: a\r\n\r\n", HP_E_VERSION},
  {"POST / HTTP/1.1 \r\nHost: a\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\nHost: a\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nHost: a\x01\r\n\r\n", HP_E_BAD},
  {"POST / HTTP/1.1\r\nA:1\r\nB:1\r\nC:1\r\nD:1\r\nE:1\r\nF:1\r\nG:1\r\nHost: a\r\nI: 1\r\n\r\n", HP_E_HEADERS_TOO_LARGE},
  {"\r\n\r\n\r\n\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\n\r\n", HP_E_BAD}, /* too many empty lines */
};

static void test_refused_heads(void) {
  for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++) {
    int got = status_of(k_refused[i].raw);
    CHECK(got == k_refused[i].want);
    if (got != k_refused[i].want) fprintf(stderr, "  refused head #%zu: got %d, want %d\n", i, got, k_refused[i].want);
  }
  char big[2048];
  snprintf(big, sizeof big, "POST / HTTP/1.1\r\nHost: a\r\nX: %01100d\r\n\r\n", 0);
  CHECK(status_of(big) == HP_E_HEADERS_TOO_LARGE);
}

static void test_bodies(void) {
  hp_head h;
  size_t hl, ol, used;
  char out[256];
  const char *raw = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  CHECK(head_of(raw, &h, &hl) == HP_OK);
  const char *body = "5;name=\"v\"\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Trailer: yes\r\n\r\nNEXT";
  CHECK(body_bytewise(&h, body, strlen(body), out, &ol, &used) == HP_OK);
  CHECK(ol == 15 && memcmp(out, "hello0123456789", 15) == 0);
  CHECK(used == strlen(body) - 4); /* stops exactly before the pipelined bytes */
  const char *bad[] = {"5\r\nhelloX\r\n", "\r\n", "g\r\n", "5 \r\nhello\r\n", "5\nhello\r\n", "0\r\nX: y\n\r\n", "0\r\n y\r\n\r\n",
                       "1234567890123456\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(body_bytewise(&h, bad[i], strlen(bad[i]), out, &ol, &used) == HP_E_BAD);

  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n", &h, &hl) == HP_OK);
  CHECK(body_bytewise(&h, "abcdef", 6, out, &ol, &used) == HP_OK && ol == 3 && used == 3);
  CHECK(head_of("POST / HTTP/1.1\r\nHost: a\r\n\r\n", &h, &hl) == HP_OK);
  CHECK(body_bytewise(&h, "xyz", 3, out, &ol, &used) == HP_OK && ol == 0 && used == 0);
}

int main(void) {
  test_scan_incremental();
  test_valid_heads();
  test_refused_heads();
  test_bodies();
  return check_summary("parser");
}
