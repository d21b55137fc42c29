/*
 * Thin N-API glue over the C core (server.h). It converts arguments, turns event batches from the
 * ring thread into JS arrays through a threadsafe function, and nothing else: operational failures
 * are returned as negative errno numbers and become JS Errors in one TypeScript function
 * (uring-native.ts `uringError`); only argument misuse (a bug in the loader) throws here.
 */
#ifndef NAPI_VERSION
#define NAPI_VERSION 9
#endif
#include <node_api.h>

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "verify.h"

typedef struct addon_state {
  uint32_t live_servers; /* per-instance (worker threads each load their own) */
} addon_state;

typedef struct addon_server {
  addon_state *state;
  spw_server *srv;
  napi_threadsafe_function tsfn;
  int started, closed, orphaned, released;
} addon_server;

#define CHECK(call)                                                   \
  do {                                                                \
    if ((call) != napi_ok) {                                          \
      napi_throw_error(env, "SPW_ERR_URING_NAPI", "N-API call failed: " #call); \
      return NULL;                                                    \
    }                                                                 \
  } while (0)

/*
 * Opens a call on a server handle: reads up to n arguments into argv, and sets `as` to the handle in
 * argv[0] when `count_ok` holds for argc (the number the caller passed), else to NULL.
 */
#define SERVER_CALL(n, count_ok)                               \
  size_t argc = (n);                                           \
  napi_value argv[(n)];                                        \
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL)); \
  addon_server *as = (count_ok) ? get_server(env, argv[0]) : NULL

static napi_value misuse(napi_env env, const char *msg) {
  napi_throw_type_error(env, "SPW_ERR_URING_ARGS", msg);
  return NULL;
}

static napi_value num(napi_env env, double v) {
  napi_value out;
  napi_create_double(env, v, &out);
  return out;
}

/*
 * An optional numeric property: absent or undefined → 0 and *out untouched; a number in [0, max] →
 * 1 and *out set; anything else → -1 (misuse).
 */
static int get_prop_num(napi_env env, napi_value obj, const char *key, double max, double *out) {
  napi_value v;
  bool has = false;
  napi_has_named_property(env, obj, key, &has);
  if (!has) return 0;
  napi_get_named_property(env, obj, key, &v);
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_undefined) return 0;
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || !(d >= 0) || d > max) return -1;
  *out = d;
  return 1;
}

static int get_prop_u32(napi_env env, napi_value obj, const char *key, uint32_t *out) {
  double d;
  int r = get_prop_num(env, obj, key, 4294967295.0, &d);
  if (r > 0) *out = (uint32_t)d;
  return r < 0 ? -1 : 0;
}

/* The uint32 options of create() and where each goes in spw_config (absent: the core's default). */
static const struct {
  const char *key;
  size_t off;
} U32_OPTIONS[] = {
  {"answerTimeoutMs", offsetof(spw_config, answer_timeout_ms)},
  {"maxHeadBytes", offsetof(spw_config, max_head_bytes)},
  {"maxHeaders", offsetof(spw_config, max_headers)},
  {"headersTimeoutMs", offsetof(spw_config, headers_timeout_ms)},
  {"requestTimeoutMs", offsetof(spw_config, request_timeout_ms)},
  {"keepAliveTimeoutMs", offsetof(spw_config, keepalive_timeout_ms)},
  {"maxConnections", offsetof(spw_config, max_conns)},
  {"bufCount", offsetof(spw_config, buf_count)},
  {"bufSize", offsetof(spw_config, buf_size)},
  {"ringEntries", offsetof(spw_config, ring_entries)},
};

/* Reads the numeric options into cfg (port and reusePort into their own); -1 on any bad value. */
static int read_options(napi_env env, napi_value obj, spw_config *cfg, uint32_t *port, uint32_t *reuse) {
  if (get_prop_u32(env, obj, "port", port) || *port > 65535 || get_prop_u32(env, obj, "reusePort", reuse)) return -1;
  double body;
  int r = get_prop_num(env, obj, "maxBodyBytes", 9007199254740991.0, &body);
  if (r < 0) return -1;
  if (r > 0) cfg->max_body_bytes = (uint64_t)body;
  for (size_t i = 0; i < sizeof U32_OPTIONS / sizeof U32_OPTIONS[0]; i++)
    if (get_prop_u32(env, obj, U32_OPTIONS[i].key, (uint32_t *)((char *)cfg + U32_OPTIONS[i].off))) return -1;
  return 0;
}

static addon_server *get_server(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok) return NULL;
  return p;
}

static napi_value latin1(napi_env env, const char *p, size_t n) {
  napi_value s;
  napi_create_string_latin1(env, p, n, &s);
  return s;
}

/* A Buffer holding a copy of the n bytes at p (the event's bytes do not outlive the call). */
static napi_value bytes(napi_env env, const char *p, size_t n) {
  napi_value buf;
  void *dst;
  napi_create_buffer_copy(env, n, p, &dst, &buf);
  return buf;
}

/* Lets go of the threadsafe function once (every path that ends a server may reach here). */
static void release_tsfn(addon_server *as) {
  if (as->released) return;
  as->released = 1;
  napi_release_threadsafe_function(as->tsfn, napi_tsfn_release);
}

static void free_server(addon_server *as) {
  as->state->live_servers--;
  free(as);
}

/* Runs on the JS thread: one call per batch the ring thread delivered. */
static void call_js(napi_env env, napi_value cb, void *context, void *data) {
  addon_server *as = context;
  spw_batch *b = data;
  if (env == NULL || b == NULL) {
    spw_batch_free(b);
    return;
  }
  int closed = 0;
  napi_value arr;
  napi_create_array_with_length(env, b->n, &arr);
  for (uint32_t i = 0; i < b->n; i++) {
    spw_event *e = &b->ev[i];
    const char *p = b->arena + e->off;
    napi_value ev;
    napi_create_array(env, &ev);
    napi_set_element(env, ev, 0, num(env, e->type));
    napi_set_element(env, ev, 1, num(env, e->id));
    switch (e->type) {
      case SPW_EV_HEAD: {
        const char *q = p;
        for (uint32_t k = 0; k < 3; k++) {
          size_t n = strlen(q);
          napi_set_element(env, ev, 2 + k, latin1(env, q, n));
          q += n + 1;
        }
        napi_value hs;
        napi_create_array_with_length(env, (size_t)e->n_headers * 2, &hs);
        for (uint32_t k = 0; k < (uint32_t)e->n_headers * 2; k++) {
          size_t n = strlen(q);
          napi_set_element(env, hs, k, latin1(env, q, n));
          q += n + 1;
        }
        napi_set_element(env, ev, 5, hs);
        napi_set_element(env, ev, 6, num(env, (double)e->content_length));
        napi_value chunked;
        napi_get_boolean(env, e->chunked != 0, &chunked);
        napi_set_element(env, ev, 7, chunked);
        napi_set_element(env, ev, 8, num(env, (double)e->vset));
        break;
      }
      case SPW_EV_END:
        /* [3, id, verdict]: 1 signature matched on the ring thread, 2 it did not, 0 not verified there. */
        napi_set_element(env, ev, 2, num(env, (double)e->verdict));
        break;
      case SPW_EV_BODY:
        napi_set_element(env, ev, 2, bytes(env, p, e->len));
        break;
      case SPW_EV_ABORT:
        napi_set_element(env, ev, 2, latin1(env, p, e->len));
        break;
      case SPW_EV_HANDOFF:
        /* [6, id, fd, bytes already read]: the socket is the embedder's from here on. */
        napi_set_element(env, ev, 2, num(env, (double)e->content_length));
        napi_set_element(env, ev, 3, bytes(env, p, e->len));
        break;
      case SPW_EV_CLOSED:
        closed = 1;
        break;
      default:
        break;
    }
    napi_set_element(env, arr, i, ev);
  }
  spw_batch_free(b);
  napi_value undef;
  napi_get_undefined(env, &undef);
  napi_call_function(env, undef, cb, 1, &arr, NULL);
  if (closed) {
    /* CLOSED is the ring thread's last delivery: joining it here is immediate. */
    as->closed = 1;
    spw_server_destroy(as->srv);
    as->srv = NULL;
    release_tsfn(as);
    if (as->orphaned) free_server(as);
  }
}

static int deliver(void *ctx, spw_batch *batch, int blocking) {
  addon_server *as = ctx;
  napi_status st = napi_call_threadsafe_function(as->tsfn, batch, blocking ? napi_tsfn_blocking : napi_tsfn_nonblocking);
  if (st == napi_ok) return 0;
  if (st == napi_queue_full) return 1;
  spw_batch_free(batch); /* closing: nobody is left to hear it */
  return 0;
}

static void finalize_external(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  addon_server *as = data;
  if (as->started && !as->closed) {
    /* Dropped while running: stop it; call_js frees once CLOSED arrives. */
    as->orphaned = 1;
    spw_server_close(as->srv, 0, 0);
    return;
  }
  if (as->srv) spw_server_destroy(as->srv);
  release_tsfn(as);
  free_server(as);
}

/* create(options, onEvents) → handle | -errno */
static napi_value js_create(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  napi_valuetype t0, t1;
  if (argc < 2) return misuse(env, "create(options, onEvents)");
  napi_typeof(env, argv[0], &t0);
  napi_typeof(env, argv[1], &t1);
  if (t0 != napi_object || t1 != napi_function) return misuse(env, "create(options, onEvents)");
  addon_state *state;
  CHECK(napi_get_instance_data(env, (void **)&state));

  spw_config cfg;
  spw_config_defaults(&cfg);
  char host[64] = "0.0.0.0";
  napi_value hv;
  bool has = false;
  napi_has_named_property(env, argv[0], "host", &has);
  if (has) {
    napi_get_named_property(env, argv[0], "host", &hv);
    size_t n;
    if (napi_get_value_string_utf8(env, hv, host, sizeof host, &n) != napi_ok) return misuse(env, "host must be a string");
  }
  cfg.host = host;
  uint32_t port = 0, reuse = 0, handoff = 0, listen_fd = UINT32_MAX;
  if (read_options(env, argv[0], &cfg, &port, &reuse) || get_prop_u32(env, argv[0], "handoff", &handoff) ||
      get_prop_u32(env, argv[0], "listenFd", &listen_fd))
    return misuse(env, "numeric options must be non-negative numbers");
  cfg.port = (int)port;
  cfg.reuse_port = reuse != 0;
  cfg.handoff = handoff != 0;
  cfg.listen_fd = listen_fd > 0x7fffffff ? -1 : (int)listen_fd;

  addon_server *as = calloc(1, sizeof *as);
  if (!as) return num(env, -ENOMEM);
  as->state = state;
  int r = spw_server_create(&cfg, deliver, as, &as->srv);
  if (r < 0) {
    free(as);
    return num(env, r);
  }
  napi_value name;
  napi_create_string_utf8(env, "spillway:ingest:uring", NAPI_AUTO_LENGTH, &name);
  if (napi_create_threadsafe_function(env, argv[1], NULL, name, 256, 1, NULL, NULL, as, call_js, &as->tsfn) != napi_ok) {
    spw_server_destroy(as->srv);
    free(as);
    return num(env, -ENOMEM);
  }
  /* A server that never listens must not keep the process alive. */
  napi_unref_threadsafe_function(env, as->tsfn);
  state->live_servers++;
  napi_value ext;
  CHECK(napi_create_external(env, as, finalize_external, NULL, &ext));
  return ext;
}

static napi_value js_listen(napi_env env, napi_callback_info info) {
  SERVER_CALL(1, argc > 0);
  if (!as) return misuse(env, "listen(handle)");
  if (as->started || as->closed) return num(env, -EALREADY);
  int port = spw_server_start(as->srv);
  if (port < 0) return num(env, port);
  as->started = 1;
  napi_ref_threadsafe_function(env, as->tsfn);
  return num(env, port);
}

/* respond(handle, id, buffer, close[, wake = true]); wake false: queued until wake(handle) */
static napi_value js_respond(napi_env env, napi_callback_info info) {
  SERVER_CALL(5, argc == 4 || argc == 5);
  double id;
  void *data;
  size_t len;
  bool close_conn, wake = true;
  if (!as || napi_get_value_double(env, argv[1], &id) != napi_ok ||
      napi_get_buffer_info(env, argv[2], &data, &len) != napi_ok || napi_get_value_bool(env, argv[3], &close_conn) != napi_ok ||
      (argc == 5 && napi_get_value_bool(env, argv[4], &wake) != napi_ok))
    return misuse(env, "respond(handle, id, buffer, close[, wake])");
  if (!as->started || as->closed) return num(env, -ENOTCONN);
  return num(env, spw_server_respond_wake(as->srv, id, data, len, close_conn, wake));
}

/* wake(handle): sends the answers queued with wake false */
static napi_value js_wake(napi_env env, napi_callback_info info) {
  SERVER_CALL(1, argc == 1);
  if (!as) return misuse(env, "wake(handle)");
  if (!as->started || as->closed) return num(env, -ENOTCONN);
  return num(env, spw_server_wake(as->srv));
}

/* cont(handle, id, bodyCap) */
static napi_value js_continue(napi_env env, napi_callback_info info) {
  SERVER_CALL(3, argc == 3);
  double id, cap;
  if (!as || napi_get_value_double(env, argv[1], &id) != napi_ok || napi_get_value_double(env, argv[2], &cap) != napi_ok || !(cap >= 0))
    return misuse(env, "cont(handle, id, bodyCap)");
  if (!as->started || as->closed) return num(env, -ENOTCONN);
  /* Infinity or anything past 2^53 means no cap of its own. */
  uint64_t c = cap > 9007199254740991.0 ? UINT64_MAX : (uint64_t)cap;
  return num(env, spw_server_continue(as->srv, id, c));
}

/* A UTF-8 copy of a JS string (malloc'd; *len without the NUL), or NULL. */
static char *utf8_copy(napi_env env, napi_value v, size_t *len) {
  if (napi_get_value_string_utf8(env, v, NULL, 0, len) != napi_ok) return NULL;
  char *out = malloc(*len + 1);
  if (out) napi_get_value_string_utf8(env, v, out, *len + 1, len);
  return out;
}

/* Reads verification spec i ([vset, kind, secrets: string[]] or null) into r; the secrets are
 * malloc'd into r->secrets. Returns 0, or 2 when it is malformed. */
static int read_vspec(napi_env env, napi_value specs, uint32_t i, spw_route_spec *r) {
  napi_value sv;
  napi_valuetype t;
  if (napi_get_element(env, specs, i, &sv) != napi_ok || napi_typeof(env, sv, &t) != napi_ok) return 2;
  if (t == napi_null || t == napi_undefined) return 0;
  napi_value vv, kv, secs;
  double vset, kind;
  uint32_t ns = 0;
  if (napi_get_element(env, sv, 0, &vv) != napi_ok || napi_get_value_double(env, vv, &vset) != napi_ok ||
      napi_get_element(env, sv, 1, &kv) != napi_ok || napi_get_value_double(env, kv, &kind) != napi_ok ||
      napi_get_element(env, sv, 2, &secs) != napi_ok || napi_get_array_length(env, secs, &ns) != napi_ok)
    return 2;
  if (!(vset >= 1 && vset <= 4294967295.0) || ns > SPW_V_MAX_KEYS) return 2;
  for (uint32_t k = 0; k < ns; k++) {
    napi_value e;
    if (napi_get_element(env, secs, k, &e) != napi_ok) return 2;
    char *copy = utf8_copy(env, e, &r->secret_lens[k]);
    if (!copy) return 2;
    r->secrets[r->n_secrets++] = copy;
  }
  r->vset = (uint32_t)vset;
  r->kind = (int)kind;
  return 0;
}

/* setRoutes(handle, paths: string[], caps: number[], verify?: ([vset, kind, secrets] | null)[]) */
static napi_value js_set_routes(napi_env env, napi_callback_info info) {
  SERVER_CALL(4, argc >= 3);
  uint32_t n = 0, n2 = 0, n3 = 0;
  napi_valuetype vt = napi_undefined;
  if (argc >= 4) napi_typeof(env, argv[3], &vt);
  int has_v = vt != napi_undefined && vt != napi_null;
  if (!as || napi_get_array_length(env, argv[1], &n) != napi_ok || napi_get_array_length(env, argv[2], &n2) != napi_ok || n != n2 ||
      (has_v && (napi_get_array_length(env, argv[3], &n3) != napi_ok || n3 != n)))
    return misuse(env, "setRoutes(handle, paths, caps, verify?)");
  if (as->closed) return num(env, -ENOTCONN);
  char **paths = calloc(n ? n : 1, sizeof *paths);
  spw_route_spec *specs = calloc(n ? n : 1, sizeof *specs);
  napi_value ret = NULL;
  int bad = !paths || !specs;
  for (uint32_t i = 0; i < n && !bad; i++) {
    napi_value pv, cv;
    size_t len;
    double cap;
    napi_get_element(env, argv[1], i, &pv);
    napi_get_element(env, argv[2], i, &cv);
    if (napi_get_value_string_latin1(env, pv, NULL, 0, &len) != napi_ok || napi_get_value_double(env, cv, &cap) != napi_ok ||
        !(cap >= 0)) {
      bad = 2;
      break;
    }
    paths[i] = malloc(len + 1);
    if (!paths[i]) {
      bad = 1;
      break;
    }
    napi_get_value_string_latin1(env, pv, paths[i], len + 1, &len);
    specs[i].path = paths[i];
    specs[i].cap = cap > 9007199254740991.0 ? (uint64_t)9007199254740991ULL : (uint64_t)cap;
    if (has_v) bad = read_vspec(env, argv[3], i, &specs[i]);
  }
  if (bad == 2) ret = misuse(env, "setRoutes: paths must be strings, caps non-negative numbers, verify [vset ≥ 1, kind, ≤ 2 secrets] or null");
  else if (bad) ret = num(env, -ENOMEM);
  else ret = num(env, spw_server_set_routes(as->srv, specs, n));
  if (specs)
    for (uint32_t i = 0; i < n; i++)
      for (int k = 0; k < specs[i].n_secrets; k++) {
        memset((char *)specs[i].secrets[k], 0, specs[i].secret_lens[k]);
        free((char *)specs[i].secrets[k]);
      }
  free(specs);
  if (paths)
    for (uint32_t i = 0; i < n; i++) free(paths[i]);
  free(paths);
  return ret;
}

/* close(handle, graceMs, drain) */
static napi_value js_close(napi_env env, napi_callback_info info) {
  SERVER_CALL(3, argc == 3);
  double grace;
  bool drain = false;
  if (!as || napi_get_value_double(env, argv[1], &grace) != napi_ok || !(grace >= 0) ||
      napi_get_value_bool(env, argv[2], &drain) != napi_ok)
    return misuse(env, "close(handle, graceMs, drain)");
  if (as->closed) return num(env, -EALREADY);
  if (!as->started) {
    /* Never listened: there is no thread to wait for. */
    as->closed = 1;
    release_tsfn(as);
    return num(env, 1);
  }
  return num(env, spw_server_close(as->srv, grace > 4e9 ? 4000000000u : (uint32_t)grace, drain));
}

/* listenFd(handle) → fd | -1 */
static napi_value js_listen_fd(napi_env env, napi_callback_info info) {
  SERVER_CALL(1, argc > 0);
  if (!as) return misuse(env, "listenFd(handle)");
  if (!as->started || as->closed) return num(env, -1);
  return num(env, spw_server_listen_fd(as->srv));
}

/* probe() → [0] | [-errno, step] */
static napi_value js_probe(napi_env env, napi_callback_info info) {
  (void)info;
  const char *what = NULL;
  int r = spw_probe(&what);
  napi_value arr;
  napi_create_array(env, &arr);
  napi_set_element(env, arr, 0, num(env, r));
  if (what) {
    napi_value s;
    napi_create_string_utf8(env, what, NAPI_AUTO_LENGTH, &s);
    napi_set_element(env, arr, 1, s);
  }
  return arr;
}

static napi_value js_strerror(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  double e;
  if (argc < 1 || napi_get_value_double(env, argv[0], &e) != napi_ok) return misuse(env, "strerror(errno)");
  napi_value s;
  napi_create_string_utf8(env, strerror((int)(e < 0 ? -e : e)), NAPI_AUTO_LENGTH, &s);
  return s;
}

static napi_value js_live_servers(napi_env env, napi_callback_info info) {
  (void)info;
  addon_state *state;
  CHECK(napi_get_instance_data(env, (void **)&state));
  return num(env, state->live_servers);
}

static void free_state(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  free(data);
}

NAPI_MODULE_INIT() {
  addon_state *state = calloc(1, sizeof *state);
  if (!state || napi_set_instance_data(env, state, free_state, NULL) != napi_ok) {
    free(state);
    napi_throw_error(env, "SPW_ERR_URING_NAPI", "cannot allocate addon state");
    return NULL;
  }
  napi_property_descriptor props[] = {
    {"create", NULL, js_create, NULL, NULL, NULL, napi_default, NULL},
    {"listen", NULL, js_listen, NULL, NULL, NULL, napi_default, NULL},
    {"respond", NULL, js_respond, NULL, NULL, NULL, napi_default, NULL},
    {"wake", NULL, js_wake, NULL, NULL, NULL, napi_default, NULL},
    {"cont", NULL, js_continue, NULL, NULL, NULL, napi_default, NULL},
    {"setRoutes", NULL, js_set_routes, NULL, NULL, NULL, napi_default, NULL},
    {"close", NULL, js_close, NULL, NULL, NULL, napi_default, NULL},
    {"listenFd", NULL, js_listen_fd, NULL, NULL, NULL, napi_default, NULL},
    {"probe", NULL, js_probe, NULL, NULL, NULL, napi_default, NULL},
    {"strerror", NULL, js_strerror, NULL, NULL, NULL, napi_default, NULL},
    {"liveServers", NULL, js_live_servers, NULL, NULL, NULL, napi_default, NULL},
  };
  CHECK(napi_define_properties(env, exports, sizeof props / sizeof props[0], props));
  return exports;
}
