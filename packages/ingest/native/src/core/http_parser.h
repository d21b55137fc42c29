/*
 * Strict HTTP/1.1 request parser for the ingest edge. Pure C, no allocation, no I/O: the ring feeds
 * it bytes, the fuzzer and unit tests feed it the same way. It refuses every framing shape that two
 * HTTP implementations could read differently (request smuggling) instead of "repairing" it.
 */
#ifndef SPW_HTTP_PARSER_H
#define SPW_HTTP_PARSER_H

#include <stddef.h>
#include <stdint.h>

#define HP_MAX_HEADERS_HARD 128

enum {
  HP_OK = 0,        /* complete head / body finished */
  HP_AGAIN = 1,     /* need more bytes */
  HP_DATA = 2,      /* body decoder produced a span of body bytes */
  HP_E_BAD = -400,  /* malformed or ambiguous: 400 and close */
  HP_E_HEADERS_TOO_LARGE = -431,
  HP_E_VERSION = -505,
  HP_E_NOT_IMPLEMENTED = -501,
};

typedef struct hp_limits {
  uint32_t max_head_bytes; /* request line + headers + final CRLF */
  uint32_t max_headers;    /* <= HP_MAX_HEADERS_HARD */
} hp_limits;

typedef struct hp_span {
  const char *p;
  uint32_t len;
} hp_span;

typedef struct hp_header {
  hp_span name; /* as received; compare case-insensitively */
  hp_span value; /* OWS trimmed */
} hp_header;

typedef struct hp_head {
  hp_span method;
  hp_span target;
  int version_minor; /* 0 or 1 */
  uint32_t n_headers;
  hp_header headers[HP_MAX_HEADERS_HARD];
  int64_t content_length; /* -1 when absent */
  int chunked;
  int keep_alive;
  int expect_continue;
  const char *error; /* static reason when a call returned HP_E_* */
} hp_head;

/*
 * Incremental scan for the end of the head. `scan` carries state across calls so bytes are looked
 * at once. Returns HP_OK with *head_len set, HP_AGAIN, or an error (bare LF/CR, NUL, too large).
 */
typedef struct hp_scan {
  uint32_t off;
  uint32_t leading; /* leading empty lines skipped (RFC 9112 §2.2) */
} hp_scan;

int hp_scan_head(hp_scan *scan, const char *buf, size_t len, const hp_limits *lim, size_t *head_len);

/* Parses a complete head (as delimited by hp_scan_head). Spans point into buf. */
int hp_parse_head(const char *buf, size_t head_len, const hp_limits *lim, hp_head *out);

/* Body framing decoder: Content-Length or chunked. */
typedef struct hp_body {
  int chunked;
  int state;
  uint64_t remaining; /* CL bytes left, or bytes left in the current chunk */
  uint64_t total;     /* decoded body bytes so far */
  uint32_t line_len;  /* bytes in the current chunk-size / trailer line */
  uint32_t trailer_bytes;
  uint32_t trailer_count;
  int size_digits;
  int in_ext;
  int line_empty;
  const char *error;
} hp_body;

void hp_body_init(hp_body *b, const hp_head *head);

/*
 * Consumes framing from in[0..len). Returns HP_DATA with out/out_len set to a span of body bytes inside
 * `in` (call again with the rest), HP_OK when the body is complete, HP_AGAIN when all input was
 * consumed, or HP_E_BAD. *consumed is how many input bytes were used in every case.
 */
int hp_body_feed(hp_body *b, const char *in, size_t len, size_t *consumed, const char **out, size_t *out_len);

/* Case-insensitive compare of a span with a lowercase literal. */
int hp_span_ieq(hp_span s, const char *lit);

#endif
