#include "http_parser.h"

#include <string.h>

/* RFC 9110 tchar: the only bytes allowed in methods and field names. */
static const unsigned char k_tchar[256] = {
  ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1, ['-'] = 1,
  ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
  ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
  ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
  ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
  ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
  ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
  ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
  ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Field-value bytes: VCHAR, obs-text, SP, HTAB. Any other control byte (NUL, CR, DEL...) is refused. */
static inline int is_vbyte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

#define MAX_LEADING_EMPTY_LINES 4
#define MAX_METHOD_LEN 32
#define MAX_CHUNK_SIZE_DIGITS 15 /* 2^60: far past any cap, and no uint64 overflow */
#define MAX_CHUNK_LINE 1024
#define MAX_TRAILER_BYTES 8192
#define MAX_TRAILERS 32
#define MAX_CL_DIGITS 15 /* < 2^53 so the value survives the trip to a JS number */

int hp_span_ieq(hp_span s, const char *lit) {
  size_t n = strlen(lit);
  if (s.len != n) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
    if (c != (unsigned char)lit[i]) return 0;
  }
  return 1;
}

int hp_scan_head(hp_scan *scan, const char *buf, size_t len, const hp_limits *lim, size_t *head_len) {
  size_t i = scan->off;
  for (;;) {
    size_t start = (size_t)scan->leading * 2;
    if (i == start) {
      /* Still at the beginning of the message: swallow a bounded number of empty lines. */
      if (i >= len) break;
      if (buf[i] == '\r') {
        if (i + 1 >= len) break;
        if (buf[i + 1] != '\n') return HP_E_BAD;
        if (++scan->leading > MAX_LEADING_EMPTY_LINES) return HP_E_BAD;
        i += 2;
        continue;
      }
      if (buf[i] == '\n') return HP_E_BAD;
    }
    if (i >= len) break;
    if (i - start >= lim->max_head_bytes) return HP_E_HEADERS_TOO_LARGE;
    unsigned char c = (unsigned char)buf[i];
    if (c == 0) return HP_E_BAD;
    if (c == '\r') {
      if (i + 1 >= len) break; /* look at the LF next time */
      if (buf[i + 1] != '\n') return HP_E_BAD; /* bare CR */
      i++;
      if (i - start >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
        if (i + 1 - start > lim->max_head_bytes) return HP_E_HEADERS_TOO_LARGE;
        *head_len = i + 1;
        scan->off = (uint32_t)(i + 1);
        return HP_OK;
      }
      i++;
      continue;
    }
    if (c == '\n') return HP_E_BAD; /* bare LF: CR was not right before it (handled above) */
    i++;
  }
  scan->off = (uint32_t)i;
  return HP_AGAIN;
}

static int fail(hp_head *out, int code, const char *why) {
  out->error = why;
  return code;
}

/* Comma-separated token list membership, e.g. Connection: keep-alive, Upgrade. */
static int list_has(hp_span v, const char *tok) {
  uint32_t i = 0;
  while (i < v.len) {
    while (i < v.len && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ',')) i++;
    uint32_t b = i;
    while (i < v.len && v.p[i] != ',') i++;
    uint32_t e = i;
    while (e > b && (v.p[e - 1] == ' ' || v.p[e - 1] == '\t')) e--;
    hp_span t = {v.p + b, e - b};
    if (e > b && hp_span_ieq(t, tok)) return 1;
  }
  return 0;
}

int hp_parse_head(const char *buf, size_t head_len, const hp_limits *lim, hp_head *out) {
  const char *p = buf;
  const char *end = buf + head_len;
  uint32_t max_headers = lim->max_headers < HP_MAX_HEADERS_HARD ? lim->max_headers : HP_MAX_HEADERS_HARD;
  out->n_headers = 0;
  out->content_length = -1;
  out->chunked = 0;
  out->expect_continue = 0;
  out->error = NULL;
  while (end - p >= 2 && p[0] == '\r' && p[1] == '\n') p += 2;

  /* request-line = method SP request-target SP HTTP-version CRLF, single spaces only */
  const char *m = p;
  while (p < end && k_tchar[(unsigned char)*p]) p++;
  if (p == m || p >= end || *p != ' ') return fail(out, HP_E_BAD, "bad method");
  if (p - m > MAX_METHOD_LEN) return fail(out, HP_E_BAD, "method too long");
  out->method = (hp_span){m, (uint32_t)(p - m)};
  p++;
  const char *t = p;
  while (p < end && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f) p++;
  if (p == t || p >= end || *p != ' ') return fail(out, HP_E_BAD, "bad request-target");
  if (*t != '/') return fail(out, HP_E_BAD, "request-target must be origin-form");
  out->target = (hp_span){t, (uint32_t)(p - t)};
  p++;
  if (end - p < 10 || memcmp(p, "HTTP/", 5) != 0) return fail(out, HP_E_BAD, "bad HTTP-version");
  if (p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' || p[7] > '9' || p[8] != '\r' || p[9] != '\n')
    return fail(out, HP_E_BAD, "bad HTTP-version");
  if (p[5] != '1' || (p[7] != '0' && p[7] != '1')) return fail(out, HP_E_VERSION, "HTTP version not supported");
  out->version_minor = p[7] - '0';
  p += 10;

  int n_host = 0, n_cl = 0, n_te = 0, conn_close = 0, conn_keep = 0;
  for (;;) {
    if (end - p < 2) return fail(out, HP_E_BAD, "truncated head");
    if (p[0] == '\r' && p[1] == '\n') {
      p += 2;
      break;
    }
    if (*p == ' ' || *p == '\t') return fail(out, HP_E_BAD, "obs-fold");
    const char *n = p;
    while (p < end && k_tchar[(unsigned char)*p]) p++;
    if (p == n || p >= end || *p != ':') return fail(out, HP_E_BAD, "bad field name");
    hp_span name = {n, (uint32_t)(p - n)};
    p++;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    const char *v = p;
    while (p < end && *p != '\r') {
      if (!is_vbyte((unsigned char)*p)) return fail(out, HP_E_BAD, "bad byte in field value");
      p++;
    }
    if (end - p < 2 || p[1] != '\n') return fail(out, HP_E_BAD, "bad line ending");
    const char *ve = p;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    hp_span value = {v, (uint32_t)(ve - v)};
    p += 2;
    if (out->n_headers >= max_headers) return fail(out, HP_E_HEADERS_TOO_LARGE, "too many header fields");
    out->headers[out->n_headers++] = (hp_header){name, value};

    if (hp_span_ieq(name, "content-length")) {
      /* One field, one plain decimal: lists ("5, 5"), signs and spaces are all smuggling vectors. */
      if (++n_cl > 1) return fail(out, HP_E_BAD, "duplicate Content-Length");
      if (value.len == 0 || value.len > MAX_CL_DIGITS) return fail(out, HP_E_BAD, "bad Content-Length");
      int64_t cl = 0;
      for (uint32_t i = 0; i < value.len; i++) {
        char c = value.p[i];
        if (c < '0' || c > '9') return fail(out, HP_E_BAD, "bad Content-Length");
        cl = cl * 10 + (c - '0');
      }
      out->content_length = cl;
    } else if (hp_span_ieq(name, "transfer-encoding")) {
      if (++n_te > 1) return fail(out, HP_E_BAD, "duplicate Transfer-Encoding");
      if (hp_span_ieq(value, "chunked")) {
        out->chunked = 1;
      } else {
        /* Codings other than a lone chunked would have to be undone before the HMAC check. */
        uint32_t e = value.len;
        uint32_t b = e;
        while (b > 0 && value.p[b - 1] != ',' && value.p[b - 1] != ' ' && value.p[b - 1] != '\t') b--;
        hp_span last = {value.p + b, e - b};
        if (b > 0 && hp_span_ieq(last, "chunked")) return fail(out, HP_E_NOT_IMPLEMENTED, "unsupported transfer coding");
        return fail(out, HP_E_BAD, "Transfer-Encoding must end in chunked");
      }
    } else if (hp_span_ieq(name, "host")) {
      n_host++;
    } else if (hp_span_ieq(name, "connection")) {
      if (list_has(value, "close")) conn_close = 1;
      if (list_has(value, "keep-alive")) conn_keep = 1;
    } else if (hp_span_ieq(name, "expect")) {
      if (hp_span_ieq(value, "100-continue")) out->expect_continue = 1;
    }
  }
  if (p != end) return fail(out, HP_E_BAD, "trailing bytes in head");
  if (n_te && n_cl) return fail(out, HP_E_BAD, "Content-Length with Transfer-Encoding");
  if (n_te && out->version_minor == 0) return fail(out, HP_E_BAD, "Transfer-Encoding in HTTP/1.0");
  if (out->version_minor == 1 && n_host != 1) return fail(out, HP_E_BAD, "HTTP/1.1 needs exactly one Host");
  if (n_host > 1) return fail(out, HP_E_BAD, "duplicate Host");
  out->keep_alive = out->version_minor == 1 ? !conn_close : (conn_keep && !conn_close);
  return HP_OK;
}

enum {
  B_SIZE = 0,
  B_EXT,
  B_SIZE_LF,
  B_DATA,
  B_DATA_CR,
  B_DATA_LF,
  B_TRAILER_START,
  B_TRAILER_NAME,
  B_TRAILER_VALUE,
  B_TRAILER_LF,
  B_FINAL_LF,
  B_DONE,
  B_LENGTH,
};

void hp_body_init(hp_body *b, const hp_head *head) {
  memset(b, 0, sizeof *b);
  b->chunked = head->chunked;
  if (b->chunked) {
    b->state = B_SIZE;
  } else {
    b->state = B_LENGTH;
    b->remaining = head->content_length > 0 ? (uint64_t)head->content_length : 0;
  }
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int body_fail(hp_body *b, size_t i, size_t *consumed, const char *why) {
  b->error = why;
  *consumed = i;
  return HP_E_BAD;
}

/* A byte of a chunk-size line's size; returns why it is refused, or NULL. */
static const char *size_byte(hp_body *b, unsigned char c) {
  int h = hexval(c);
  if (h >= 0) {
    if (++b->size_digits > MAX_CHUNK_SIZE_DIGITS) return "chunk size too long";
    b->remaining = (b->remaining << 4) | (uint64_t)h;
  } else if (b->size_digits == 0 || (c != ';' && c != '\r')) {
    return "bad chunk size";
  } else {
    b->state = c == ';' ? B_EXT : B_SIZE_LF;
  }
  return ++b->line_len > MAX_CHUNK_LINE ? "chunk line too long" : NULL;
}

/*
 * The parts of the framing lines that are not sizes, by state: a part ends at `stop` (the decoder
 * moves to `on_stop`); any other byte must be a tchar (`tchar`) or a field-value byte. Each byte
 * counts against the trailers' budget (`trailer`) or the chunk line's.
 */
static const struct {
  unsigned char stop;
  uint8_t on_stop, tchar, trailer;
  const char *bad;
} k_part[] = {
  [B_EXT] = {'\r', B_SIZE_LF, 0, 0, "bad chunk extension"},
  [B_TRAILER_START] = {'\r', B_FINAL_LF, 1, 1, "bad trailer field"},
  [B_TRAILER_NAME] = {':', B_TRAILER_VALUE, 1, 1, "bad trailer field"},
  [B_TRAILER_VALUE] = {'\r', B_TRAILER_LF, 0, 1, "bad trailer field"},
};

static const char *part_byte(hp_body *b, unsigned char c) {
  int trailer = k_part[b->state].trailer;
  if (c == k_part[b->state].stop) {
    b->state = k_part[b->state].on_stop;
  } else if (!(k_part[b->state].tchar ? k_tchar[c] : is_vbyte(c))) {
    return k_part[b->state].bad;
  } else if (b->state == B_TRAILER_START) {
    if (++b->trailer_count > MAX_TRAILERS) return "too many trailers";
    b->state = B_TRAILER_NAME;
  }
  if (trailer) return ++b->trailer_bytes > MAX_TRAILER_BYTES ? "trailers too large" : NULL;
  return ++b->line_len > MAX_CHUNK_LINE ? "chunk line too long" : NULL;
}

/* The line ends inside the framing, by state: the one byte each must be, and where it leads. */
static const struct {
  unsigned char want;
  uint8_t next;
  const char *bad;
} k_expect[] = {
  [B_DATA_CR] = {'\r', B_DATA_LF, "chunk data not followed by CRLF"},
  [B_DATA_LF] = {'\n', B_SIZE, "chunk data not followed by CRLF"},
  [B_TRAILER_LF] = {'\n', B_TRAILER_START, "bare CR in trailer"},
};

int hp_body_feed(hp_body *b, const char *in, size_t len, size_t *consumed, const char **out, size_t *out_len) {
  size_t i = 0;
  *out = NULL;
  *out_len = 0;
  if (b->state == B_DONE) {
    *consumed = 0;
    return HP_OK;
  }
  if (b->state == B_LENGTH) {
    if (b->remaining == 0) {
      b->state = B_DONE;
      *consumed = 0;
      return HP_OK;
    }
    if (len == 0) {
      *consumed = 0;
      return HP_AGAIN;
    }
    size_t n = len < b->remaining ? len : (size_t)b->remaining;
    b->remaining -= n;
    b->total += n;
    *out = in;
    *out_len = n;
    *consumed = n;
    return HP_DATA;
  }
  while (i < len) {
    unsigned char c = (unsigned char)in[i];
    const char *why = NULL;
    switch (b->state) {
      case B_SIZE:
        why = size_byte(b, c);
        break;
      case B_EXT:
      case B_TRAILER_START:
      case B_TRAILER_NAME:
      case B_TRAILER_VALUE:
        why = part_byte(b, c);
        break;
      case B_SIZE_LF:
        if (c != '\n') return body_fail(b, i, consumed, "bare CR in chunk line");
        b->line_len = 0;
        b->size_digits = 0;
        b->state = b->remaining == 0 ? B_TRAILER_START : B_DATA;
        break;
      case B_DATA: {
        size_t avail = len - i;
        size_t n = avail < b->remaining ? avail : (size_t)b->remaining;
        *out = in + i;
        *out_len = n;
        b->remaining -= n;
        b->total += n;
        if (b->remaining == 0) b->state = B_DATA_CR;
        *consumed = i + n;
        return HP_DATA;
      }
      case B_DATA_CR:
      case B_DATA_LF:
      case B_TRAILER_LF:
        if (c != k_expect[b->state].want) return body_fail(b, i, consumed, k_expect[b->state].bad);
        b->state = k_expect[b->state].next;
        break;
      case B_FINAL_LF:
        if (c != '\n') return body_fail(b, i, consumed, "bare CR after last chunk");
        b->state = B_DONE;
        *consumed = i + 1;
        return HP_OK;
      default:
        return body_fail(b, i, consumed, "decoder misuse");
    }
    if (why) return body_fail(b, i, consumed, why);
    i++;
  }
  *consumed = i;
  return HP_AGAIN;
}
