/*
 * tlsd: a minimal HTTP/1.1 keep-alive server that answers every request `202` — the floor of what
 * TLS costs per request in C, for issue 20 ("terminate TLS in the addon with kTLS, or hand TLS
 * connections to the node path: measure both"). Not product code; see docs/ingest.md, "TLS on the
 * uring backend: kTLS measured", and test/bench/ktls/run.sh.
 *
 * Modes (one thread, epoll, level-triggered, non-blocking sockets):
 *   plain  no TLS at all: read()/write(). The ceiling kTLS could reach (kTLS = this + the kernel's
 *          AES-GCM on each record).
 *   ssl    TLS 1.3 with OpenSSL in user space: SSL_read()/SSL_write().
 *   ktls   handshake with OpenSSL (non-blocking), then the negotiated TLS 1.3 traffic keys go into
 *          the kernel (setsockopt(SOL_TCP, TCP_ULP, "tls"), SOL_TLS TLS_TX and TLS_RX), the SSL
 *          object is freed, and requests are served with plain read()/write() on the kTLS socket —
 *          what the io_uring addon's recv/send would do. The keys come from the keylog callback
 *          (CLIENT/SERVER_TRAFFIC_SECRET_0) through HKDF-Expand-Label, so this works with any
 *          OpenSSL 3 build; session tickets are off (SSL_CTX_set_num_tickets 0) so the server's
 *          record sequence is 0 when the kernel takes over. At start-up it probes TCP_ULP "tls" on
 *          a loopback pair and exits 3 with the errno when the kernel has no kTLS.
 *   selftest  the ktls mode's key hand-off checked without the kernel: after the handshake the
 *          first client record is read raw off the socket and decrypted in user space with exactly
 *          the key/salt/iv/rec_seq the TLS_RX crypto_info would carry, and the answer is encrypted
 *          with the TLS_TX ones and written raw. A client that gets its 202 proves the crypto_info
 *          is right. One connection, then exit 0 (or 1 on a mismatch).
 *
 * Usage: tlsd MODE PORT [CERT KEY]   (prints "listening PORT" on stdout once ready)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

enum mode { M_PLAIN, M_SSL, M_KTLS, M_SELFTEST };
static enum mode g_mode;

static const char RESP[] =
    "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"id\":\"tlsd\"}";

#define BUFSZ 16384
struct conn {
  int fd;
  SSL *ssl;      /* NULL once the kernel has the keys (ktls) or without TLS (plain) */
  int hs_done;
  size_t len;    /* bytes in buf */
  unsigned char csecret[64], ssecret[64];
  int have_c, have_s;
  char buf[BUFSZ];
};

static unsigned long g_reqs, g_ktls_conns, g_errors;
static int g_announced;

static void die(const char *what) {
  perror(what);
  exit(1);
}

/* ---- TLS 1.3 key schedule pieces needed to fill the kernel's crypto_info ---------------------- */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void keylog_cb(const SSL *ssl, const char *line) {
  struct conn *c = SSL_get_app_data(ssl);
  if (!c) return;
  unsigned char *dst;
  int *flag;
  if (!strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24)) dst = c->csecret, flag = &c->have_c;
  else if (!strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24)) dst = c->ssecret, flag = &c->have_s;
  else return;
  const char *p = strchr(line + 24, ' '); /* skip the client random */
  if (!p) return;
  p++;
  size_t n = strlen(p) / 2;
  if (n > 64) return;
  for (size_t i = 0; i < n; i++) dst[i] = (unsigned char)(hexval(p[2 * i]) << 4 | hexval(p[2 * i + 1]));
  *flag = (int)n;
}

/* HKDF-Expand-Label(secret, label, "", len) for len <= hash length (one HMAC block). */
static int expand_label(const EVP_MD *md, const unsigned char *secret, int slen, const char *label,
                        unsigned char *out, int len) {
  unsigned char info[64], t[EVP_MAX_MD_SIZE];
  size_t ll = 6 + strlen(label), n = 0;
  info[n++] = (unsigned char)(len >> 8);
  info[n++] = (unsigned char)len;
  info[n++] = (unsigned char)ll;
  memcpy(info + n, "tls13 ", 6), n += 6;
  memcpy(info + n, label, strlen(label)), n += strlen(label);
  info[n++] = 0; /* empty context */
  info[n++] = 1; /* T(1) counter */
  unsigned int tl = 0;
  if (!HMAC(md, secret, slen, info, n, t, &tl) || (int)tl < len) return -1;
  memcpy(out, t, len);
  return 0;
}

/* Both directions' crypto_info (AES-GCM-128 or -256), record sequence 0. */
struct kinfo {
  union {
    struct tls12_crypto_info_aes_gcm_128 g128;
    struct tls12_crypto_info_aes_gcm_256 g256;
  } tx, rx;
  socklen_t size;
  int keylen;
  unsigned char txkey[32], txiv[12], rxkey[32], rxiv[12];
};

static int derive(SSL *ssl, struct conn *c, struct kinfo *k) {
  const SSL_CIPHER *ciph = SSL_get_current_cipher(ssl);
  uint16_t id = SSL_CIPHER_get_protocol_id(ciph);
  if (id == 0x1301) k->keylen = 16;      /* TLS_AES_128_GCM_SHA256 */
  else if (id == 0x1302) k->keylen = 32; /* TLS_AES_256_GCM_SHA384 */
  else return fprintf(stderr, "tlsd: cipher %s not handled\n", SSL_CIPHER_get_name(ciph)), -1;
  if (!c->have_c || !c->have_s) return fprintf(stderr, "tlsd: traffic secrets not seen\n"), -1;
  const EVP_MD *md = SSL_CIPHER_get_handshake_digest(ciph);
  if (expand_label(md, c->ssecret, c->have_s, "key", k->txkey, k->keylen) ||
      expand_label(md, c->ssecret, c->have_s, "iv", k->txiv, 12) ||
      expand_label(md, c->csecret, c->have_c, "key", k->rxkey, k->keylen) ||
      expand_label(md, c->csecret, c->have_c, "iv", k->rxiv, 12))
    return -1;
  memset(&k->tx, 0, sizeof k->tx);
  memset(&k->rx, 0, sizeof k->rx);
  /* The kernel takes the 12-byte TLS 1.3 IV as salt (4) + iv (8); rec_seq 0 (no tickets sent). */
#define FILL(u, KEY, IV, CIPHER)                                  \
  do {                                                            \
    (u).info.version = TLS_1_3_VERSION;                           \
    (u).info.cipher_type = CIPHER;                                \
    memcpy((u).key, KEY, sizeof (u).key);                         \
    memcpy((u).salt, IV, 4);                                      \
    memcpy((u).iv, IV + 4, 8);                                    \
  } while (0)
  if (k->keylen == 16) {
    FILL(k->tx.g128, k->txkey, k->txiv, TLS_CIPHER_AES_GCM_128);
    FILL(k->rx.g128, k->rxkey, k->rxiv, TLS_CIPHER_AES_GCM_128);
    k->size = sizeof k->tx.g128;
  } else {
    FILL(k->tx.g256, k->txkey, k->txiv, TLS_CIPHER_AES_GCM_256);
    FILL(k->rx.g256, k->rxkey, k->rxiv, TLS_CIPHER_AES_GCM_256);
    k->size = sizeof k->tx.g256;
  }
  return 0;
}

static int ktls_on(int fd, struct kinfo *k) {
  if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof "tls") < 0) return perror("TCP_ULP tls"), -1;
  if (setsockopt(fd, SOL_TLS, TLS_TX, &k->tx, k->size) < 0) return perror("TLS_TX"), -1;
  if (setsockopt(fd, SOL_TLS, TLS_RX, &k->rx, k->size) < 0) return perror("TLS_RX"), -1;
  return 0;
}

/* At start-up: does this kernel take TCP_ULP "tls" at all? (needs an established TCP socket) */
static int probe_ktls(void) {
  int l = socket(AF_INET, SOCK_STREAM, 0), a = socket(AF_INET, SOCK_STREAM, 0), s, rc = 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(l, (void *)&sa, sizeof sa) || listen(l, 1) || getsockname(l, (void *)&sa, &sl) ||
      connect(a, (void *)&sa, sizeof sa) || (s = accept(l, NULL, NULL)) < 0)
    die("probe socket");
  if (setsockopt(s, SOL_TCP, TCP_ULP, "tls", sizeof "tls") < 0) {
    rc = errno;
    fprintf(stderr, "tlsd: kTLS unavailable: setsockopt(SOL_TCP, TCP_ULP, \"tls\"): %s%s\n", strerror(rc),
            rc == ENOENT ? " (the kernel has no tls ULP: CONFIG_TLS off or the tls module not loaded)" : "");
  }
  close(s), close(a), close(l);
  return rc;
}

/* ---- selftest: do in user space exactly what the kernel would do with the crypto_info --------- */

static int read_full(int fd, unsigned char *p, size_t n) {
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r > 0) p += r, n -= r;
    else if (r < 0 && errno == EAGAIN) poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 5000);
    else return -1;
  }
  return 0;
}

static int gcm(int enc, const unsigned char *key, int keylen, const unsigned char *iv, const unsigned char *aad,
               const unsigned char *in, int inlen, unsigned char *out, unsigned char *tag) {
  EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
  int n = 0, f = 0, ok;
  ok = EVP_CipherInit_ex(x, keylen == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), NULL, key, iv, enc) &&
       EVP_CipherUpdate(x, NULL, &n, aad, 5) && EVP_CipherUpdate(x, out, &n, in, inlen) &&
       (enc || EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, 16, tag)) && EVP_CipherFinal_ex(x, out + n, &f) &&
       (!enc || EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, 16, tag));
  EVP_CIPHER_CTX_free(x);
  return ok ? n + f : -1;
}

static int selftest(struct conn *c, struct kinfo *k) {
  /* RX: the first application-data record, sequence 0: nonce = iv XOR 0 = iv. */
  unsigned char hdr[5], rec[BUFSZ + 256], pt[BUFSZ + 256];
  if (read_full(c->fd, hdr, 5)) return fprintf(stderr, "selftest: no record\n"), 1;
  int rlen = hdr[3] << 8 | hdr[4];
  if (hdr[0] != 0x17 || rlen < 17 || rlen > (int)sizeof rec || read_full(c->fd, rec, rlen))
    return fprintf(stderr, "selftest: bad record header\n"), 1;
  int n = gcm(0, k->rxkey, k->keylen, k->rxiv, hdr, rec, rlen - 16, pt, rec + rlen - 16);
  if (n < 1) return fprintf(stderr, "selftest: FAIL: the TLS_RX key/iv do not decrypt the client's record\n"), 1;
  while (n > 0 && pt[n - 1] == 0) n--; /* TLS 1.3 inner plaintext: content, type, zero padding */
  if (pt[n - 1] != 0x17) return fprintf(stderr, "selftest: FAIL: inner type %d\n", pt[n - 1]), 1;
  n--;
  char *eol = memchr(pt, '\r', n);
  fprintf(stderr, "selftest: TLS_RX crypto_info OK: record seq 0 decrypted (%d bytes): %.*s\n", n,
          eol ? (int)(eol - (char *)pt) : 0, pt);
  /* TX: the answer as record seq 0 under the TLS_TX key/iv. */
  int plen = sizeof RESP - 1;
  memcpy(pt, RESP, plen);
  pt[plen] = 0x17;
  unsigned char out[5 + sizeof RESP + 16] = {0x17, 0x03, 0x03, (plen + 17) >> 8, (plen + 17) & 0xff};
  if (gcm(1, k->txkey, k->keylen, k->txiv, out, pt, plen + 1, out + 5, out + 5 + plen + 1) != plen + 1) return 1;
  if (write(c->fd, out, 5 + plen + 17) != 5 + plen + 17) return perror("selftest write"), 1;
  fprintf(stderr, "selftest: TLS_TX crypto_info: answer written as record seq 0 (%s)\n",
          SSL_CIPHER_get_name(SSL_get_current_cipher(c->ssl)));
  usleep(200000);
  return 0;
}

/* ---- HTTP/1.1: one request = headers + Content-Length body; answer 202 ------------------------- */

/* Returns the length of one complete request at the start of buf, 0 if incomplete, -1 if bad. */
static long request_len(const char *buf, size_t len) {
  const char *end = memmem(buf, len, "\r\n\r\n", 4);
  if (!end) return len >= BUFSZ ? -1 : 0;
  long cl = 0;
  for (const char *p = buf; p < end;) {
    const char *nl = memchr(p, '\n', end - p);
    if (!nl) break;
    if (nl + 1 - buf < end - buf && !strncasecmp(nl + 1, "content-length:", 15)) cl = strtol(nl + 16, NULL, 10);
    p = nl + 1;
  }
  long total = end + 4 - buf + cl;
  if (cl < 0 || total > BUFSZ) return -1;
  return (size_t)total <= len ? total : 0;
}

static int send_all(struct conn *c, const void *p, size_t n) {
  if (c->ssl) return SSL_write(c->ssl, p, (int)n) == (int)n ? 0 : -1;
  ssize_t w = write(c->fd, p, n); /* tiny answer, client waits for it: never short on loopback */
  return w == (ssize_t)n ? 0 : -1;
}

static void close_conn(int ep, struct conn *c) {
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  if (c->ssl) SSL_free(c->ssl);
  close(c->fd);
  free(c);
}

/* Returns -1 to close. */
static int on_readable(int ep, struct conn *c, SSL_CTX *ctx) {
  (void)ctx;
  if (c->ssl && !c->hs_done) {
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r != 1) {
      int e = SSL_get_error(c->ssl, r);
      if (e == SSL_ERROR_WANT_READ) return 0;
      if (e == SSL_ERROR_WANT_WRITE) { /* loopback: retry on the next readiness */
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &(struct epoll_event){.events = EPOLLIN | EPOLLOUT, .data.ptr = c});
        return 0;
      }
      return -1;
    }
    c->hs_done = 1;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &(struct epoll_event){.events = EPOLLIN, .data.ptr = c});
    if (!g_announced++)
      fprintf(stderr, "tlsd: first handshake: %s %s\n", SSL_get_version(c->ssl),
              SSL_CIPHER_get_name(SSL_get_current_cipher(c->ssl)));
    if (g_mode == M_KTLS || g_mode == M_SELFTEST) {
      struct kinfo k;
      if (derive(c->ssl, c, &k)) return -1;
      if (g_mode == M_SELFTEST) exit(selftest(c, &k));
      if (ktls_on(c->fd, &k)) return -1;
      g_ktls_conns++;
      SSL_free(c->ssl); /* the kernel owns the record layer now */
      c->ssl = NULL;
    }
  }
  for (;;) {
    int n;
    if (c->ssl) {
      ERR_clear_error();
      n = SSL_read(c->ssl, c->buf + c->len, BUFSZ - (int)c->len);
      if (n <= 0) {
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ) return 0;
        return -1;
      }
    } else {
      n = (int)read(c->fd, c->buf + c->len, BUFSZ - c->len);
      if (n < 0 && errno == EAGAIN) return 0;
      if (n <= 0) return -1; /* EOF, or EIO for a kTLS control record (the client's close_notify) */
    }
    c->len += n;
    long rl;
    while ((rl = request_len(c->buf, c->len)) > 0) {
      if (send_all(c, RESP, sizeof RESP - 1)) return g_errors++, -1;
      g_reqs++;
      memmove(c->buf, c->buf + rl, c->len - rl);
      c->len -= rl;
    }
    if (rl < 0) return g_errors++, -1;
  }
}

static volatile sig_atomic_t g_stop;
static void on_term(int s) { (void)s; g_stop = 1; }

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: tlsd plain|ssl|ktls|selftest PORT [CERT KEY]\n"), 2;
  if (!strcmp(argv[1], "plain")) g_mode = M_PLAIN;
  else if (!strcmp(argv[1], "ssl")) g_mode = M_SSL;
  else if (!strcmp(argv[1], "ktls")) g_mode = M_KTLS;
  else if (!strcmp(argv[1], "selftest")) g_mode = M_SELFTEST;
  else return fprintf(stderr, "tlsd: unknown mode %s\n", argv[1]), 2;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  if (g_mode == M_KTLS && probe_ktls()) return 3;

  SSL_CTX *ctx = NULL;
  if (g_mode != M_PLAIN) {
    if (argc < 5) return fprintf(stderr, "tlsd: %s needs CERT KEY\n", argv[1]), 2;
    ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    /* The suites the kernel can take (AES-GCM); the client's order picks among them. */
    SSL_CTX_set_ciphersuites(ctx, "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256");
    SSL_CTX_set_num_tickets(ctx, 0); /* ktls: the server's sequence is 0 at hand-off; all C modes alike */
    SSL_CTX_set_keylog_callback(ctx, keylog_cb);
    if (SSL_CTX_use_certificate_chain_file(ctx, argv[3]) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, argv[4], SSL_FILETYPE_PEM) != 1) {
      ERR_print_errors_fp(stderr);
      return 1;
    }
  }

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2])),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(lfd, (void *)&sa, sizeof sa) || listen(lfd, 1024) || getsockname(lfd, (void *)&sa, &sl)) die("listen");
  int ep = epoll_create1(0);
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &(struct epoll_event){.events = EPOLLIN, .data.ptr = NULL});
  printf("listening %d\n", ntohs(sa.sin_port));
  fflush(stdout);

  struct epoll_event evs[128];
  while (!g_stop) {
    int n = epoll_wait(ep, evs, 128, 500);
    for (int i = 0; i < n; i++) {
      struct conn *c = evs[i].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          c = calloc(1, sizeof *c);
          c->fd = fd;
          if (ctx) {
            c->ssl = SSL_new(ctx);
            SSL_set_fd(c->ssl, fd);
            SSL_set_accept_state(c->ssl);
            SSL_set_app_data(c->ssl, c);
          } else c->hs_done = 1;
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &(struct epoll_event){.events = EPOLLIN, .data.ptr = c});
        }
        continue;
      }
      if (on_readable(ep, c, ctx) < 0) close_conn(ep, c);
    }
  }
  fprintf(stderr, "tlsd %s: %lu requests answered, %lu kTLS connections, %lu errors\n", argv[1], g_reqs,
          g_ktls_conns, g_errors);
  return 0;
}
