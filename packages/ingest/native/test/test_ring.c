/*
 * The ring's bound on unsent output (issue 15), run against ring.c itself under ASan + UBSan
 * (native/test/run.sh). A client pipelines N requests and does not read; every request is answered
 * with 1 KiB at once from the deliver callback. Without the bound the ring frames and answers all N
 * and queues the answers without end; with it, framing stops once a connection's unsent output is
 * over 64 KiB (plus what the kernel's socket buffers hold), and resumes when the client reads:
 * then every request is answered, in order.
 *
 * Then the drain after an early answer: a client declares a body over the cap and streams it
 * anyway. It gets its 413, and what it keeps sending is dropped in the kernel (MSG_TRUNC), not
 * copied through the buffer ring: an attacker streaming oversized bodies made the ring thread copy
 * up to 16 MiB of each (docs/benchmarks/ingest-profile.md, slow-loris).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "server.h"

#define N 20000
#define RESP_LEN 1024

static spw_server *srv;
static atomic_long handled;
static atomic_int closed;
static char resp[RESP_LEN];

static int deliver(void *ctx, spw_batch *b, int blocking) {
  (void)ctx;
  (void)blocking;
  for (uint32_t i = 0; i < b->n; i++) {
    spw_event *e = &b->ev[i];
    if (e->type == SPW_EV_HEAD) {
      atomic_fetch_add(&handled, 1);
      spw_server_respond(srv, e->id, resp, sizeof resp, 0);
    } else if (e->type == SPW_EV_CLOSED) {
      atomic_store(&closed, 1);
    }
  }
  spw_batch_free(b);
  return 0;
}

static int fd = -1;

static void *writer(void *arg) {
  (void)arg;
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  size_t one = sizeof req - 1;
  char *all = malloc(one * N);
  for (int i = 0; i < N; i++) memcpy(all + (size_t)i * one, req, one);
  size_t off = 0, total = one * N;
  while (off < total) {
    ssize_t w = send(fd, all + off, total - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  free(all);
  return NULL;
}

static long read_all(long want) {
  char buf[65536];
  long got = 0;
  while (got < want) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    got += r;
  }
  return got;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The first cut of a new connection (the same table as classify.ts): what stays on the ring. */
static void test_classify(void) {
  CHECK(spw_classify_first("POST /ingest/x HTTP/1.1\r\n", 25) == 1);
  CHECK(spw_classify_first("GET / HTTP/1.1\r\n", 16) == 1);
  CHECK(spw_classify_first(" POST / HTTP/1.1\r\n", 18) == 1); /* text: the parser answers 400 */
  CHECK(spw_classify_first("PO", 2) == 1);
  CHECK(spw_classify_first("P", 1) == 0);   /* could be the HTTP/2 preface */
  CHECK(spw_classify_first("PRI", 3) == 0);
  CHECK(spw_classify_first("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) == -1);
  CHECK(spw_classify_first("SS", 2) == 0);  /* could be an SSH banner */
  CHECK(spw_classify_first("SSH-2.0-OpenSSH_9.2\r\n", 21) == -1);
  CHECK(spw_classify_first("\x16\x03\x01\x02\x00", 5) == -1); /* TLS ClientHello */
  CHECK(spw_classify_first("\x00\xff", 2) == -1);
  CHECK(spw_classify_first("", 0) == 0);
}

/* The test server on an ephemeral loopback port; returns the port. `max_body` 0: the default cap. */
static int start_server(uint64_t max_body) {
  spw_config cfg;
  spw_config_defaults(&cfg);
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.max_conns = 16;
  cfg.buf_count = 64;
  cfg.keepalive_timeout_ms = 60000;
  if (max_body) cfg.max_body_bytes = max_body;
  atomic_store(&closed, 0);
  CHECK(spw_server_create(&cfg, deliver, NULL, &srv) == 0);
  int port = spw_server_start(srv);
  CHECK(port > 0);
  return port;
}

/* The client socket `fd`, connected to the test server (`rcvbuf` > 0: its receive buffer). */
static void connect_client(int port, int rcvbuf) {
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
}

/* Closes the test server and waits for its last batch (SPW_EV_CLOSED). */
static void stop_server(void) {
  spw_server_close(srv, 0, 0);
  for (int i = 0; i < 500 && !atomic_load(&closed); i++) sleep_ms(10);
  CHECK(atomic_load(&closed) == 1);
  spw_server_destroy(srv);
}

#define DRAIN_BODY (8L << 20)

static void *streamer(void *arg) {
  (void)arg;
  static char chunk[65536];
  memset(chunk, 'x', sizeof chunk);
  long sent = 0;
  while (sent < DRAIN_BODY) {
    ssize_t w = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
    if (w <= 0) break; /* the server closed: the bound, or it was done draining */
    sent += w;
  }
  return NULL;
}

static void test_drain(void) {
  connect_client(start_server(1024), 0);
  struct timeval tv = {.tv_sec = 10};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  static const char head[] = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n\r\n";
  CHECK(send(fd, head, sizeof head - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof head - 1));
  pthread_t w;
  pthread_create(&w, NULL, streamer, NULL);
  pthread_join(w, NULL);
  char answer[4096];
  size_t got = 0;
  while (got < sizeof answer - 1) {
    ssize_t r = recv(fd, answer + got, sizeof answer - 1 - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
    answer[got] = 0;
    if (strstr(answer, "\r\n\r\n")) break;
  }
  answer[got] = 0;
  CHECK(strncmp(answer, "HTTP/1.1 413", 12) == 0);
  close(fd);
  sleep_ms(200);
  spw_stats st;
  spw_server_stats(srv, &st);
  printf("ring drain: %llu bytes dropped in the kernel, %llu copied (a recv already on its way)\n",
         (unsigned long long)st.drained_discarded, (unsigned long long)st.drained_copied);
  CHECK(st.drained_discarded + st.drained_copied >= (1u << 20)); /* it did drain */
  CHECK(st.drained_copied <= 4 * 16384);                          /* without copying it */
  stop_server();
}

int main(void) {
  test_classify();
  /* A valid HTTP answer of exactly RESP_LEN bytes. */
  const char *head = "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: ";
  int hl = (int)strlen(head);
  int body = RESP_LEN - hl - 4 /* digits */ - 4 /* CRLFCRLF */;
  snprintf(resp, sizeof resp, "%s%04d\r\n\r\n", head, body);
  memset(resp + hl + 8, 'x', (size_t)body);

  connect_client(start_server(0), 4096);
  pthread_t w;
  pthread_create(&w, NULL, writer, NULL);

  /* The client does not read: the kernel's buffers fill, then the bound holds. Wait (up to 20 s: a
   * loaded machine fills them slowly) until the count has not moved for a second. */
  long last = -1, now = 0;
  int still = 0;
  for (int i = 0; i < 80 && still < 4; i++) {
    sleep_ms(250);
    now = atomic_load(&handled);
    still = now == last ? still + 1 : 0;
    last = now;
  }
  printf("ring output bound: %ld of %d answered while the client did not read (%s)\n", now, N,
         still >= 4 ? "then no more for 1 s" : "still climbing after 20 s");
  CHECK(still >= 4);
  CHECK(now < N / 2);

  /* The client reads: framing resumes and every request is answered. */
  long got = read_all((long)N * RESP_LEN);
  CHECK(got == (long)N * RESP_LEN);
  CHECK(atomic_load(&handled) == N);
  pthread_join(w, NULL);

  close(fd);
  stop_server();

  test_drain();
  return check_summary("ring");
}
