#include "conn.h"

#include <stdlib.h>
#include <string.h>

int spw_buf_append(spw_buf *b, const void *data, size_t n) {
  if (n == 0) return 0;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  return 0;
}

void spw_buf_consume(spw_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
  }
  /* Idle keep-alive connections should not pin a large buffer left by a big pipelined burst. */
  if (b->len == 0 && b->cap > 65536) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

void spw_buf_free(spw_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

int spw_conns_init(spw_conn_table *t, uint32_t cap) {
  t->slots = calloc(cap, sizeof *t->slots);
  if (!t->slots) return -1;
  t->cap = cap;
  t->live = 0;
  t->high = 0;
  for (uint32_t i = 0; i < cap; i++) t->slots[i].next_free = i + 1 < cap ? i + 1 : UINT32_MAX;
  t->free_head = cap ? 0 : UINT32_MAX;
  return 0;
}

void spw_conns_destroy(spw_conn_table *t) {
  for (uint32_t i = 0; i < t->high; i++) {
    spw_conn *c = &t->slots[i];
    spw_buf_free(&c->in);
    spw_buf_free(&c->sending);
    spw_buf_free(&c->pending);
  }
  free(t->slots);
  t->slots = NULL;
}

spw_conn *spw_conn_alloc(spw_conn_table *t, uint32_t *idx) {
  if (t->free_head == UINT32_MAX) return NULL;
  uint32_t i = t->free_head;
  spw_conn *c = &t->slots[i];
  t->free_head = c->next_free;
  uint32_t seq = c->seq; /* keep counting so a stale id from the previous tenant of the slot misses */
  spw_buf in = c->in, sending = c->sending, pending = c->pending;
  memset(c, 0, sizeof *c);
  c->seq = seq;
  c->in = in;
  c->sending = sending;
  c->pending = pending;
  c->in.len = c->sending.len = c->pending.len = 0;
  c->fd = -1;
  c->next_dirty = UINT32_MAX;
  t->live++;
  if (i + 1 > t->high) t->high = i + 1;
  *idx = i;
  return c;
}

void spw_conn_release(spw_conn_table *t, uint32_t idx) {
  spw_conn *c = &t->slots[idx];
  c->state = C_FREE;
  c->fd = -1;
  spw_buf_free(&c->in);
  spw_buf_free(&c->sending);
  spw_buf_free(&c->pending);
  c->next_free = t->free_head;
  t->free_head = idx;
  t->live--;
}
