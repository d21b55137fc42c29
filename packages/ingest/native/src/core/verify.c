#include "verify.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;
static void fetch_hmac(void) { hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL); }

/* JS String.prototype.trim over latin1 header bytes: ASCII whitespace, line terminators, NBSP. */
static int js_space(unsigned char c) { return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0xa0; }

static void trim(const char **p, size_t *n) {
  while (*n && js_space((unsigned char)(*p)[0])) {
    (*p)++;
    (*n)--;
  }
  while (*n && js_space((unsigned char)(*p)[*n - 1])) (*n)--;
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Exactly 64 hex digits → 32 bytes. */
static int hex32(const char *p, size_t n, uint8_t out[32]) {
  if (n != 64) return 0;
  for (size_t i = 0; i < 32; i++) {
    int hi = hexval((unsigned char)p[2 * i]), lo = hexval((unsigned char)p[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 1;
}

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

size_t spw_base64_lenient(const char *s, size_t n, uint8_t *out, size_t max) {
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '=') break;
    int v = b64val(c);
    if (v < 0) continue;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (o < max) out[o] = (uint8_t)(acc >> bits);
      o++;
      acc &= (1u << bits) - 1;
    }
  }
  return o < max ? o : max;
}

/* Shopify's strict form: 43 alphabet characters and one '=' (32 bytes). */
static int b64_strict32(const char *p, size_t n, uint8_t out[32]) {
  if (n != 44 || p[43] != '=') return 0;
  for (size_t i = 0; i < 43; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '-' || c == '_' || b64val(c) < 0) return 0;
  }
  return spw_base64_lenient(p, n, out, 32) == 32;
}

/* ^\d{1,12}$ → value. */
static int digits12(const char *p, size_t n, int64_t *out) {
  if (n < 1 || n > 12) return 0;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    v = v * 10 + (p[i] - '0');
  }
  *out = v;
  return 1;
}

static int fresh(int64_t t, int64_t now_ms) {
  int64_t d = now_ms - t * 1000;
  if (d < 0) d = -d;
  return d <= (int64_t)SPW_V_TOLERANCE_S * 1000;
}

/* ^[A-Za-z0-9+/]+={0,2}$ */
static int whsec_base64_ok(const char *p, size_t n) {
  size_t pad = 0;
  while (pad < 2 && pad < n && p[n - 1 - pad] == '=') pad++;
  if (n == pad) return 0;
  for (size_t i = 0; i < n - pad; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '-' || c == '_' || b64val(c) < 0) return 0;
  }
  return 1;
}

int spw_vsource_init(spw_vsource *s, int kind, const char *const *secrets, const size_t *lens, int n) {
  memset(s, 0, sizeof *s);
  if (kind < SPW_KIND_GITHUB || kind > SPW_KIND_STANDARD || n < 1 || n > SPW_V_MAX_KEYS) return -1;
  s->kind = kind;
  for (int i = 0; i < n; i++) {
    const char *p = secrets[i];
    size_t len = lens[i];
    uint8_t *k;
    size_t kl;
    if (kind == SPW_KIND_STANDARD) {
      /* The shared rule (packages/shared/src/whsec.ts parseWhsec): `whsec_` required, then standard
       * base64 (alphabet, at most two '=' at the end) of a non-empty key. A secret that breaks it
       * gives no key (skipped, as the JS verifier skips it); a source left with none is refused. */
      if (len < 6 || memcmp(p, "whsec_", 6) != 0) continue;
      p += 6;
      len -= 6;
      if (!whsec_base64_ok(p, len)) continue;
      k = malloc(len + 1);
      if (!k) goto fail;
      kl = spw_base64_lenient(p, len, k, len + 1);
      if (kl == 0) {
        free(k);
        continue;
      }
    } else {
      k = malloc(len + 1);
      if (!k) goto fail;
      memcpy(k, p, len);
      kl = len;
    }
    s->keys[s->n_keys] = k;
    s->key_lens[s->n_keys] = kl;
    s->n_keys++;
  }
  if (s->n_keys == 0) goto fail;
  return 0;
fail:
  spw_vsource_free(s);
  return -1;
}

void spw_vsource_free(spw_vsource *s) {
  for (int i = 0; i < s->n_keys; i++) {
    OPENSSL_cleanse(s->keys[i], s->key_lens[i]);
    free(s->keys[i]);
  }
  memset(s, 0, sizeof *s);
}

static int add_cand(spw_verifier *v, const uint8_t c[32]) {
  uint8_t(*grown)[32] = realloc(v->cand, (size_t)(v->n_cand + 1) * sizeof *v->cand);
  if (!grown) return 0;
  v->cand = grown;
  memcpy(v->cand[v->n_cand++], c, 32);
  return 1;
}

static void mac_update(spw_verifier *v, const void *p, size_t n) {
  for (int i = 0; i < v->n_mac; i++) EVP_MAC_update(v->mac[i], p, n);
}

/* A latin1 header string hashed the way JS hashes it: as UTF-8. */
static void mac_update_latin1(spw_verifier *v, const char *p, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c < 0x80) continue;
    mac_update(v, p + start, i - start);
    uint8_t two[2] = {(uint8_t)(0xc0 | (c >> 6)), (uint8_t)(0x80 | (c & 0x3f))};
    mac_update(v, two, 2);
    start = i + 1;
  }
  mac_update(v, p + start, n - start);
}

/*
 * Splits s[0, n) on sep, one part (possibly empty) per call from *i on: n bytes hold as many parts
 * as separators plus one. Returns 0 once they are all out.
 */
static int next_part(const char *s, size_t n, char sep, size_t *i, const char **part, size_t *len) {
  if (*i > n) return 0;
  size_t j = *i;
  while (j < n && s[j] != sep) j++;
  *part = s + *i;
  *len = j - *i;
  *i = j + 1;
  return 1;
}

static int start_macs(spw_verifier *v, const spw_vsource *src) {
  pthread_once(&hmac_once, fetch_hmac);
  if (!hmac_alg) return 0;
  static const uint8_t empty_key[1];
  for (int i = 0; i < src->n_keys; i++) {
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_alg);
    if (!ctx) return 0;
    v->mac[v->n_mac++] = ctx;
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    const uint8_t *key = src->key_lens[i] ? src->keys[i] : empty_key;
    if (!EVP_MAC_init(ctx, key, src->key_lens[i], params)) return 0;
  }
  return 1;
}

void spw_verify_abort(spw_verifier *v) {
  for (int i = 0; i < v->n_mac; i++) EVP_MAC_CTX_free(v->mac[i]);
  free(v->cand);
  memset(v, 0, sizeof *v);
}

int spw_verify_begin(spw_verifier *v, const spw_vsource *src, const spw_vheaders *h, int64_t now_ms) {
  memset(v, 0, sizeof *v);
  uint8_t c[32];
  switch (src->kind) {
    case SPW_KIND_GITHUB:
    case SPW_KIND_SHOPIFY: {
      /* The header alone is the signature, of the body alone: hex after sha256= (GitHub), or base64. */
      const char *p = h->sig ? h->sig : "";
      size_t n = h->sig ? h->sig_len : 0;
      trim(&p, &n);
      int parsed = src->kind == SPW_KIND_GITHUB ? n == 71 && memcmp(p, "sha256=", 7) == 0 && hex32(p + 7, 64, c)
                                                 : b64_strict32(p, n, c);
      if (!parsed || !add_cand(v, c) || !start_macs(v, src)) goto missing;
      return SPW_V_OK;
    }
    case SPW_KIND_STRIPE: {
      if (!h->sig || h->sig_len == 0) goto missing;
      const char *t = NULL;
      size_t tn = 0;
      const char *part;
      size_t pn, i = 0;
      while (next_part(h->sig, h->sig_len, ',', &i, &part, &pn)) {
        const char *eq = memchr(part, '=', pn);
        if (eq) {
          const char *k = part;
          size_t kn = (size_t)(eq - part);
          const char *val = eq + 1;
          size_t vn = pn - kn - 1;
          trim(&k, &kn);
          trim(&val, &vn);
          if (kn == 1 && k[0] == 't') {
            t = val;
            tn = vn;
          } else if (kn == 2 && k[0] == 'v' && k[1] == '1' && hex32(val, vn, c)) {
            if (!add_cand(v, c)) goto missing;
          }
        }
      }
      int64_t ts;
      if (!t || !digits12(t, tn, &ts) || v->n_cand == 0) goto missing;
      /* Decided before the body: a stale timestamp is a replay whatever the body says. */
      if (!fresh(ts, now_ms)) {
        spw_verify_abort(v);
        return SPW_V_TIMESTAMP;
      }
      if (!start_macs(v, src)) goto missing;
      mac_update(v, t, tn);
      mac_update(v, ".", 1);
      return SPW_V_OK;
    }
    case SPW_KIND_STANDARD: {
      if (!h->id || !h->id_len || !h->ts || !h->ts_len || !h->sig || !h->sig_len) goto missing;
      int64_t ts;
      if (!digits12(h->ts, h->ts_len, &ts) || !fresh(ts, now_ms)) {
        spw_verify_abort(v);
        return SPW_V_TIMESTAMP;
      }
      const char *e;
      size_t en, i = 0;
      while (next_part(h->sig, h->sig_len, ' ', &i, &e, &en)) {
        const char *comma = memchr(e, ',', en);
        if (comma && comma - e == 2 && e[0] == 'v' && e[1] == '1') {
          /* Node decodes the whole entry; only a 32-byte result is a candidate. */
          size_t rest = en - 3;
          uint8_t *buf = malloc(rest + 1);
          if (!buf) goto missing;
          size_t got = spw_base64_lenient(comma + 1, rest, buf, rest + 1);
          if (got == 32 && !add_cand(v, buf)) {
            free(buf);
            goto missing;
          }
          free(buf);
        }
      }
      if (v->n_cand == 0) goto missing;
      if (!start_macs(v, src)) goto missing;
      mac_update_latin1(v, h->id, h->id_len);
      mac_update(v, ".", 1);
      mac_update(v, h->ts, h->ts_len);
      mac_update(v, ".", 1);
      return SPW_V_OK;
    }
    default:
      break;
  }
missing:
  spw_verify_abort(v);
  return SPW_V_MISSING_SIGNATURE;
}

void spw_verify_update(spw_verifier *v, const void *data, size_t len) {
  if (len) mac_update(v, data, len);
}

int spw_verify_finish(spw_verifier *v) {
  int ok = 0;
  for (int i = 0; i < v->n_mac; i++) {
    uint8_t digest[32];
    size_t dl = 0;
    if (!EVP_MAC_final(v->mac[i], digest, &dl, sizeof digest) || dl != 32) continue;
    /* Every candidate is compared, so the timing does not tell which one (or whether any) matched. */
    for (int k = 0; k < v->n_cand; k++) ok |= CRYPTO_memcmp(digest, v->cand[k], 32) == 0;
    OPENSSL_cleanse(digest, sizeof digest);
  }
  spw_verify_abort(v);
  return ok ? SPW_V_OK : SPW_V_BAD_SIGNATURE;
}
