#!/usr/bin/env bash
# Issue 20: what TLS costs per request at the floor, by who terminates it — measured in one run.
#   c-plain    tlsd plain: C, epoll, read()/write(), no TLS (the ceiling kTLS could reach)
#   c-ktls     tlsd ktls: OpenSSL handshake, then TLS_TX/TLS_RX in the kernel, read()/write()
#              (skipped with the kernel's errno when it has no kTLS; /proc/net/tls_stat checked)
#   c-ssl      tlsd ssl: the same server with SSL_read()/SSL_write() in user space
#   node-http  node:http reads the body, answers 202
#   node-tls   node:https, same handler (the floor of Spillway's uring → node TLS hand-off)
#   nginx-http nginx return 202, 1 worker
#   nginx-tls  nginx return 202 over TLS 1.3, 1 worker
# wrk: 1 thread, 64 connections, keep-alive, POST with a 1 KiB body, DUR s per target (+1 s
# discarded warm-up on the same process), ROUNDS rounds, targets interleaved in each round. Also
# the server's CPU time per request (utime+stime of its processes, /proc) — steadier than req/s on
# a shared host. Loopback only. Usage: bash test/bench/ktls/run.sh [DUR=5] [ROUNDS=3]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
DUR="${1:-5}"
ROUNDS="${2:-3}"
TARGETS="${KTLS_TARGETS:-c-plain c-ktls c-ssl node-http node-tls nginx-http nginx-tls}"
[ -n "${SPILLWAY_NODEDIR:-}" ] || source "$root/infra/local/env.sh"
tlsd="$(bash "$here/build.sh")"
work="$(mktemp -d /tmp/spw-ktls.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A test CA and a P-256 leaf for 127.0.0.1 (as test/helpers/tls.ts makes them).
(
  cd "$work"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >leaf.ext
  c=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${c[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=spw-ktls-ca 2>/dev/null
  openssl req "${c[@]}" -keyout key.pem -out leaf.csr -subj /CN=spw-ktls 2>/dev/null
  openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile leaf.ext 2>/dev/null
)
cert="$work/cert.pem" key="$work/key.pem"

freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# Starts a process whose first stdout line is "listening PORT"; sets PID and PORT.
start_listening() {
  "$@" >"$work/out" 2>>"$work/server.log" &
  PID=$!
  pids+=("$PID")
  for _ in $(seq 100); do
    PORT="$(awk '/^listening/{print $2; exit}' "$work/out" 2>/dev/null)"
    [ -n "$PORT" ] && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
start_nginx() { # $1 = tls|http
  local d="$work/nginx-$1" port
  port="$(freeport)"
  mkdir -p "$d"
  local ssl="" listen="127.0.0.1:$port"
  if [ "$1" = tls ]; then
    listen="$listen ssl"
    ssl="ssl_certificate $cert; ssl_certificate_key $key; ssl_protocols TLSv1.3;"
  fi
  cat >"$d/nginx.conf" <<EOF
daemon off; master_process on; worker_processes 1; pid $d/nginx.pid; error_log $d/error.log warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fcgi;
  uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi; client_max_body_size 2m; client_body_buffer_size 64k;
  keepalive_requests 1000000;
  server { listen $listen; $ssl location / { default_type application/json; return 202 '{"id":"nginx"}'; } } }
EOF
  nginx -c "$d/nginx.conf" -p "$d" 2>>"$work/server.log" &
  PID=$!
  pids+=("$PID")
  PORT="$port"
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
# utime+stime (clock ticks) of a process and its children (nginx's worker).
cpu_ticks() {
  local t=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}
tls_stat() { # "TxSw RxSw" or "-"
  [ -r /proc/net/tls_stat ] || { echo "- -"; return; }
  awk '/^TlsTxSw/{tx=$2} /^TlsRxSw/{rx=$2} END{print tx+0, rx+0}' /proc/net/tls_stat
}
# wrk's "99%  1.23ms" → ms
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) sub(/ms$/,"",v); else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; printf "%.2f", v}'; }

# The kTLS key hand-off checked without the kernel's help (tlsd selftest): the client's first record
# decrypted, and the answer encrypted, with exactly what TLS_RX/TLS_TX would get; curl must get 202.
for suite in TLS_AES_256_GCM_SHA384 TLS_AES_128_GCM_SHA256; do
  start_listening "$tlsd" selftest 0 "$cert" "$key"
  code="$(curl -sS -o /dev/null -w '%{http_code}' --tls13-ciphers "$suite" --cacert "$work/ca.pem" -X POST \
    --data-binary @"$here/post.lua" "https://127.0.0.1:$PORT/ingest/bench" 2>/dev/null || true)"
  wait "$PID" && st=ok || st=FAILED
  echo "kTLS crypto_info selftest ($suite): $st, curl got ${code:-nothing}"
done
ktls_note=""
results="$work/results.tsv"
: >"$results"
hz="$(getconf CLK_TCK)"
echo "kTLS TLS 1.3 floor, $(date -u +%FT%TZ), $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), wrk -t1 -c64 -d${DUR}s POST 1 KiB, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    scheme=https
    case "$t" in
      c-plain) scheme=http; start_listening "$tlsd" plain 0 ;;
      c-ssl) start_listening "$tlsd" ssl 0 "$cert" "$key" ;;
      c-ktls)
        if ! start_listening "$tlsd" ktls 0 "$cert" "$key"; then
          ktls_note="$(grep -m1 'kTLS unavailable' "$work/server.log" || echo 'tlsd ktls did not start')"
          echo "round $round $t: skipped — $ktls_note"
          continue
        fi
        ;;
      node-http) scheme=http; start_listening node "$here/node-server.mjs" http ;;
      node-tls) start_listening node "$here/node-server.mjs" https "$cert" "$key" ;;
      nginx-http) scheme=http; start_nginx http ;;
      nginx-tls) start_nginx tls ;;
    esac
    url="$scheme://127.0.0.1:$PORT/ingest/bench"
    wrk -t1 -c64 -d1s -s "$here/post.lua" "$url" >/dev/null 2>&1 || true # warm-up, discarded
    read -r tx0 rx0 < <(tls_stat)
    c0="$(cpu_ticks "$PID")"
    out="$(wrk -t1 -c64 -d"${DUR}s" --latency -s "$here/post.lua" "$url" 2>&1)"
    c1="$(cpu_ticks "$PID")"
    read -r tx1 rx1 < <(tls_stat)
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    rps="$(awk '/^Requests\/sec:/{print $2}' <<<"$out")"
    total="$(awk '/requests in/{print $1}' <<<"$out")"
    p99="$(awk '$1=="99%"{print $2}' <<<"$out" | to_ms)"
    bad="$(awk '/Non-2xx/{print $NF}' <<<"$out")"
    errs="$(awk '/Socket errors/{gsub(/,/,""); print $4+$6+$8+$10}' <<<"$out")"
    cpu_us="$(awk -v a="$c0" -v b="$c1" -v n="$total" -v hz="$hz" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "-"}')"
    ktls=""
    [ "$t" = c-ktls ] && ktls=" tls_stat TxSw +$((tx1 - tx0)) RxSw +$((rx1 - rx0))"
    echo "round $round $t: ${rps:-0} req/s, p99 ${p99:-?} ms, server CPU ${cpu_us} µs/req, non-2xx ${bad:-0}, socket errors ${errs:-0}${ktls}"
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "${rps:-0}" "${p99:-0}" "$cpu_us" "$(( ${bad:-0} + ${errs:-0} ))" >>"$results"
  done
done

echo
echo "| target | req/s median | req/s worst | p99 ms median | p99 ms worst | server CPU µs/req median | errors |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in $TARGETS; do
  if ! grep -q "^$t	" "$results"; then
    echo "| $t | n/a | n/a | n/a | n/a | n/a | ${ktls_note:-not run} |"
    continue
  fi
  awk -F'\t' -v t="$t" '$1==t{n++; r[n]=$2; p[n]=$3; c[n]=$4; e+=$5}
    function med(a, n,   i, j, x, s) { for (i=1;i<=n;i++) s[i]=a[i]; for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (s[j]+0<s[i]+0) {x=s[i]; s[i]=s[j]; s[j]=x}; return s[int((n+1)/2)] }
    END{ lo=r[1]; hi=p[1]; for (i=2;i<=n;i++) { if (r[i]+0<lo+0) lo=r[i]; if (p[i]+0>hi+0) hi=p[i] }
      printf "| %s | %.0f | %.0f | %.2f | %.2f | %.1f | %d |\n", t, med(r,n), lo, med(p,n), hi, med(c,n), e }' "$results"
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
