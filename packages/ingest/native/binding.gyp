# The io_uring ingest addon. Every source is listed here; build with
#   node-gyp rebuild --nodedir=$SPILLWAY_NODEDIR   (or: node native/build.mjs)
{
  "targets": [
    {
      "target_name": "spillway_uring",
      "sources": [
        "src/core/http_parser.c",
        "src/core/conn.c",
        "src/core/ring.c",
        "src/core/verify.c",
        "src/napi/binding.c"
      ],
      "include_dirs": ["src/core"],
      "defines": ["NAPI_VERSION=9", "_GNU_SOURCE"],
      "cflags_c": ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"],
      "libraries": ["-luring", "-lpthread"]
    }
  ]
}
