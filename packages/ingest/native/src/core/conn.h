/* The connection table: fixed-size slots with a free list, and the growable byte buffers. */
#ifndef SPW_CONN_H
#define SPW_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "http_parser.h"
#include "verify.h"

typedef struct spw_buf {
  char *p;
  size_t len, cap;
} spw_buf;

int spw_buf_append(spw_buf *b, const void *data, size_t n);
void spw_buf_consume(spw_buf *b, size_t n);
void spw_buf_free(spw_buf *b);

enum {
  C_FREE = 0,
  C_HEAD,  /* reading a request head (or idle between keep-alive requests) */
  C_BODY,  /* head handed up; body bytes streaming up */
  C_WAIT,  /* request complete; waiting for the embedder's response */
  C_DRAIN, /* answering with close: discard input, FIN after the send, close on EOF or timeout */
};

typedef struct spw_conn {
  int fd;
  int state;
  uint32_t ops; /* SQEs in flight that reference this slot: it is reused only at 0 */
  uint32_t seq; /* request sequence on this connection; low half of request ids */
  uint8_t recv_armed, send_inflight, closing, read_eof, paused, dirty;
  uint8_t keep_alive, responded, want_continue, close_after_send, fin_sent, head_started;
  uint8_t accepted; /* the embedder took the request (spw_server_continue): body past the window flows */
  uint8_t over_cap; /* body went past sink_cap: the embedder answers 413; input is discarded meanwhile */
  uint8_t out_full; /* unsent output over its bound: no new request is framed, nothing read, until sends drain */
  uint8_t classified; /* its first bytes were an HTTP/1.1 request line (or handoff is off) */
  uint8_t handed_off; /* given to the embedder: the slot goes, the fd is never shut down or closed here */
  spw_buf in;       /* received bytes not yet framed */
  spw_buf sending;  /* owned by the in-flight send: never reallocated while the kernel reads it */
  size_t sent;
  spw_buf pending;  /* queued behind the in-flight send */
  hp_scan scan;
  hp_body body;
  uint64_t body_cap; /* native cap: route table / global; over it, 413 from here */
  uint64_t sink_cap; /* the embedder's cap, given on accept; over it, the embedder answers */
  uint64_t since_ms; /* start of the phase the timers watch */
  uint64_t drained;
  uint32_t vset;        /* non-zero: the body is being verified on this thread, under that key set */
  spw_verifier verifier; /* live while vset != 0 */
  uint32_t next_free;
  uint32_t next_dirty;
  char remote[64];
} spw_conn;

typedef struct spw_conn_table {
  spw_conn *slots;
  uint32_t cap;
  uint32_t free_head; /* UINT32_MAX when full */
  uint32_t live;
  uint32_t high; /* slots [0, high) have ever been used: the timer sweep stops there */
} spw_conn_table;

int spw_conns_init(spw_conn_table *t, uint32_t cap);
void spw_conns_destroy(spw_conn_table *t);
spw_conn *spw_conn_alloc(spw_conn_table *t, uint32_t *idx);
void spw_conn_release(spw_conn_table *t, uint32_t idx);

#endif
