/*
 * The ingest server core: an io_uring loop on its own thread (multishot accept, multishot recv into
 * a registered provided-buffer ring, batched sends) that frames HTTP/1.1 requests with
 * http_parser.c and hands them to the embedder in batches. Pure C: the embedder (the N-API glue, or
 * a C test) supplies a deliver callback and calls spw_server_* from any thread.
 */
#ifndef SPW_SERVER_H
#define SPW_SERVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct spw_config {
  const char *host; /* numeric IPv4/IPv6 address */
  int port;
  int reuse_port;
  int backlog;
  uint64_t max_body_bytes;
  uint32_t max_head_bytes;
  uint32_t max_headers;
  uint32_t headers_timeout_ms;
  uint32_t request_timeout_ms;
  uint32_t keepalive_timeout_ms;
  uint32_t max_conns;
  uint32_t buf_count; /* power of two */
  uint32_t buf_size;
  uint32_t ring_entries;
  /* A complete request the embedder has not answered after this long gets 503 + close (and an
   * ABORT event), so a lost answer cannot pin a connection until shutdown. */
  uint32_t answer_timeout_ms;
  /* A listening TCP socket to adopt instead of binding host:port (-1: bind). A restart hands its
   * socket to its successor, so no SYN meets a closed port. The server owns it from start on. */
  int listen_fd;
  /* Hand connections that do not open with an HTTP/1.1 request line (TLS, the HTTP/2 preface,
   * anything else) to the embedder: a SPW_EV_HANDOFF carries the socket and the bytes read. */
  int handoff;
} spw_config;

void spw_config_defaults(spw_config *cfg);

enum {
  SPW_EV_HEAD = 1,  /* arena: method\0 target\0 remote\0 (name\0 value\0){n_headers} */
  SPW_EV_BODY = 2,  /* arena: body bytes */
  SPW_EV_END = 3,   /* body complete */
  SPW_EV_ABORT = 4, /* arena: reason; the request is gone (peer closed, framing error, timeout) */
  SPW_EV_CLOSED = 5, /* server stopped; last batch ever delivered */
  SPW_EV_HANDOFF = 6 /* arena: bytes already read; content_length: the socket, now the embedder's */
};

/* First bytes of a connection: 1 printable ASCII for the HTTP/1.1 parser, 0 too few bytes to tell,
 * -1 anything else (a TLS record, the HTTP/2 preface, an SSH banner, bytes that are not text). */
int spw_classify_first(const char *p, size_t n);

typedef struct spw_event {
  uint8_t type;
  uint8_t chunked;
  /* END: 1 the body matched a signature under the route's keys, 2 it matched none, 0 not verified
   * here. */
  uint8_t verdict;
  uint16_t n_headers;
  /* HEAD: the route's key set (spw_route_spec.vset) this request is verified under; 0 none. */
  uint32_t vset;
  uint32_t len;
  uint64_t off;
  double id; /* slot * 2^32 + request sequence: exact in a JS number */
  int64_t content_length;
} spw_event;

typedef struct spw_batch {
  spw_event *ev;
  uint32_t n, cap;
  char *arena;
  size_t used, arena_cap;
} spw_batch;

void spw_batch_free(spw_batch *b);

/* Returns 0 when the batch was taken (the taker frees it), non-zero to have it retried later. */
typedef int (*spw_deliver_fn)(void *ctx, spw_batch *batch, int blocking);

typedef struct spw_server spw_server;

/* Validates cfg and allocates; no sockets yet. Returns 0 or -errno. */
int spw_server_create(const spw_config *cfg, spw_deliver_fn deliver, void *ctx, spw_server **out);
/* Binds, listens, sets up the ring and starts the thread. Returns the bound port or -errno. */
int spw_server_start(spw_server *srv);
/* Thread-safe commands; they take effect on the ring thread. Unknown/stale ids are ignored. */
int spw_server_respond(spw_server *srv, double id, const char *data, size_t len, int close);
/* The same with wake 0: queued without waking the ring thread; spw_server_wake (or any later
 * command that wakes) sends it. For a burst of answers from one embedder turn: one wake-up. */
int spw_server_respond_wake(spw_server *srv, double id, const char *data, size_t len, int close, int wake);
/* Wakes the ring thread for commands queued with wake 0 (nothing when none are, or one is coming). */
int spw_server_wake(spw_server *srv);
/* The embedder accepted the request: sends 100 Continue if asked for, lets body bytes past the
 * pre-accept window flow, and lowers the request's body cap to body_cap (UINT64_MAX: unchanged). */
int spw_server_continue(spw_server *srv, double id, uint64_t body_cap);
/* One route: exact path without query → body cap, and what verifies its POSTs on the ring thread
 * (verify.h): the source's kind (SPW_KIND_*), its live secrets (at most SPW_V_MAX_KEYS), and vset,
 * the embedder's non-zero name for that key set, echoed in every HEAD verified under it (0: not
 * verified here). */
typedef struct spw_route_spec {
  const char *path;
  uint64_t cap;
  uint32_t vset;
  int kind;
  int n_secrets;
  const char *secrets[2];
  size_t secret_lens[2];
} spw_route_spec;

/* Replaces the route table. Copies its input (keys are derived here). */
int spw_server_set_routes(spw_server *srv, const spw_route_spec *routes, size_t n);
/* Stop accepting, finish in-flight requests for up to grace_ms, then stop; SPW_EV_CLOSED follows.
 * drain (a handover to a successor): connections accepted meanwhile are served, and idle keep-alive
 * connections are closed at their idle timeout rather than at once (their client may be sending). */
int spw_server_close(spw_server *srv, uint32_t grace_ms, int drain);
/* The listening socket once started (-1 before start or after close). */
int spw_server_listen_fd(spw_server *srv);
/* What the ring did with the bytes clients sent after their request was answered early (413, 408,
 * an error), before the connection closed: copied into the buffer ring (only what a recv already on
 * its way took), or dropped in the kernel without a copy. */
typedef struct spw_stats {
  uint64_t drained_copied;
  uint64_t drained_discarded;
} spw_stats;
void spw_server_stats(spw_server *srv, spw_stats *out);
/* After SPW_EV_CLOSED (or if start failed / never ran): joins the thread and frees. */
void spw_server_destroy(spw_server *srv);

/* 0 when io_uring with multishot recv and a registered buffer ring works here, else -errno. */
int spw_probe(const char **what);

#endif
