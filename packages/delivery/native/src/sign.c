/*
 * HMAC-SHA256 for the worker's signatures (RFC 2104), one call per delivery.
 *
 * node:crypto's createHmac sets up an OpenSSL HMAC context (provider lookup, allocations, the key's
 * two pad blocks) on every call; in a draining worker that setup was half of signing. Here a key
 * is turned once into the two SHA-256 states after its ipad and opad blocks (`key`), and `mac`
 * copies them onto the stack: per call only the message's blocks and two finals are hashed.
 * SHA256_* are OpenSSL's (deprecated in 3.0, still exported by Node, and SHA-NI accelerated).
 */
#include <node_api.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  SHA256_CTX inner, outer;
} spw_hmac_key;

#define THROW(msg)                                   \
  do {                                               \
    napi_throw_type_error(env, "ERR_SPILLWAY_SIGN", msg); \
    return NULL;                                     \
  } while (0)

/* key(raw: Buffer) → Buffer holding the two precomputed states. */
static napi_value key(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) THROW("key(raw) needs a Buffer");
  bool is_buf = false;
  napi_is_buffer(env, argv[0], &is_buf);
  if (!is_buf) THROW("key(raw) needs a Buffer");
  void *raw;
  size_t n;
  napi_get_buffer_info(env, argv[0], &raw, &n);
  unsigned char k[SHA256_CBLOCK] = {0};
  if (n > SHA256_CBLOCK)
    SHA256(raw, n, k); /* RFC 2104: a key longer than a block is hashed first */
  else if (n > 0)
    memcpy(k, raw, n);
  void *data;
  napi_value out;
  if (napi_create_buffer(env, sizeof(spw_hmac_key), &data, &out) != napi_ok) return NULL;
  spw_hmac_key *hk = data;
  unsigned char pad[SHA256_CBLOCK];
  for (int i = 0; i < SHA256_CBLOCK; i++) pad[i] = k[i] ^ 0x36;
  SHA256_Init(&hk->inner);
  SHA256_Update(&hk->inner, pad, sizeof pad);
  for (int i = 0; i < SHA256_CBLOCK; i++) pad[i] = k[i] ^ 0x5c;
  SHA256_Init(&hk->outer);
  SHA256_Update(&hk->outer, pad, sizeof pad);
  OPENSSL_cleanse(k, sizeof k);
  OPENSSL_cleanse(pad, sizeof pad);
  return out;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* mac(key: Buffer from key(), head: string (UTF-8), body: Buffer) → base64 of the 32-byte MAC. */
static napi_value mac(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3)
    THROW("mac(key, head, body) needs three arguments");
  void *kd, *body;
  size_t kn, bn;
  if (napi_get_buffer_info(env, argv[0], &kd, &kn) != napi_ok || kn != sizeof(spw_hmac_key))
    THROW("mac: the key is not one made by key()");
  if (napi_get_buffer_info(env, argv[2], &body, &bn) != napi_ok) THROW("mac: the body is not a Buffer");
  /*
   * The head is `<msg id>.<timestamp>.`: short, so a stack buffer; a longer one goes to the heap.
   * N-API truncates without splitting a character, so a copy that may have been cut short ends
   * within 3 bytes (the longest UTF-8 character less one) of the buffer's last usable byte.
   */
  char stack[512];
  char *head = stack;
  size_t hn;
  if (napi_get_value_string_utf8(env, argv[1], stack, sizeof stack, &hn) != napi_ok)
    THROW("mac: the head is not a string");
  if (hn >= sizeof stack - 4) {
    napi_get_value_string_utf8(env, argv[1], NULL, 0, &hn);
    head = malloc(hn + 1);
    if (!head) THROW("mac: out of memory");
    napi_get_value_string_utf8(env, argv[1], head, hn + 1, &hn);
  }
  const spw_hmac_key *hk = kd;
  SHA256_CTX c = hk->inner;
  unsigned char m[SHA256_DIGEST_LENGTH];
  SHA256_Update(&c, head, hn);
  SHA256_Update(&c, body, bn);
  SHA256_Final(m, &c);
  c = hk->outer;
  SHA256_Update(&c, m, sizeof m);
  SHA256_Final(m, &c);
  OPENSSL_cleanse(&c, sizeof c);
  if (head != stack) free(head);

  char o[44];
  int j = 0;
  for (int i = 0; i < 30; i += 3) {
    unsigned v = (unsigned)m[i] << 16 | (unsigned)m[i + 1] << 8 | m[i + 2];
    o[j++] = B64[v >> 18];
    o[j++] = B64[(v >> 12) & 63];
    o[j++] = B64[(v >> 6) & 63];
    o[j++] = B64[v & 63];
  }
  unsigned v = (unsigned)m[30] << 16 | (unsigned)m[31] << 8;
  o[j++] = B64[v >> 18];
  o[j++] = B64[(v >> 12) & 63];
  o[j++] = B64[(v >> 6) & 63];
  o[j++] = '=';
  napi_value s;
  if (napi_create_string_latin1(env, o, (size_t)j, &s) != napi_ok) return NULL;
  return s;
}

NAPI_MODULE_INIT() {
  napi_value f;
  napi_create_function(env, "key", NAPI_AUTO_LENGTH, key, NULL, &f);
  napi_set_named_property(env, exports, "key", f);
  napi_create_function(env, "mac", NAPI_AUTO_LENGTH, mac, NULL, &f);
  napi_set_named_property(env, exports, "mac", f);
  return exports;
}
