/*
 * The io_uring loop. It runs on its own thread so a busy JS event loop never delays accept/recv and
 * so CQEs of many connections are reaped and handed up in one threadsafe-function call per loop
 * iteration (see docs/ingest-uring.md for the measurements behind that choice).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "http_parser.h"
#include "verify.h"

#define BGID 7
/* Enough for a client that keeps streaming until it has parsed our answer (then it stops):
 * closing earlier turns the unread bytes into a RST that can destroy the answer before it is read. */
#define DRAIN_MAX_BYTES (16u * 1024u * 1024u)
/* What one discarding recv of a draining connection may drop (MSG_TRUNC: the kernel frees the
 * bytes without copying them to us). */
#define DRAIN_RECV_BYTES (1u << 20)
#define DRAIN_FIN_WAIT_MS 2000
#define DRAIN_MAX_MS 10000
#define TICK_MS 100
/* Body bytes framed and handed up before the embedder has accepted the request. Most webhooks fit,
 * so head and body usually go up in one batch; a larger body waits (in `in`, then in the socket:
 * TCP backpressure, as node:http gives) until the embedder accepts, so a request it is about to
 * refuse (unknown source, 403, 401, 429) cannot make it hold more than this. */
#define PREACCEPT_BODY_BYTES (64u * 1024u)
/* Unsent output a connection may queue. A client that pipelines requests and never reads its answers
 * would otherwise make us frame, answer and queue without end (every answer is kept until it reads).
 * Past this, the connection frames no new request and is not read until its sends drain below it;
 * its own socket buffers fill and its writes block, as with any TCP peer that outruns its reader. */
#define OUT_MAX_BYTES (64u * 1024u)

enum { T_IGNORE = 0, T_ACCEPT = 1, T_RECV = 2, T_SEND = 3, T_WAKE = 4, T_TIMER = 5 };
#define UD(tag, idx) (((uint64_t)(tag) << 56) | (uint64_t)(idx))
#define UD_TAG(ud) ((int)((ud) >> 56))
#define UD_IDX(ud) ((uint32_t)((ud) & 0xffffffffu))

enum { CMD_RESPOND = 1, CMD_CONTINUE, CMD_ROUTES, CMD_CLOSE };

typedef struct route {
  char *path;
  uint32_t len;
  uint64_t cap;
  /* Verification on this thread (issue 15): the source's keys, and the embedder's name for that key
   * set (0: this route is not verified here). */
  uint32_t vset;
  spw_vsource vs;
} route;

typedef struct cmd {
  int type;
  int close;
  double id;
  char *data;
  size_t len;
  route *routes;
  size_t n_routes;
  uint32_t grace_ms;
  int drain;
  uint64_t cap;
  struct cmd *next;
} cmd;

struct spw_server {
  spw_config cfg;
  char host[64];
  spw_deliver_fn deliver;
  void *ctx;
  hp_limits lim;

  struct io_uring ring;
  int ring_ok;
  struct io_uring_buf_ring *br;
  char *bufs;
  unsigned br_mask;

  int listen_fd;
  int accept_armed;
  int wake_fd;
  uint64_t wake_val;
  struct __kernel_timespec tick;

  spw_conn_table conns;
  uint32_t dirty_head;
  spw_batch *batch;
  hp_head head; /* scratch: only one head is parsed at a time */
  route *routes;
  size_t n_routes;

  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  cmd *cmd_head, *cmd_tail;
  /* A wake-up is on its way (the eventfd was written since the last run_commands took the list):
   * further commands ride on it instead of writing the eventfd again (under mu). */
  int wake_pending;

  int closing;
  int drain;
  int stopped;
  uint64_t close_deadline;

  /* Bytes of answered requests read only to be dropped (spw_server_stats); written by the ring
   * thread, read by any (relaxed atomics). */
  uint64_t drained_copied, drained_discarded;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void spw_config_defaults(spw_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->host = "0.0.0.0";
  cfg->backlog = 4096;
  /* No global cap by default, as node:http: the route caps (the sources' maxBodyBytes) and the
   * embedder's own checks decide, and the pre-accept window bounds what an undecided request holds. */
  cfg->max_body_bytes = UINT64_MAX;
  cfg->max_head_bytes = 16 * 1024;
  cfg->max_headers = 64;
  cfg->headers_timeout_ms = 10000;
  cfg->request_timeout_ms = 30000;
  cfg->keepalive_timeout_ms = 5000;
  cfg->max_conns = 16384;
  cfg->buf_count = 1024;
  cfg->buf_size = 16 * 1024;
  cfg->ring_entries = 2048;
  cfg->answer_timeout_ms = 60000;
  cfg->listen_fd = -1;
  cfg->handoff = 0;
}

/* The same first cut as the TypeScript classifier (packages/ingest/src/backends/classify.ts):
 * printable ASCII that is not the start of the HTTP/2 preface or an SSH banner stays here (a
 * request line, or text the parser answers with 400); the embedder tells the rest apart. */
int spw_classify_first(const char *p, size_t n) {
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  if (n == 0) return 0;
  if ((unsigned char)p[0] == 0x16) return -1;
  size_t k = n < 4 ? n : 4;
  if (memcmp(p, preface, k) == 0 || memcmp(p, "SSH-", k) == 0) return n < 4 ? 0 : -1;
  return (unsigned char)p[0] >= 0x20 && (unsigned char)p[0] <= 0x7e ? 1 : -1;
}

/* ---------- batches handed to the embedder ---------- */

void spw_batch_free(spw_batch *b) {
  if (!b) return;
  free(b->ev);
  free(b->arena);
  free(b);
}

static spw_event *ev_push(spw_server *s, int type, double id, size_t payload) {
  if (!s->batch) {
    s->batch = calloc(1, sizeof *s->batch);
    if (!s->batch) return NULL;
  }
  spw_batch *b = s->batch;
  if (b->n == b->cap) {
    uint32_t cap = b->cap ? b->cap * 2 : 64;
    spw_event *ev = realloc(b->ev, cap * sizeof *ev);
    if (!ev) return NULL;
    b->ev = ev;
    b->cap = cap;
  }
  if (b->used + payload > b->arena_cap) {
    size_t cap = b->arena_cap ? b->arena_cap : 16384;
    while (cap < b->used + payload) cap *= 2;
    char *a = realloc(b->arena, cap);
    if (!a) return NULL;
    b->arena = a;
    b->arena_cap = cap;
  }
  spw_event *e = &b->ev[b->n++];
  memset(e, 0, sizeof *e);
  e->type = (uint8_t)type;
  e->id = id;
  e->off = b->used;
  e->len = (uint32_t)payload;
  b->used += payload;
  return e;
}

static void flush_batch(spw_server *s, int blocking) {
  if (!s->batch || s->batch->n == 0) return;
  if (s->deliver(s->ctx, s->batch, blocking) == 0) s->batch = NULL;
}

static double req_id(spw_server *s, spw_conn *c) {
  return (double)(uint32_t)(c - s->conns.slots) * 4294967296.0 + (double)c->seq;
}

static void emit_text(spw_server *s, spw_conn *c, int type, const char *text) {
  size_t n = text ? strlen(text) : 0;
  spw_event *e = ev_push(s, type, req_id(s, c), n);
  if (e && n) memcpy(s->batch->arena + e->off, text, n);
}

static void emit_head(spw_server *s, spw_conn *c, const hp_head *h) {
  size_t rl = strlen(c->remote);
  size_t n = h->method.len + 1 + h->target.len + 1 + rl + 1;
  for (uint32_t i = 0; i < h->n_headers; i++) n += h->headers[i].name.len + h->headers[i].value.len + 2;
  spw_event *e = ev_push(s, SPW_EV_HEAD, req_id(s, c), n);
  if (!e) return;
  e->content_length = h->content_length;
  e->chunked = (uint8_t)h->chunked;
  e->n_headers = (uint16_t)h->n_headers;
  e->vset = c->vset;
  char *p = s->batch->arena + e->off;
#define PUT(ptr, l) do { memcpy(p, (ptr), (l)); p += (l); *p++ = 0; } while (0)
  PUT(h->method.p, h->method.len);
  PUT(h->target.p, h->target.len);
  PUT(c->remote, rl);
  for (uint32_t i = 0; i < h->n_headers; i++) {
    char *name = p;
    PUT(h->headers[i].name.p, h->headers[i].name.len);
    for (char *q = name; *q; q++)
      if (*q >= 'A' && *q <= 'Z') *q = (char)(*q + 32);
    PUT(h->headers[i].value.p, h->headers[i].value.len);
  }
#undef PUT
}

static void emit_body(spw_server *s, spw_conn *c, const char *data, size_t len) {
  spw_event *e = ev_push(s, SPW_EV_BODY, req_id(s, c), len);
  if (e) memcpy(s->batch->arena + e->off, data, len);
}

/* The connection leaves the ring: its fd and the bytes read so far go up; the slot is released once
 * no SQE refers to it (flush_dirty), without shutdown or close. */
static void mark_dirty(spw_server *s, spw_conn *c);
static void conn_close(spw_server *s, spw_conn *c);
static void handoff(spw_server *s, spw_conn *c, const char *p, size_t n) {
  spw_event *e = ev_push(s, SPW_EV_HANDOFF, req_id(s, c), n);
  if (!e) {
    conn_close(s, c);
    return;
  }
  if (n) memcpy(s->batch->arena + e->off, p, n);
  e->content_length = c->fd;
  c->handed_off = 1;
  c->closing = 1;
  c->in.len = 0;
  mark_dirty(s, c);
}

/* ---------- submission helpers ---------- */

static struct io_uring_sqe *get_sqe(spw_server *s) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (!sqe) {
    io_uring_submit(&s->ring);
    sqe = io_uring_get_sqe(&s->ring);
  }
  return sqe;
}

static void arm_accept(spw_server *s) {
  struct io_uring_sqe *sqe = get_sqe(s);
  if (!sqe) return;
  io_uring_prep_multishot_accept(sqe, s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, UD(T_ACCEPT, 0));
  s->accept_armed = 1;
}

/* One recv per arm, not multishot: a multishot recv on a socket with a deep backlog keeps posting
 * CQEs (re-queued in the kernel, one provided buffer each) until the ring runs dry, all before this
 * thread can act on the first one. A connection told to stop reading (pipelined input over its
 * bound, unsent output over its bound) then still hands us megabytes to keep. Single-shot, a
 * connection reads at most one buffer past the point where it was told to stop; the re-arm is one
 * more SQE in a submit that is made anyway. */
static void arm_recv(spw_server *s, spw_conn *c, uint32_t idx) {
  struct io_uring_sqe *sqe = get_sqe(s);
  if (!sqe) return;
  if (c->state == C_DRAIN) {
    /* Answered early (413, 408, an error): what the client still sends is only read to be
     * dropped, so the kernel drops it (TCP honours MSG_TRUNC: no copy, no buffer, one completion
     * per megabyte instead of one per 16 KiB buffer). An attacker that streams oversized bodies
     * made this thread copy up to DRAIN_MAX_BYTES of each into the buffer ring before. */
    io_uring_prep_recv(sqe, c->fd, NULL, DRAIN_RECV_BYTES, MSG_TRUNC);
  } else {
    io_uring_prep_recv(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
  }
  io_uring_sqe_set_data64(sqe, UD(T_RECV, idx));
  c->recv_armed = 1;
  c->ops++;
}

static void arm_wake(spw_server *s) {
  struct io_uring_sqe *sqe = get_sqe(s);
  if (!sqe) return;
  io_uring_prep_read(sqe, s->wake_fd, &s->wake_val, sizeof s->wake_val, 0);
  io_uring_sqe_set_data64(sqe, UD(T_WAKE, 0));
}

static void arm_timer(spw_server *s) {
  struct io_uring_sqe *sqe = get_sqe(s);
  if (!sqe) return;
  s->tick.tv_sec = 0;
  s->tick.tv_nsec = TICK_MS * 1000000L;
  io_uring_prep_timeout(sqe, &s->tick, 0, 0);
  io_uring_sqe_set_data64(sqe, UD(T_TIMER, 0));
}

static void cancel_ud(spw_server *s, uint64_t ud) {
  struct io_uring_sqe *sqe = get_sqe(s);
  if (!sqe) return;
  io_uring_prep_cancel64(sqe, ud, 0);
  io_uring_sqe_set_data64(sqe, UD(T_IGNORE, 0));
}

static void mark_dirty(spw_server *s, spw_conn *c) {
  if (c->dirty) return;
  c->dirty = 1;
  c->next_dirty = s->dirty_head;
  s->dirty_head = (uint32_t)(c - s->conns.slots);
}

/* ---------- connection protocol ---------- */

static size_t out_queued(const spw_conn *c) { return (c->sending.len - c->sent) + c->pending.len; }

static void queue_out(spw_server *s, spw_conn *c, const char *data, size_t len) {
  spw_buf_append(&c->pending, data, len);
  mark_dirty(s, c);
}

static void abort_request(spw_server *s, spw_conn *c, const char *why) {
  if ((c->state == C_BODY || c->state == C_WAIT) && !c->responded) {
    c->responded = 1;
    emit_text(s, c, SPW_EV_ABORT, why);
  }
}

static void conn_close(spw_server *s, spw_conn *c) {
  if (c->closing) return;
  abort_request(s, c, "connection closed");
  c->closing = 1;
  /* Wakes the armed recv with EOF; the cancel covers kernels where it would not. */
  shutdown(c->fd, SHUT_RDWR);
  if (c->recv_armed) cancel_ud(s, UD(T_RECV, (uint32_t)(c - s->conns.slots)));
  mark_dirty(s, c);
}

static const char *reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

static const char *api_code(int status) {
  switch (status) {
    case 408: return "request_timeout";
    case 413: return "payload_too_large";
    case 431: return "headers_too_large";
    case 501: return "not_implemented";
    case 503: return "unavailable";
    case 505: return "http_version_not_supported";
    default: return "bad_request";
  }
}

static void queue_error(spw_server *s, spw_conn *c, int status, const char *why, int close_conn) {
  char body[256];
  int bl = snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}", api_code(status),
                    why ? why : reason_phrase(status));
  char head[256];
  int hl = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s%s\r\n",
                    status, reason_phrase(status), bl, status == 503 ? "retry-after: 1\r\n" : "",
                    close_conn ? "connection: close\r\n" : "");
  queue_out(s, c, head, (size_t)hl);
  queue_out(s, c, body, (size_t)bl);
}

/* Native error answers close: after a framing error nothing that follows can be trusted. */
static void resume_reading(spw_server *s, spw_conn *c, uint32_t idx);

/* Reading was paused while the embedder decided on a body over its cap; the answer is out now, so
 * read again, to discard (closing with unread input would RST the answer away). */
static void end_over_cap(spw_server *s, spw_conn *c) {
  if (!c->over_cap) return;
  c->over_cap = 0;
  if (!c->closing) resume_reading(s, c, (uint32_t)(c - s->conns.slots));
}

static void stop_reading(spw_server *s, spw_conn *c) {
  if (c->paused) return;
  c->paused = 1;
  if (c->recv_armed) cancel_ud(s, UD(T_RECV, (uint32_t)(c - s->conns.slots)));
}

static void reply_error(spw_server *s, spw_conn *c, int status, const char *why) {
  abort_request(s, c, why);
  queue_error(s, c, status, why, 1);
  c->responded = 1;
  c->close_after_send = 1;
  c->state = C_DRAIN;
  c->since_ms = now_ms();
  c->in.len = 0;
  end_over_cap(s, c);
}

static const route *route_find(spw_server *s, hp_span target) {
  uint32_t len = 0;
  while (len < target.len && target.p[len] != '?') len++;
  size_t lo = 0, hi = s->n_routes;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    route *r = &s->routes[mid];
    int cmp = r->len != len ? (r->len < len ? -1 : 1) : memcmp(r->path, target.p, len);
    if (cmp == 0) return r;
    if (cmp < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static uint64_t unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The value of header `name` (lower case), or NULL when absent. A repeated header makes the request
 * one this thread does not verify (*repeated): the embedder joins repeats, and decides itself. */
static const hp_span *header(const hp_head *h, const char *name, int *repeated) {
  size_t n = strlen(name);
  const hp_span *found = NULL;
  for (uint32_t i = 0; i < h->n_headers; i++) {
    const hp_span *k = &h->headers[i].name;
    if (k->len != n || strncasecmp(k->p, name, n) != 0) continue;
    if (found) *repeated = 1;
    found = &h->headers[i].value;
  }
  return found;
}

/* Starts the body HMAC for a POST to a verified route whose header half passes here. Anything else
 * (no keys, a header half this thread refuses, a repeated signature header) leaves the request to
 * the embedder's own verifier: the HEAD event then says vset 0. */
static void verify_start(spw_conn *c, const route *r, const hp_head *h) {
  c->vset = 0;
  if (!r || !r->vset) return;
  static const char *const names[][3] = {
      [SPW_KIND_GITHUB] = {"x-hub-signature-256", NULL, NULL},
      [SPW_KIND_STRIPE] = {"stripe-signature", NULL, NULL},
      [SPW_KIND_SHOPIFY] = {"x-shopify-hmac-sha256", NULL, NULL},
      [SPW_KIND_STANDARD] = {"webhook-signature", "webhook-id", "webhook-timestamp"},
  };
  int repeated = 0;
  const hp_span *v[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++)
    if (names[r->vs.kind][i]) v[i] = header(h, names[r->vs.kind][i], &repeated);
  if (repeated) return;
  spw_vheaders vh = {0};
  if (v[0]) vh.sig = v[0]->p, vh.sig_len = v[0]->len;
  if (v[1]) vh.id = v[1]->p, vh.id_len = v[1]->len;
  if (v[2]) vh.ts = v[2]->p, vh.ts_len = v[2]->len;
  if (spw_verify_begin(&c->verifier, &r->vs, &vh, (int64_t)unix_ms()) != SPW_V_OK) return;
  c->vset = r->vset;
}

static void verify_drop(spw_conn *c) {
  if (c->vset) spw_verify_abort(&c->verifier);
  c->vset = 0;
}

static void release_slot(spw_server *s, uint32_t idx) {
  verify_drop(&s->conns.slots[idx]);
  spw_conn_release(&s->conns, idx);
}

static int parse_status(int rc) {
  switch (rc) {
    case HP_E_HEADERS_TOO_LARGE: return 431;
    case HP_E_VERSION: return 505;
    case HP_E_NOT_IMPLEMENTED: return 501;
    default: return 400;
  }
}

/* Frames as much of buf as the connection state allows; returns the bytes used. */
static size_t process(spw_server *s, spw_conn *c, const char *buf, size_t len) {
  size_t off = 0;
  for (;;) {
    if (c->closing || c->state == C_DRAIN || c->over_cap) return len;
    if (c->state == C_HEAD) {
      if (out_queued(c) > OUT_MAX_BYTES) {
        /* The next request waits (in `in`, then in the socket) until the client reads its answers. */
        if (!c->out_full) {
          c->out_full = 1;
          stop_reading(s, c);
        }
        return off;
      }
      size_t head_len = 0;
      int r = hp_scan_head(&c->scan, buf + off, len - off, &s->lim, &head_len);
      if (r == HP_AGAIN) {
        if (len > off && !c->head_started) {
          c->head_started = 1;
          c->since_ms = now_ms();
        }
        return off;
      }
      if (r < 0) {
        reply_error(s, c, parse_status(r), r == HP_E_HEADERS_TOO_LARGE ? "request head too large" : "malformed request head");
        return len;
      }
      hp_head *h = &s->head;
      r = hp_parse_head(buf + off, head_len, &s->lim, h);
      if (r < 0) {
        reply_error(s, c, parse_status(r), h->error);
        return len;
      }
      /* Every method goes up: which answer a non-POST gets (404 off the ingest routes, 405 on them)
       * is the pipeline's decision, so both backends give the same one. Only framing is decided here,
       * and size: the route caps are the sources' POST caps (the pipeline checks the method before
       * the size), the global cap holds for every method. */
      int is_post = h->method.len == 4 && memcmp(h->method.p, "POST", 4) == 0;
      const route *rt = is_post ? route_find(s, h->target) : NULL;
      uint64_t cap = s->cfg.max_body_bytes;
      if (rt && rt->cap < cap) cap = rt->cap;
      if (h->content_length > 0 && (uint64_t)h->content_length > cap) {
        reply_error(s, c, 413, "body exceeds the size limit");
        return len;
      }
      c->seq++;
      c->responded = 0;
      c->keep_alive = (uint8_t)(h->keep_alive && !s->closing);
      c->body_cap = cap;
      c->want_continue = (uint8_t)(h->expect_continue && (h->chunked || h->content_length > 0));
      c->accepted = 0;
      c->over_cap = 0;
      c->sink_cap = UINT64_MAX;
      verify_drop(c);
      verify_start(c, rt, h);
      emit_head(s, c, h);
      hp_body_init(&c->body, h);
      memset(&c->scan, 0, sizeof c->scan);
      off += head_len;
      c->state = C_BODY;
      c->head_started = 0;
      c->since_ms = now_ms();
    }
    if (c->state == C_BODY) {
      /* A client that sent Expect: 100-continue sends nothing before the 100, so this only holds
       * bodies that were sent anyway. */
      if (!c->accepted && c->body.total >= PREACCEPT_BODY_BYTES) return off;
      const char *o;
      size_t ol, used;
      int r = hp_body_feed(&c->body, buf + off, len - off, &used, &o, &ol);
      off += used;
      if (r == HP_DATA) {
        if (c->body.total > c->sink_cap) {
          /* The embedder holds body budget for this request: it must release it before the client
           * can see a 413, so it answers. Hand up the chunk that crosses its cap (that is how it
           * learns) and discard the rest of this read, unframed; nothing more is read until its
           * answer is out. */
          if (!c->responded) emit_body(s, c, o, ol);
          c->over_cap = 1;
          c->in.len = 0;
          /* Not even read meanwhile: the client's writes block on TCP until the 413 is out. */
          stop_reading(s, c);
          return len;
        }
        if (c->body.total > c->body_cap) {
          reply_error(s, c, 413, "body exceeds the size limit");
          return len;
        }
        if (c->vset) spw_verify_update(&c->verifier, o, ol);
        if (!c->responded) emit_body(s, c, o, ol);
        continue;
      }
      if (r == HP_AGAIN) return off;
      if (r < 0) {
        reply_error(s, c, 400, c->body.error);
        return len;
      }
      /* The verdict goes up with END: 1 the body matches a signature under one of the keys, 2 it
       * matches none; 0 not verified here (the embedder verifies). */
      uint8_t verdict = 0;
      if (c->vset) {
        verdict = spw_verify_finish(&c->verifier) == SPW_V_OK ? 1 : 2;
        c->vset = 0;
      }
      if (!c->responded) {
        spw_event *e = ev_push(s, SPW_EV_END, req_id(s, c), 0);
        if (e) e->verdict = verdict;
      }
      c->state = C_WAIT;
      c->want_continue = 0;
      c->since_ms = now_ms(); /* the answer deadline runs from here */
    }
    if (c->state == C_WAIT) return off;
  }
}

static size_t pipeline_limit(spw_server *s) { return (size_t)s->cfg.max_head_bytes + 65536; }

static void on_data(spw_server *s, spw_conn *c, uint32_t idx, const char *data, size_t len) {
  if (c->closing) return;
  if (c->state == C_DRAIN || c->over_cap) {
    __atomic_fetch_add(&s->drained_copied, len, __ATOMIC_RELAXED);
    c->drained += len;
    if (c->drained > DRAIN_MAX_BYTES) conn_close(s, c);
    return;
  }
  int appended = 0;
  if (!c->classified) {
    if (!s->cfg.handoff) {
      c->classified = 1;
    } else {
      if (c->in.len) {
        spw_buf_append(&c->in, data, len);
        appended = 1;
      }
      const char *p = appended ? c->in.p : data;
      size_t n = appended ? c->in.len : len;
      int k = spw_classify_first(p, n);
      if (k < 0) {
        handoff(s, c, p, n);
        return;
      }
      if (k == 0) {
        /* Too few bytes to tell: wait for more (the headers timeout bounds the wait). */
        if (!appended) spw_buf_append(&c->in, data, len);
        if (!c->head_started) {
          c->head_started = 1;
          c->since_ms = now_ms();
        }
        return;
      }
      c->classified = 1;
    }
  }
  if (appended) {
    size_t used = process(s, c, c->in.p, c->in.len);
    spw_buf_consume(&c->in, used);
  } else if (c->in.len == 0) {
    size_t used = process(s, c, data, len);
    if (used < len && !c->closing && c->state != C_DRAIN) spw_buf_append(&c->in, data + used, len - used);
  } else {
    spw_buf_append(&c->in, data, len);
    size_t used = process(s, c, c->in.p, c->in.len);
    spw_buf_consume(&c->in, used);
  }
  /* Pipelined bytes wait while a request is answered, body bytes past the pre-accept window while
   * it is decided; past a bound, stop reading (backpressure). */
  int holding = c->state == C_WAIT || (c->state == C_BODY && !c->accepted);
  if (holding && c->in.len > pipeline_limit(s)) stop_reading(s, c);
}

static void start_fin(spw_server *s, spw_conn *c) {
  if (c->read_eof) {
    conn_close(s, c);
    return;
  }
  c->fin_sent = 1;
  c->since_ms = now_ms();
  shutdown(c->fd, SHUT_WR);
}

static void pump(spw_server *s, spw_conn *c, uint32_t idx) {
  if (c->closing || c->send_inflight) return;
  if (c->sending.len == c->sent && c->pending.len) {
    spw_buf t = c->sending;
    c->sending = c->pending;
    c->pending = t;
    c->pending.len = 0;
    c->sent = 0;
  }
  if (c->sending.len > c->sent) {
    struct io_uring_sqe *sqe = get_sqe(s);
    if (!sqe) return;
    io_uring_prep_send(sqe, c->fd, c->sending.p + c->sent, c->sending.len - c->sent, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, UD(T_SEND, idx));
    c->send_inflight = 1;
    c->ops++;
    return;
  }
  if (c->close_after_send && !c->fin_sent) start_fin(s, c);
}

static void flush_dirty(spw_server *s) {
  while (s->dirty_head != UINT32_MAX) {
    uint32_t idx = s->dirty_head;
    spw_conn *c = &s->conns.slots[idx];
    s->dirty_head = c->next_dirty;
    c->dirty = 0;
    c->next_dirty = UINT32_MAX;
    if (c->state == C_FREE) continue;
    if (!c->closing) pump(s, c, idx);
    /* pump may close (FIN after EOF); the slot can only be reused once no SQE points at it */
    if (c->closing && c->ops == 0) {
      if (!c->handed_off) close(c->fd);
      release_slot(s, idx);
    }
  }
}

static void resume_reading(spw_server *s, spw_conn *c, uint32_t idx) {
  if (c->paused && c->in.len <= pipeline_limit(s) && !c->over_cap && !c->out_full) c->paused = 0;
  if (!c->paused && !c->recv_armed && !c->read_eof && !c->closing) arm_recv(s, c, idx);
}

static spw_conn *lookup(spw_server *s, double id, uint32_t *idx) {
  if (!(id >= 0)) return NULL;
  double slot = (double)(uint64_t)(id / 4294967296.0);
  uint32_t seq = (uint32_t)(id - slot * 4294967296.0);
  if (slot >= s->conns.cap) return NULL;
  spw_conn *c = &s->conns.slots[(uint32_t)slot];
  if (c->state == C_FREE || c->closing || c->seq != seq || c->responded) return NULL;
  if (c->state != C_BODY && c->state != C_WAIT) return NULL;
  *idx = (uint32_t)slot;
  return c;
}

static void do_respond(spw_server *s, cmd *m) {
  uint32_t idx;
  spw_conn *c = lookup(s, m->id, &idx);
  if (!c) return;
  queue_out(s, c, m->data, m->len);
  c->responded = 1;
  if (m->close || !c->keep_alive || c->state == C_BODY || c->read_eof || s->closing) {
    /* An early answer leaves unread body bytes behind: the connection cannot be reused. */
    c->close_after_send = 1;
    c->state = C_DRAIN;
    c->since_ms = now_ms();
    c->in.len = 0;
    end_over_cap(s, c);
    return;
  }
  c->state = C_HEAD;
  c->since_ms = now_ms();
  if (c->in.len) {
    size_t used = process(s, c, c->in.p, c->in.len);
    spw_buf_consume(&c->in, used);
  }
  resume_reading(s, c, idx);
}

static void do_continue(spw_server *s, cmd *m) {
  uint32_t idx;
  spw_conn *c = lookup(s, m->id, &idx);
  if (!c || c->state != C_BODY || c->accepted) return;
  c->accepted = 1;
  /* The embedder's cap for this request (the source's) holds from here on: no byte past it is
   * framed or handed up. Already past it: the embedder has those bytes and answers 413 itself. */
  c->sink_cap = m->cap;
  if (c->body.total > c->sink_cap) {
    c->over_cap = 1;
    c->in.len = 0;
    stop_reading(s, c);
    return;
  }
  if (c->want_continue) {
    c->want_continue = 0;
    static const char k100[] = "HTTP/1.1 100 Continue\r\n\r\n";
    queue_out(s, c, k100, sizeof k100 - 1);
  }
  /* Body bytes held past the pre-accept window flow now. Run even with nothing buffered: the
   * window may have stopped framing right after the last body byte, before the decoder said done. */
  static const char none[1];
  size_t used = process(s, c, c->in.len ? c->in.p : none, c->in.len);
  spw_buf_consume(&c->in, used);
  if (!c->closing) resume_reading(s, c, idx);
  mark_dirty(s, c);
}

static void free_routes(route *r, size_t n) {
  if (!r) return;
  for (size_t i = 0; i < n; i++) {
    free(r[i].path);
    if (r[i].vset) spw_vsource_free(&r[i].vs);
  }
  free(r);
}

static void begin_close(spw_server *s, uint32_t grace_ms, int drain) {
  if (s->closing) return;
  s->closing = 1;
  s->drain = drain;
  s->close_deadline = now_ms() + grace_ms;
  if (s->accept_armed) {
    cancel_ud(s, UD(T_ACCEPT, 0));
  } else if (s->listen_fd >= 0) {
    close(s->listen_fd);
    s->listen_fd = -1;
  }
  for (uint32_t i = 0; i < s->conns.high; i++) {
    spw_conn *c = &s->conns.slots[i];
    if (!drain && c->state == C_HEAD && !c->closing && c->in.len == 0 && !c->head_started) conn_close(s, c);
    else if (c->state != C_FREE) c->keep_alive = 0;
  }
}

static void run_commands(spw_server *s) {
  pthread_mutex_lock(&s->mu);
  cmd *m = s->cmd_head;
  s->cmd_head = s->cmd_tail = NULL;
  s->wake_pending = 0;
  pthread_mutex_unlock(&s->mu);
  while (m) {
    cmd *next = m->next;
    switch (m->type) {
      case CMD_RESPOND: do_respond(s, m); break;
      case CMD_CONTINUE: do_continue(s, m); break;
      case CMD_ROUTES:
        free_routes(s->routes, s->n_routes);
        s->routes = m->routes;
        s->n_routes = m->n_routes;
        m->routes = NULL;
        m->n_routes = 0;
        break;
      case CMD_CLOSE: begin_close(s, m->grace_ms, m->drain); break;
    }
    free(m->data);
    free_routes(m->routes, m->n_routes);
    free(m);
    m = next;
  }
}

static void sweep(spw_server *s) {
  uint64_t now = now_ms();
  int past_grace = s->closing && now >= s->close_deadline;
  for (uint32_t i = 0; i < s->conns.high; i++) {
    spw_conn *c = &s->conns.slots[i];
    if (c->state == C_FREE || c->closing) continue;
    uint64_t age = now - c->since_ms;
    if (past_grace) {
      conn_close(s, c);
      continue;
    }
    switch (c->state) {
      case C_HEAD:
        if (c->head_started) {
          if (age > s->cfg.headers_timeout_ms) reply_error(s, c, 408, "request head not received in time");
        } else if ((s->closing && !s->drain) || age > s->cfg.keepalive_timeout_ms) {
          /* Draining, an idle connection lives out its keep-alive time: its client closes it first
           * (or sends one more request, answered with connection: close). */
          conn_close(s, c);
        }
        break;
      case C_BODY:
        if (age > s->cfg.request_timeout_ms) reply_error(s, c, 408, "request body not received in time");
        break;
      case C_WAIT:
        if (!c->responded && age > s->cfg.answer_timeout_ms) reply_error(s, c, 503, "no answer in time");
        break;
      case C_DRAIN:
        if ((c->fin_sent && age > DRAIN_FIN_WAIT_MS) || age > DRAIN_MAX_MS) conn_close(s, c);
        break;
      default:
        break;
    }
  }
}

static void recycle_buf(spw_server *s, unsigned bid) {
  io_uring_buf_ring_add(s->br, s->bufs + (size_t)bid * s->cfg.buf_size, s->cfg.buf_size, (unsigned short)bid,
                        s->br_mask, 0);
  io_uring_buf_ring_advance(s->br, 1);
}

static void format_peer(int fd, char *out, size_t n) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  out[0] = 0;
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return;
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)n);
  } else if (ss.ss_family == AF_INET6) {
    struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    /* Dual-stack listeners see IPv4 clients as ::ffff:a.b.c.d; allowCidrs are written as IPv4. */
    if (IN6_IS_ADDR_V4MAPPED(a)) inet_ntop(AF_INET, &a->s6_addr[12], out, (socklen_t)n);
    else inet_ntop(AF_INET6, a, out, (socklen_t)n);
  }
}

static void on_accept(spw_server *s, struct io_uring_cqe *cqe) {
  if (!(cqe->flags & IORING_CQE_F_MORE)) s->accept_armed = 0;
  if (cqe->res >= 0) {
    int fd = cqe->res;
    uint32_t idx;
    /* Draining (a handover), a connection the kernel gave us after the close is still served: it is
     * no longer in the queue the successor accepts from. */
    spw_conn *c = s->closing && !s->drain ? NULL : spw_conn_alloc(&s->conns, &idx);
    if (!c) {
      close(fd);
    } else {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      c->fd = fd;
      c->state = C_HEAD;
      c->since_ms = now_ms();
      format_peer(fd, c->remote, sizeof c->remote);
      arm_recv(s, c, idx);
    }
  }
  if (!s->accept_armed) {
    if (s->closing) {
      if (s->listen_fd >= 0) close(s->listen_fd);
      s->listen_fd = -1;
    } else {
      arm_accept(s);
    }
  }
}

static void on_recv(spw_server *s, struct io_uring_cqe *cqe, uint32_t idx) {
  spw_conn *c = &s->conns.slots[idx];
  if (!(cqe->flags & IORING_CQE_F_MORE)) {
    c->recv_armed = 0;
    c->ops--;
  }
  int res = cqe->res;
  if (cqe->flags & IORING_CQE_F_BUFFER) {
    unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
    if (res > 0) on_data(s, c, idx, s->bufs + (size_t)bid * s->cfg.buf_size, (size_t)res);
    /* The bytes were framed or copied out above, so the buffer goes straight back to the kernel. */
    recycle_buf(s, bid);
  } else if (res > 0 && c->state == C_DRAIN) {
    /* A discarding recv (arm_recv): counted against the drain's bound like copied bytes. */
    __atomic_fetch_add(&s->drained_discarded, (uint64_t)res, __ATOMIC_RELAXED);
    c->drained += (uint64_t)res;
    if (c->drained > DRAIN_MAX_BYTES) conn_close(s, c);
  }
  if (res == 0) {
    c->read_eof = 1;
    /* A half-closed client may still read its answer: keep the socket until it has been sent. */
    int answer_due = (c->state == C_WAIT && !c->responded) || (c->state == C_DRAIN && !c->fin_sent);
    if (!answer_due) conn_close(s, c);
  } else if (res < 0 && res != -ENOBUFS && res != -ECANCELED) {
    c->read_eof = 1;
    conn_close(s, c);
  }
  if (!c->closing) resume_reading(s, c, idx);
  mark_dirty(s, c);
}

static void on_send(spw_server *s, struct io_uring_cqe *cqe, uint32_t idx) {
  spw_conn *c = &s->conns.slots[idx];
  c->ops--;
  c->send_inflight = 0;
  if (cqe->res < 0) {
    conn_close(s, c);
  } else {
    c->sent += (size_t)cqe->res;
    if (c->sent >= c->sending.len) {
      c->sending.len = 0;
      c->sent = 0;
    }
    if (c->out_full && out_queued(c) <= OUT_MAX_BYTES) {
      /* The client read: frame what it pipelined meanwhile, and read again. */
      c->out_full = 0;
      if (c->state == C_HEAD && c->in.len) {
        size_t used = process(s, c, c->in.p, c->in.len);
        spw_buf_consume(&c->in, used);
      }
      if (!c->closing) resume_reading(s, c, idx);
    }
  }
  mark_dirty(s, c);
}

static void handle_cqe(spw_server *s, struct io_uring_cqe *cqe) {
  uint64_t ud = io_uring_cqe_get_data64(cqe);
  switch (UD_TAG(ud)) {
    case T_ACCEPT: on_accept(s, cqe); break;
    case T_RECV: on_recv(s, cqe, UD_IDX(ud)); break;
    case T_SEND: on_send(s, cqe, UD_IDX(ud)); break;
    case T_WAKE:
      run_commands(s);
      if (!s->stopped) arm_wake(s);
      break;
    case T_TIMER:
      sweep(s);
      arm_timer(s);
      break;
    default: break;
  }
}

static void *run(void *arg) {
  spw_server *s = arg;
  /* Commands queued before start (a route table set before listen) had no eventfd to wake us. */
  run_commands(s);
  arm_accept(s);
  arm_wake(s);
  arm_timer(s);
  while (!s->stopped) {
    flush_dirty(s);
    flush_batch(s, 0);
    if (s->closing && s->conns.live == 0 && s->listen_fd < 0) break;
    int r = io_uring_submit_and_wait(&s->ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) break;
    unsigned head, n = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&s->ring, head, cqe) {
      handle_cqe(s, cqe);
      n++;
    }
    io_uring_cq_advance(&s->ring, n);
  }
  /* Anything still open (ring failure) is torn down here; the embedder hears ABORTs, then CLOSED. */
  for (uint32_t i = 0; i < s->conns.high; i++) {
    spw_conn *c = &s->conns.slots[i];
    if (c->state == C_FREE) continue;
    abort_request(s, c, "server stopped");
    close(c->fd);
    release_slot(s, i);
  }
  if (s->listen_fd >= 0) close(s->listen_fd);
  s->listen_fd = -1;
  io_uring_queue_exit(&s->ring);
  s->ring_ok = 0;
  ev_push(s, SPW_EV_CLOSED, 0, 0);
  while (s->batch) flush_batch(s, 1);
  return NULL;
}

/* ---------- public API ---------- */

int spw_server_create(const spw_config *cfg, spw_deliver_fn deliver, void *ctx, spw_server **out) {
  if (!cfg->buf_count || (cfg->buf_count & (cfg->buf_count - 1)) || cfg->buf_count > 32768) return -EINVAL;
  if (cfg->buf_size < 512 || cfg->max_conns == 0 || cfg->max_conns > (1u << 20)) return -EINVAL;
  if (cfg->max_headers == 0 || cfg->max_headers > HP_MAX_HEADERS_HARD || cfg->max_head_bytes < 64) return -EINVAL;
  if (cfg->answer_timeout_ms == 0) return -EINVAL;
  if (strlen(cfg->host) >= 64) return -EINVAL;
  spw_server *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->cfg = *cfg;
  memcpy(s->host, cfg->host, strlen(cfg->host) + 1);
  s->cfg.host = s->host;
  s->deliver = deliver;
  s->ctx = ctx;
  s->lim.max_head_bytes = cfg->max_head_bytes;
  s->lim.max_headers = cfg->max_headers;
  s->listen_fd = -1;
  s->wake_fd = -1;
  s->dirty_head = UINT32_MAX;
  pthread_mutex_init(&s->mu, NULL);
  if (spw_conns_init(&s->conns, cfg->max_conns) != 0) {
    free(s);
    return -ENOMEM;
  }
  *out = s;
  return 0;
}

static int open_listener(spw_server *s) {
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, s->host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)s->cfg.port);
    sl = sizeof *a4;
  } else if (inet_pton(AF_INET6, s->host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)s->cfg.port);
    sl = sizeof *a6;
  } else {
    return -EINVAL;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (s->cfg.reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) goto fail;
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0) goto fail;
  if (listen(fd, s->cfg.backlog) != 0) goto fail;
  sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) goto fail;
  s->listen_fd = fd;
  return ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
fail:;
  int err = errno;
  close(fd);
  return -err;
}

static int setup_ring(spw_server *s) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  int r = io_uring_queue_init_params(s->cfg.ring_entries, &s->ring, &p);
  if (r == -EINVAL) {
    memset(&p, 0, sizeof p);
    r = io_uring_queue_init_params(s->cfg.ring_entries, &s->ring, &p);
  }
  if (r < 0) return r;
  s->ring_ok = 1;
  size_t ring_bytes = (size_t)s->cfg.buf_count * sizeof(struct io_uring_buf);
  if (posix_memalign((void **)&s->br, 4096, ring_bytes) != 0) return -ENOMEM;
  if (posix_memalign((void **)&s->bufs, 4096, (size_t)s->cfg.buf_count * s->cfg.buf_size) != 0) return -ENOMEM;
  /* Fault the whole pool in now: the ring cycles through every buffer, so untouched pages would
   * otherwise show up as RSS growth under the first large burst instead of a fixed cost at start. */
  memset(s->bufs, 0, (size_t)s->cfg.buf_count * s->cfg.buf_size);
  io_uring_buf_ring_init(s->br);
  struct io_uring_buf_reg reg;
  memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)s->br;
  reg.ring_entries = s->cfg.buf_count;
  reg.bgid = BGID;
  r = io_uring_register_buf_ring(&s->ring, &reg, 0);
  if (r < 0) return r;
  s->br_mask = io_uring_buf_ring_mask(s->cfg.buf_count);
  for (unsigned i = 0; i < s->cfg.buf_count; i++)
    io_uring_buf_ring_add(s->br, s->bufs + (size_t)i * s->cfg.buf_size, s->cfg.buf_size, (unsigned short)i, s->br_mask, (int)i);
  io_uring_buf_ring_advance(s->br, (int)s->cfg.buf_count);
  return 0;
}

static int adopt_listener(spw_server *s) {
  int fd = s->cfg.listen_fd;
  int listening = 0;
  socklen_t ol = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0) return -errno;
  if (!listening) return -EINVAL;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return -errno;
  if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return -EAFNOSUPPORT;
  /* Not inherited by processes started later, unless passed on on purpose (dup2 clears it). */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  s->listen_fd = fd;
  return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

int spw_server_start(spw_server *s) {
  if (s->thread_started) return -EALREADY;
  int port = s->cfg.listen_fd >= 0 ? adopt_listener(s) : open_listener(s);
  if (port < 0) return port;
  s->wake_fd = eventfd(0, EFD_CLOEXEC);
  if (s->wake_fd < 0) {
    int err = -errno;
    close(s->listen_fd);
    s->listen_fd = -1;
    return err;
  }
  int r = setup_ring(s);
  if (r == 0) r = -pthread_create(&s->thread, NULL, run, s);
  if (r < 0) {
    if (s->ring_ok) io_uring_queue_exit(&s->ring);
    s->ring_ok = 0;
    close(s->listen_fd);
    s->listen_fd = -1;
    return r;
  }
  s->thread_started = 1;
  return port;
}

/* Wakes the ring thread for queued commands: writes the eventfd unless a wake-up is already on its
 * way (or nothing is queued: the ring thread took the list meanwhile). */
int spw_server_wake(spw_server *s) {
  pthread_mutex_lock(&s->mu);
  int write_now = s->cmd_head && !s->wake_pending && s->wake_fd >= 0;
  if (write_now) s->wake_pending = 1;
  pthread_mutex_unlock(&s->mu);
  uint64_t one = 1;
  if (write_now && write(s->wake_fd, &one, sizeof one) < 0) return -errno;
  return 0;
}

/* Appends a command; `wake` 0 leaves it queued until the embedder's spw_server_wake (one eventfd
 * write for a burst of answers, not one each: each write wakes the ring thread, on a VM a
 * cross-CPU interrupt). */
static int push_cmd_wake(spw_server *s, cmd *m, int wake) {
  pthread_mutex_lock(&s->mu);
  if (s->cmd_tail) s->cmd_tail->next = m;
  else s->cmd_head = m;
  s->cmd_tail = m;
  pthread_mutex_unlock(&s->mu);
  return wake ? spw_server_wake(s) : 0;
}

/* Queues a copy of `c` for the ring thread, which frees what it holds (data, routes) once done;
 * this frees them when the copy cannot be made. `wake` as for push_cmd_wake. */
static int send_cmd_wake(spw_server *s, cmd c, int wake) {
  cmd *m = malloc(sizeof *m);
  if (!m) {
    free(c.data);
    free_routes(c.routes, c.n_routes);
    return -ENOMEM;
  }
  *m = c;
  return push_cmd_wake(s, m, wake);
}

static int send_cmd(spw_server *s, cmd c) { return send_cmd_wake(s, c, 1); }

int spw_server_respond_wake(spw_server *s, double id, const char *data, size_t len, int close_conn, int wake) {
  char *copy = NULL;
  if (len) {
    copy = malloc(len);
    if (!copy) return -ENOMEM;
    memcpy(copy, data, len);
  }
  return send_cmd_wake(s, (cmd){.type = CMD_RESPOND, .id = id, .close = close_conn, .data = copy, .len = len},
                       wake);
}

int spw_server_respond(spw_server *s, double id, const char *data, size_t len, int close_conn) {
  return spw_server_respond_wake(s, id, data, len, close_conn, 1);
}

int spw_server_continue(spw_server *s, double id, uint64_t body_cap) {
  return send_cmd(s, (cmd){.type = CMD_CONTINUE, .id = id, .cap = body_cap});
}

static int route_cmp(const void *a, const void *b) {
  const route *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return memcmp(x->path, y->path, x->len);
}

int spw_server_set_routes(spw_server *s, const spw_route_spec *specs, size_t n) {
  route *r = calloc(n ? n : 1, sizeof *r);
  if (!r) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    r[i].path = strdup(specs[i].path);
    if (!r[i].path) {
      free_routes(r, i);
      return -ENOMEM;
    }
    r[i].len = (uint32_t)strlen(specs[i].path);
    r[i].cap = specs[i].cap;
    /* A source whose keys cannot be used here (a kind this thread does not know, no usable secret)
     * is left to the embedder's verifier, not refused. */
    if (specs[i].vset && specs[i].n_secrets > 0 &&
        spw_vsource_init(&r[i].vs, specs[i].kind, specs[i].secrets, specs[i].secret_lens, specs[i].n_secrets) == 0)
      r[i].vset = specs[i].vset;
  }
  qsort(r, n, sizeof *r, route_cmp);
  return send_cmd(s, (cmd){.type = CMD_ROUTES, .routes = r, .n_routes = n});
}

int spw_server_close(spw_server *s, uint32_t grace_ms, int drain) {
  return send_cmd(s, (cmd){.type = CMD_CLOSE, .grace_ms = grace_ms, .drain = drain});
}

int spw_server_listen_fd(spw_server *s) { return s->listen_fd; }

void spw_server_stats(spw_server *s, spw_stats *out) {
  out->drained_copied = __atomic_load_n(&s->drained_copied, __ATOMIC_RELAXED);
  out->drained_discarded = __atomic_load_n(&s->drained_discarded, __ATOMIC_RELAXED);
}

void spw_server_destroy(spw_server *s) {
  if (!s) return;
  if (s->thread_started) pthread_join(s->thread, NULL);
  if (s->ring_ok) io_uring_queue_exit(&s->ring);
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->wake_fd >= 0) close(s->wake_fd);
  cmd *m = s->cmd_head;
  while (m) {
    cmd *next = m->next;
    free(m->data);
    free_routes(m->routes, m->n_routes);
    free(m);
    m = next;
  }
  free_routes(s->routes, s->n_routes);
  spw_batch_free(s->batch);
  spw_conns_destroy(&s->conns);
  free(s->br);
  free(s->bufs);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int spw_probe(const char **what) {
  struct io_uring ring;
  *what = "io_uring_queue_init";
  int r = io_uring_queue_init(8, &ring, 0);
  if (r < 0) return r;
  int sv[2] = {-1, -1};
  struct io_uring_buf_ring *br = NULL;
  char *bufs = NULL;
  *what = "io_uring_register_buf_ring";
  if (posix_memalign((void **)&br, 4096, 4096) != 0 || !(bufs = malloc(8 * 64))) {
    r = -ENOMEM;
    goto out;
  }
  io_uring_buf_ring_init(br);
  struct io_uring_buf_reg reg;
  memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)br;
  reg.ring_entries = 8;
  reg.bgid = BGID;
  r = io_uring_register_buf_ring(&ring, &reg, 0);
  if (r < 0) goto out;
  for (int i = 0; i < 8; i++) io_uring_buf_ring_add(br, bufs + i * 64, 64, (unsigned short)i, io_uring_buf_ring_mask(8), i);
  io_uring_buf_ring_advance(br, 8);
  /* The only reliable feature test for multishot recv + buffer select is to do one. */
  *what = "multishot recv";
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    r = -errno;
    goto out;
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  io_uring_prep_recv_multishot(sqe, sv[0], NULL, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = BGID;
  io_uring_submit(&ring);
  if (write(sv[1], "x", 1) != 1) {
    r = -errno;
    goto out;
  }
  struct io_uring_cqe *cqe;
  struct __kernel_timespec ts = {.tv_sec = 1, .tv_nsec = 0};
  r = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
  if (r < 0) goto out;
  if (cqe->res < 0) r = cqe->res;
  else if (!(cqe->flags & IORING_CQE_F_BUFFER) || !(cqe->flags & IORING_CQE_F_MORE)) r = -EOPNOTSUPP;
  else r = 0;
  io_uring_cqe_seen(&ring, cqe);
out:
  if (sv[0] >= 0) close(sv[0]);
  if (sv[1] >= 0) close(sv[1]);
  io_uring_queue_exit(&ring);
  free(br);
  free(bufs);
  if (r == 0) *what = NULL;
  return r;
}
