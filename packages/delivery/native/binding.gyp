# The delivery package's signing addon: HMAC-SHA256 for Standard Webhooks' `v1` signatures with
# the key's inner and outer SHA-256 states computed once per key. Build with
#   node-gyp rebuild --nodedir=$SPILLWAY_NODEDIR   (or: node native/build.mjs)
# OpenSSL comes from the Node binary itself (its libcrypto symbols are exported to addons).
{
  "targets": [
    {
      "target_name": "spillway_sign",
      "sources": ["src/sign.c"],
      "defines": ["NAPI_VERSION=9", "OPENSSL_SUPPRESS_DEPRECATED"],
      "cflags_c": ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"]
    }
  ]
}
