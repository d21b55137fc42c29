/*
 * Signature verification of the four providers (docs/ingest.md), pure C over libcrypto's
 * streaming HMAC-SHA256: the header half is decided before the body (missing or malformed
 * signature, stale timestamp), the body is fed as it is de-chunked, and the digest is compared in
 * constant time with every candidate signature under every key (a source may carry two secrets
 * while one is rotated). It mirrors packages/ingest/src/verify/ byte for byte — header trimming,
 * Node's lenient base64, latin1 header bytes hashed as their UTF-8 encoding — and is tested against
 * it (test/test_verify.c reads cases the JS verifiers answered). Event id/type extraction from a
 * JSON body (stripe, standard) is not here: it stays with the embedder, after verification.
 *
 * ring.c runs it on the ring thread for routes whose table entry carries keys (spw_route_spec), and
 * hands the verdict up with END (docs/ingest-uring.md, "Verification on the ring thread").
 */
#ifndef SPW_VERIFY_H
#define SPW_VERIFY_H

#include <stddef.h>
#include <stdint.h>

enum { SPW_KIND_GITHUB = 1, SPW_KIND_STRIPE = 2, SPW_KIND_SHOPIFY = 3, SPW_KIND_STANDARD = 4 };

/* Outcomes; the names are the JS verifiers' `reason` labels. */
enum { SPW_V_OK = 0, SPW_V_MISSING_SIGNATURE = 1, SPW_V_BAD_SIGNATURE = 2, SPW_V_TIMESTAMP = 3 };

#define SPW_V_MAX_KEYS 2
#define SPW_V_TOLERANCE_S 300

/* A source's verification keys, derived once from its secrets (setRoutes time, not per request). */
typedef struct spw_vsource {
  int kind;
  int n_keys;
  uint8_t *keys[SPW_V_MAX_KEYS];
  size_t key_lens[SPW_V_MAX_KEYS];
} spw_vsource;

/* secrets: UTF-8 bytes as configured. Returns 0, or -1 (bad kind, no secret, out of memory). */
int spw_vsource_init(spw_vsource *s, int kind, const char *const *secrets, const size_t *lens, int n);
void spw_vsource_free(spw_vsource *s);

/* The header values the kind needs (NULL: absent), as received (latin1 bytes, not trimmed):
 * github `x-hub-signature-256`, stripe `stripe-signature`, shopify `x-shopify-hmac-sha256`,
 * standard `webhook-signature` + `webhook-id` + `webhook-timestamp`. */
typedef struct spw_vheaders {
  const char *sig;
  size_t sig_len;
  const char *id;
  size_t id_len;
  const char *ts;
  size_t ts_len;
} spw_vheaders;

typedef struct spw_verifier {
  void *mac[SPW_V_MAX_KEYS]; /* EVP_MAC_CTX */
  int n_mac;
  uint8_t (*cand)[32];
  int n_cand;
} spw_verifier;

/* The header half. SPW_V_OK: feed the body with spw_verify_update, then spw_verify_finish. Any
 * other outcome: the verifier holds nothing. now_ms: unix milliseconds. */
int spw_verify_begin(spw_verifier *v, const spw_vsource *src, const spw_vheaders *h, int64_t now_ms);
void spw_verify_update(spw_verifier *v, const void *data, size_t len);
/* SPW_V_OK or SPW_V_BAD_SIGNATURE; frees what begin allocated. */
int spw_verify_finish(spw_verifier *v);
/* Frees a verifier that will not be finished (client gone, body over its cap). */
void spw_verify_abort(spw_verifier *v);

/* Node's Buffer.from(s, 'base64'): both alphabets, other bytes skipped, '=' ends the input, a
 * trailing partial group kept as far as it makes whole bytes. Returns the bytes written (≤ max). */
size_t spw_base64_lenient(const char *s, size_t n, uint8_t *out, size_t max);

#endif
