#!/usr/bin/env bash
# compare-nginx.sh — wirefold against nginx, side by side, in one run, on loopback.
#
# Usage: bench/compare-nginx.sh [-h]
#
# Environment (all optional):
#   WIREFOLD=PATH    a wirefold binary to use (default: cargo build --release -p wirefold)
#   CORPUS=DIR       the shared corpus (default: <repo>/../shared/corpus)
#   JPEG=FILE        the JPEG to serve (default: a real photo found on the machine)
#   DURATION=4       seconds per wrk run          REPEATS=3    runs per cell (median)
#   THREADS=2        wrk threads                  CONNS=32     wrk connections, h2load clients
#   H2_REQUESTS=20000  requests per h2load run    H2_STREAMS=10  h2load -m (rows 5*)
#   TARGETS="html mix"  html = the ~100 KB page; mix = page, CSS, JS, JPEG round robin
#   ROWS="1 2a 2b 2c 3a 3b 3c 4a 4b 4c 5a 5b 5c"   which rows to run
#   MODE=closed      closed: wrk and h2load at saturation; open-loop: latency at a fixed
#                    rate (below; its defaults: ROWS="2a 3b" TARGETS=html)
#   LOADGEN=PATH     a wirefold-loadgen binary (open-loop; default: cargo build --release)
#   LOAD_SHARE=0.8   open-loop: the rate, as a share of nginx's saturation req/s
#   LOADGEN_THREADS=1  open-loop: the loader's I/O threads (one leaves the most CPU to servers)
#   LOADGEN_SCHED=   batch: wrk, h2load and the open-loop loader run under SCHED_BATCH
#                    (chrt -b 0), so that their wake-ups do not preempt a server
#                    mid-request, as packets from other machines would not; unset: the
#                    default policy (both servers are measured under the same one)
#   FILE_CHECK_MS=   wirefold's files.check_interval_ms, 0-1000 (unset: its default, 0)
#   KEEP_TMP=1       keep the temp dir (configs, logs) for inspection
#
# Rows (AE = the Accept-Encoding every request of the row carries, for every server):
#   1   static files, identity                      AE: none
#   2a  static files, compressed                    AE: "gzip, br"
#   2b  static files, compressed                    AE: "gzip, deflate, br, zstd" (Chromium)
#   2c  static files, compressed                    AE: "gzip"      -> wirefold's cached gzip 9, nginx gzip_static (gzip -9)
#   3a  proxy, cacheable (max-age=3600), identity   AE: none
#   3b  proxy, cacheable, compressed                AE: "gzip, br"
#   3c  proxy, cacheable, compressed                AE: Chromium's
#   4a  proxy, uncacheable (no-store), compressed   AE: "gzip, br"  -> br level 4 on both
#   4b  proxy, uncacheable, compressed              AE: "gzip"      -> gzip level 6 on both
#   4c  proxy, uncacheable, compressed              AE: Chromium's  -> wirefold zstd:3, nginx br 4
#   5a  static files, identity, TLS + HTTP/2        AE: none
#   5b  static files, compressed, TLS + HTTP/2      AE: "gzip, br"
#   5c  proxy, cacheable, compressed, TLS + HTTP/2  AE: "gzip, br"  (nginx: proxy_cache of precompressed)
#
# Rows 5*: h2load -n H2_REQUESTS -c CONNS -m H2_STREAMS (installed with nghttp2-client
# when missing) over TLS 1.3 with HTTP/2 by ALPN. One self-signed ECDSA P-256
# certificate, made per run with openssl, serves both: wirefold --tls-cert/--tls-key
# (a second `serve --root` and `serve --origin` with it), nginx `listen ... ssl http2`
# with its default TLS settings; the cipher each negotiated is printed. The CONNS
# handshakes are part of each run; p50/p99 come from h2load's per-request log.
#
# Both servers get 2 cores' worth of workers (nginx worker_processes 2 with reuseport so
# both workers get connections; wirefold one connection thread per core). wrk,
# the origin and both servers share the machine, and every server is measured in turn
# (interleaved, REPEATS times), so the ratios are comparable within one run; absolute
# numbers are not portable. Every body is decoded and compared with the file ("ok").
#
# Columns: body B (curl size_download, mean over the target's files), wire B (wrk bytes
# read / requests, headers included), req/s, p50/p99 (wrk --latency), cpu us (CPU time,
# user+system, the server under test spent per request, read from /proc: unlike req/s it
# stays meaningful when other work shares the cores; on a busy machine a server with many
# runnable threads, like wirefold's blocking pool, wins CPU share and req/s from one with
# two workers, so compare cpu us too), errs (wrk socket errors + non-2xx).
#
# Output: a human table (medians), the ratios wirefold/nginx, and a last line of JSON.
#
# Open loop (MODE=open-loop; rows 1, 2*, 3*; target html): per row, nginx's saturation
# req/s is measured with wrk (median of REPEATS), then wirefold-loadgen (crates/loadgen)
# sends LOAD_SHARE of that rate on a fixed schedule over CONNS keep-alive connections
# for DURATION s, to nginx and to wirefold in turn, REPEATS times. Latency counts from
# each request's due time, as wrk2 does, so a server that falls behind shows in the
# tail instead of being asked less. The nginx peer is the one serving stored bytes
# (static: gzip_static/brotli_static; proxy: proxy_cache of the origin's precompressed
# files). Columns: rate asked, achieved, p50/p90/p99/p99.9/max, server CPU us per
# request, errors (failed + not 2xx + unanswered), lag p99 (how late the loader itself
# sent: its own CPU shortage, included in the latencies); ratios of p50 and p99; JSON last.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -gt 0 ]] && { echo "compare-nginx.sh takes no arguments (see -h); got: $*" >&2; exit 2; }

START_TS=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
# shellcheck source=bench/nginx-lib.sh
source "$HERE/nginx-lib.sh"

CORPUS=${CORPUS:-$REPO/../shared/corpus}
DURATION=${DURATION:-4}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-2}
CONNS=${CONNS:-32}
H2_REQUESTS=${H2_REQUESTS:-20000}
H2_STREAMS=${H2_STREAMS:-10}
LOAD_SHARE=${LOAD_SHARE:-0.8}
LOADGEN_THREADS=${LOADGEN_THREADS:-1}
MODE=${MODE:-closed}
LOADGEN_SCHED=${LOADGEN_SCHED:-}
case "$LOADGEN_SCHED" in
    "") LOADER=() ;;
    batch) LOADER=(chrt --batch 0) ;;
    *) die "LOADGEN_SCHED=$LOADGEN_SCHED: batch, or unset for the default policy" ;;
esac
case "$MODE" in
    closed) ROWS=${ROWS:-1 2a 2b 2c 3a 3b 3c 4a 4b 4c 5a 5b 5c}; TARGETS=${TARGETS:-html mix} ;;
    open-loop) ROWS=${ROWS:-2a 3b}; TARGETS=${TARGETS:-html} ;;
    *) die "MODE=$MODE: closed or open-loop" ;;
esac
# The TLS rows need a certificate, h2load, and TLS listeners on both sides.
TLS_ROWS=0
for r in $ROWS; do [[ $r == 5* ]] && TLS_ROWS=1; done

# ---------------------------------------------------------------- tools and binaries
if [[ $TLS_ROWS == 1 ]]; then need_tools nghttp2-client=h2load openssl=openssl; else need_tools; fi
find_wirefold
[[ $MODE == open-loop ]] && find_loadgen

# ---------------------------------------------------------------- temp dir, processes
bench_temp compare-nginx

# ---------------------------------------------------------------- the files
pick_page
[[ -d "$CORPUS/assets" ]] || die "corpus assets not found at $CORPUS/assets (set CORPUS=DIR)"
CSS_SRC=$(find "$CORPUS"/assets/whatwg__whatwg.org/resources-whatwg-org_standard-css/ -type f -name '*.css' | sort | awk 'END{print}')
JS_SRC=$(find "$CORPUS"/assets/w3c__aria/common_script_aria-js/ -type f -name '*.js' | sort | awk 'END{print}')
[[ -f "$CSS_SRC" && -f "$JS_SRC" ]] || die "could not pick CSS/JS from $CORPUS"

is_jpeg() { [[ -f "$1" ]] && [[ $(head -c 3 "$1" | od -An -tx1 | tr -d ' \n') == ffd8ff ]]; }
find_jpeg() {
    # A real photograph already on the machine: Rust's documentation (shipped with the
    # toolchain that builds wirefold) has one; else anything from an installed package.
    local sysroot cand
    if command -v rustc >/dev/null; then
        sysroot=$(rustc --print sysroot 2>/dev/null || true)
        cand="$sysroot/share/doc/rust/html/embedded-book/assets/f3.jpg"
        is_jpeg "$cand" && { echo "$cand"; return; }
    fi
    while IFS= read -r cand; do
        is_jpeg "$cand" && { echo "$cand"; return; }
    done < <(find /usr/share /usr/lib /usr/local /root/.rustup /opt -xdev -type f \
                \( -iname '*.jpg' -o -iname '*.jpeg' \) -size +40k -size -2M 2>/dev/null | sort | head -50)
}
if [[ -n "${JPEG:-}" ]]; then
    is_jpeg "$JPEG" || die "JPEG=$JPEG is not a JPEG file"
    JPEG_SRC=$JPEG
else
    JPEG_SRC=$(find_jpeg || true)
    if [[ -z "$JPEG_SRC" ]]; then
        # Nothing shipped one: encode ImageMagick's built-in sample picture as a JPEG.
        command -v magick >/dev/null || convert -version 2>/dev/null | grep -q ImageMagick || apt_install imagemagick
        convert logo: -resize 200% -quality 85 "$TMP/generated.jpg"
        JPEG_SRC="$TMP/generated.jpg"
    fi
fi

FILES="$TMP/files"; PRE="$TMP/pre"
mkdir -p "$FILES" "$PRE"
cp "$HTML_SRC" "$FILES/page.html"
cp "$CSS_SRC" "$FILES/style.css"
cp "$JS_SRC" "$FILES/script.js"
cp "$JPEG_SRC" "$FILES/photo.jpg"
cp "$FILES"/* "$PRE/"
precompress "$PRE" page.html style.css script.js
chmod -R a+rX "$TMP"
declare -A SRC=([page.html]=$HTML_SRC [style.css]=$CSS_SRC [script.js]=$JS_SRC [photo.jpg]=$JPEG_SRC)
log "files: $(for f in page.html style.css script.js photo.jpg; do printf '%s=%s B ' "$f" "$(stat -c %s "$FILES/$f")"; done)"

declare -A TARGET_PATHS=([html]="/page.html" [mix]="/page.html /style.css /script.js /photo.jpg")
for t in $TARGETS; do
    [[ -n "${TARGET_PATHS[$t]:-}" ]] || die "unknown target $t (html, mix)"
    [[ $MODE == open-loop && $t != html ]] && die "open-loop mode measures one URL: TARGETS=html"
    {
        echo "local paths = {"
        for p in ${TARGET_PATHS[$t]}; do echo "  \"$p\","; done
        echo "}"
        cat <<'LUA'
local prefix = os.getenv("WRK_PREFIX") or ""
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format(nil, prefix .. paths[i])
end
LUA
    } > "$TMP/$t.lua"
done

# ---------------------------------------------------------------- ports, certificate
P_ORIGIN=$(free_port); P_NGX_STATIC=$(free_port); P_NGX_OTF=$(free_port); P_NGX_PROXY=$(free_port)
P_WF_ROOT=$(free_port); P_WF_ROOT_ADMIN=$(free_port); P_WF_PROXY=$(free_port); P_WF_PROXY_ADMIN=$(free_port)
if [[ $TLS_ROWS == 1 ]]; then
    P_NGX_STATIC_TLS=$(free_port); P_NGX_PROXY_TLS=$(free_port)
    P_WF_ROOT_TLS=$(free_port); P_WF_ROOT_TLS_ADMIN=$(free_port)
    P_WF_PROXY_TLS=$(free_port); P_WF_PROXY_TLS_ADMIN=$(free_port)
    CERT="$TMP/tls/cert.pem"; KEY="$TMP/tls/key.pem"
    mkdir -p "$TMP/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$KEY" -out "$CERT" 2>"$TMP/openssl.log" || { cat "$TMP/openssl.log" >&2; die "openssl could not make the certificate"; }
    chmod a+r "$KEY"
fi

# ---------------------------------------------------------------- nginx configs
COMP_TYPES="text/plain text/css application/javascript application/json image/svg+xml"

# The origin: the same files, cacheable under /cache/, uncacheable under /nostore/, and
# precompressed (gzip_static/brotli_static, Vary) under /cachepre/. It never compresses
# on the fly. Its access log counts what reaches it.
{
    nginx_main origin 2
    cat <<EOF
http {
    include $MIME;
    default_type application/octet-stream;
    access_log $TMP/origin-access.log combined buffer=64k flush=1s;
    sendfile on;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$P_ORIGIN;
        location /cache/    { alias $FILES/; add_header Cache-Control "max-age=3600" always; }
        location /nostore/  { alias $FILES/; add_header Cache-Control "no-store" always; }
        location /cachepre/ { alias $PRE/; gzip_static on; brotli_static on; gzip_vary on;
                              add_header Cache-Control "max-age=3600" always; }
    }
}
EOF
} > "$TMP/origin.conf"

# nginx_proxy_server LISTEN-PARAMETERS [DIRECTIVES]: reverse proxy with proxy_cache,
# compressing on the fly.
nginx_proxy_server() {
    cat <<EOF
    server {
        listen $1;
        ${2:-}
        gzip on; gzip_comp_level $NGX_GZIP_LEVEL; gzip_min_length $MIN_SIZE; gzip_vary on;
        gzip_proxied any; gzip_types $COMP_TYPES;
        brotli on; brotli_comp_level $NGX_BR_LEVEL; brotli_min_length $MIN_SIZE;
        brotli_types $COMP_TYPES;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache wfbench;
            proxy_cache_lock on;
            add_header X-Cache-Status \$upstream_cache_status;
        }
    }
EOF
}

# The peer: its servers in one nginx with 2 workers.
{
    nginx_main peer 2
    echo "http {"
    nginx_http_common
    cat <<EOF
    proxy_cache_path $TMP/ngx-cache levels=1:2 keys_zone=wfbench:10m max_size=1g inactive=1h use_temp_path=off;
    upstream origin { server 127.0.0.1:$P_ORIGIN; keepalive 64; }

    # static, compressed on the fly
    server {
        listen 127.0.0.1:$P_NGX_OTF reuseport;
        root $FILES;
        gzip on; gzip_comp_level $NGX_GZIP_LEVEL; gzip_min_length $MIN_SIZE; gzip_vary on;
        gzip_types $COMP_TYPES;
        brotli on; brotli_comp_level $NGX_BR_LEVEL; brotli_min_length $MIN_SIZE;
        brotli_types $COMP_TYPES;
    }
EOF
    nginx_static_server "127.0.0.1:$P_NGX_STATIC reuseport"
    nginx_proxy_server "127.0.0.1:$P_NGX_PROXY reuseport"
    if [[ $TLS_ROWS == 1 ]]; then
        # nginx 1.22's default protocols stop at TLS 1.2 (1.23.4 added 1.3); wirefold
        # (rustls) speaks 1.3, and so must both for one comparison.
        NGX_TLS="ssl_certificate $CERT; ssl_certificate_key $KEY; ssl_protocols TLSv1.2 TLSv1.3;"
        nginx_static_server "127.0.0.1:$P_NGX_STATIC_TLS ssl http2 reuseport" "$NGX_TLS"
        nginx_proxy_server "127.0.0.1:$P_NGX_PROXY_TLS ssl http2 reuseport" "$NGX_TLS"
    fi
    echo "}"
} > "$TMP/peer.conf"

write_wirefold_config "$TMP/wirefold.toml"

# ---------------------------------------------------------------- start
start_nginx origin;   wait_http origin "$LAST_PID" "http://127.0.0.1:$P_ORIGIN/cache/page.html"
start_nginx peer;     wait_http nginx "$LAST_PID" "http://127.0.0.1:$P_NGX_STATIC/page.html"
PEER_PID=$LAST_PID
# start_wf NAME PORT ADMIN PATH-TO-WAIT-FOR MODE-ARGS...: pid in LAST_PID
start_wf() {
    local name=$1 port=$2 admin=$3 path=$4 scheme=http; shift 4
    [[ " $* " == *" --tls-cert "* ]] && scheme=https
    start_wirefold "$name" "$port" "$admin" "$TMP/wirefold.toml" "$@"
    wait_http "wirefold $name" "$LAST_PID" "$scheme://127.0.0.1:$port$path"
}
start_wf wf-root "$P_WF_ROOT" "$P_WF_ROOT_ADMIN" /page.html --root "$FILES"
WF_ROOT_PID=$LAST_PID
start_wf wf-proxy "$P_WF_PROXY" "$P_WF_PROXY_ADMIN" /nostore/page.html --origin "http://127.0.0.1:$P_ORIGIN"
WF_PROXY_PID=$LAST_PID
if [[ $TLS_ROWS == 1 ]]; then
    start_wf wf-root-tls "$P_WF_ROOT_TLS" "$P_WF_ROOT_TLS_ADMIN" /page.html --root "$FILES" --tls-cert "$CERT" --tls-key "$KEY"
    WF_ROOT_TLS_PID=$LAST_PID
    start_wf wf-proxy-tls "$P_WF_PROXY_TLS" "$P_WF_PROXY_TLS_ADMIN" /nostore/page.html --origin "http://127.0.0.1:$P_ORIGIN" --tls-cert "$CERT" --tls-key "$KEY"
    WF_PROXY_TLS_PID=$LAST_PID
fi
# nginx's worker (and cache helper) processes: children of the peer's master.
PEER_PIDS="$PEER_PID $(children_of "$PEER_PID" | tr '\n' ' ')"
CLK_TCK=$(getconf CLK_TCK)
log "nginx $(nginx -v 2>&1 | sed 's/.*\///'), wirefold $("$WIREFOLD" --version | awk '{print $2}'), wrk -t$THREADS -c$CONNS -d${DURATION}s x$REPEATS, load generator's policy: ${LOADGEN_SCHED:-default}"

# ---------------------------------------------------------------- servers and rows
# server id -> "port|path prefix|label|scheme (empty: http)"
declare -A SERVER=(
    [wf_root]="$P_WF_ROOT||wirefold --root (cached $WF_CACHED)"
    [ngx_static]="$P_NGX_STATIC||nginx static, gzip_static+brotli_static (gzip -9, brotli -q 11)"
    [ngx_otf]="$P_NGX_OTF||nginx static, on the fly (gzip $NGX_GZIP_LEVEL, br $NGX_BR_LEVEL)"
    [wf_cache]="$P_WF_PROXY|/cache|wirefold --origin, cached (cached $WF_CACHED)"
    [ngx_cache]="$P_NGX_PROXY|/cache|nginx proxy_cache + on the fly (gzip $NGX_GZIP_LEVEL, br $NGX_BR_LEVEL)"
    [ngx_cachepre]="$P_NGX_PROXY|/cachepre|nginx proxy_cache of origin-precompressed (gzip -9, brotli -q 11)"
    [wf_nostore]="$P_WF_PROXY|/nostore|wirefold --origin, no-store (on the fly $WF_ON_THE_FLY)"
    [ngx_nostore]="$P_NGX_PROXY|/nostore|nginx proxy_pass + on the fly (gzip $NGX_GZIP_LEVEL, br $NGX_BR_LEVEL)"
)
# server id -> the processes whose CPU time is its cost
declare -A SERVER_PIDS=(
    [wf_root]=$WF_ROOT_PID [wf_cache]=$WF_PROXY_PID [wf_nostore]=$WF_PROXY_PID
    [ngx_static]=$PEER_PIDS [ngx_otf]=$PEER_PIDS [ngx_cache]=$PEER_PIDS [ngx_cachepre]=$PEER_PIDS [ngx_nostore]=$PEER_PIDS
)
if [[ $TLS_ROWS == 1 ]]; then
    SERVER+=(
        [wf_root_tls]="$P_WF_ROOT_TLS||wirefold --root, TLS + h2 (cached $WF_CACHED)|https"
        [ngx_static_tls]="$P_NGX_STATIC_TLS||nginx static, TLS + h2, gzip_static+brotli_static|https"
        [wf_cache_tls]="$P_WF_PROXY_TLS|/cache|wirefold --origin, TLS + h2, cached (cached $WF_CACHED)|https"
        [ngx_cachepre_tls]="$P_NGX_PROXY_TLS|/cachepre|nginx proxy_cache of precompressed, TLS + h2|https"
    )
    SERVER_PIDS+=([wf_root_tls]=$WF_ROOT_TLS_PID [wf_cache_tls]=$WF_PROXY_TLS_PID [ngx_static_tls]=$PEER_PIDS [ngx_cachepre_tls]=$PEER_PIDS)
fi
# row id -> "AE|scenario|wirefold server|nginx servers"
declare -A ROW=(
    [1]="|static files, identity|wf_root|ngx_static"
    [2a]="gzip, br|static files, compressed|wf_root|ngx_static ngx_otf"
    [2b]="$AE_CHROMIUM|static files, compressed|wf_root|ngx_static ngx_otf"
    [2c]="gzip|static files, compressed (cached gzip 9 vs gzip_static)|wf_root|ngx_static"
    [3a]="|proxy, cacheable, identity|wf_cache|ngx_cache"
    [3b]="gzip, br|proxy, cacheable, compressed|wf_cache|ngx_cache ngx_cachepre"
    [3c]="$AE_CHROMIUM|proxy, cacheable, compressed|wf_cache|ngx_cache ngx_cachepre"
    [4a]="gzip, br|proxy, no-store, on the fly (br 4 both)|wf_nostore|ngx_nostore"
    [4b]="gzip|proxy, no-store, on the fly (gzip 6 both)|wf_nostore|ngx_nostore"
    [4c]="$AE_CHROMIUM|proxy, no-store, on the fly (wf zstd 3, nginx br 4)|wf_nostore|ngx_nostore"
    [5a]="|static files, identity, TLS + HTTP/2|wf_root_tls|ngx_static_tls"
    [5b]="gzip, br|static files, compressed, TLS + HTTP/2|wf_root_tls|ngx_static_tls"
    [5c]="gzip, br|proxy, cacheable, compressed, TLS + HTTP/2|wf_cache_tls|ngx_cachepre_tls"
)
# Open loop: the row's nginx that serves stored bytes, as wirefold does.
declare -A OPEN_LOOP_PEER=([1]=ngx_static [2a]=ngx_static [2b]=ngx_static [2c]=ngx_static
                           [3a]=ngx_cache [3b]=ngx_cachepre [3c]=ngx_cachepre)
for r in $ROWS; do
    [[ -n "${ROW[$r]:-}" ]] || die "unknown row $r"
    [[ $MODE == open-loop && -z "${OPEN_LOOP_PEER[$r]:-}" ]] && die "row $r has no open-loop measure (rows 1, 2*, 3*)"
done

ae_label() { case "$1" in "") echo none ;; "$AE_CHROMIUM") echo chromium ;; *) echo "${1// /}" ;; esac; }
srv_port()   { cut -d'|' -f1 <<<"${SERVER[$1]}"; }
srv_prefix() { cut -d'|' -f2 <<<"${SERVER[$1]}"; }
srv_label()  { cut -d'|' -f3 <<<"${SERVER[$1]}"; }
srv_scheme() { local s; s=$(cut -d'|' -f4 <<<"${SERVER[$1]}"); echo "${s:-http}"; }
srv_url()    { echo "$(srv_scheme "$1")://127.0.0.1:$(srv_port "$1")$(srv_prefix "$1")"; }

curl_ae() { # AE URL [curl args...]: one request with exactly this Accept-Encoding (none if empty)
    local ae=$1 url=$2; shift 2
    [[ $url == https:* ]] && set -- -k --http2 "$@"
    if [[ -z "$ae" ]]; then curl -s "$@" "$url"; else curl -s -H "Accept-Encoding: $ae" "$@" "$url"; fi
}

# ---------------------------------------------------------------- warm up
ALL_AE=("" "gzip, br" "gzip" "$AE_CHROMIUM")
declare -A WARM_SIZE=()
log "warming: each file, each Accept-Encoding, 3 requests; then the background encodes"
for s in "${!SERVER[@]}"; do
    for ae in "${ALL_AE[@]}"; do
        for p in ${TARGET_PATHS[mix]}; do
            for _ in 1 2 3; do
                curl_ae "$ae" "$(srv_url "$s")$p" -o /dev/null
            done
        done
    done
done
# wirefold's first request of an encoding serves the on-the-fly level and encodes the
# cached level in the background: wait until every cached size stops changing.
WF_CACHING="wf_root wf_cache"
[[ $TLS_ROWS == 1 ]] && WF_CACHING+=" wf_root_tls wf_cache_tls"
for _ in $(seq 30); do
    sleep 1
    changed=0
    for s in $WF_CACHING; do
        for ae in "${ALL_AE[@]}"; do
            for p in ${TARGET_PATHS[mix]}; do
                key="$s|$ae|$p"
                n=$(curl_ae "$ae" "$(srv_url "$s")$p" -o /dev/null -w '%{size_download}')
                [[ "${WARM_SIZE[$key]:-}" == "$n" ]] || changed=1
                WARM_SIZE[$key]=$n
            done
        done
    done
    [[ $changed -eq 0 ]] && break
done
[[ $changed -eq 0 ]] || log "warning: wirefold's encoded sizes still changing after 30 s"

# ---------------------------------------------------------------- measure
# describe SERVER AE TARGET -> "mean body bytes|codings|cache-status|correct"
describe() {
    local s=$1 ae=$2 t=$3 p url total=0 n=0 codings="" cstat="" ok=yes hdr body
    for p in ${TARGET_PATHS[$t]}; do
        url="$(srv_url "$s")$p"
        hdr=$(curl_ae "$ae" "$url" -D - -o "$TMP/body" -w '%{size_download}\n')
        body=$(tail -1 <<<"$hdr")
        total=$((total + body)); n=$((n + 1))
        ce=$(awk 'tolower($1)=="content-encoding:"{print $2; exit}' <<<"$hdr" | tr -d '\r')
        codings+="${codings:+/}${ce:-id}"
        cs=$(awk 'tolower($1)=="cache-status:" || tolower($1)=="x-cache-status:" {sub(/^[^:]*: */,""); print; exit}' <<<"$hdr" | tr -d '\r')
        cstat+="${cstat:+ / }${cs:--}"
        # decode what was sent and compare with the file byte for byte
        case "${ce:-id}" in
            id) cp "$TMP/body" "$TMP/decoded" ;;
            gzip) gzip -dc <"$TMP/body" >"$TMP/decoded" || true ;;
            br) brotli -dc <"$TMP/body" >"$TMP/decoded" || true ;;
            zstd) zstd -dcq <"$TMP/body" >"$TMP/decoded" || true ;;
            *) : >"$TMP/decoded" ;;
        esac
        cmp -s "$TMP/decoded" "$FILES${p}" || ok=no
    done
    echo "$((total / n))|$codings|$cstat|$ok"
}

to_ms() { # wrk duration (e.g. 812.00us, 2.10ms, 1.02s, 1.5m) -> ms
    awk -v v="$1" 'BEGIN{ n=v+0; u=v; sub(/^[0-9.]+/,"",u);
        if (u=="us") n/=1000; else if (u=="s") n*=1000; else if (u=="m") n*=60000; printf "%.3f", n }'
}
to_bytes() { # wrk size (e.g. 5.40GB) -> bytes
    awk -v v="$1" 'BEGIN{ n=v+0; u=v; sub(/^[0-9.]+/,"",u);
        m=1; if (u=="KB") m=1024; else if (u=="MB") m=1048576; else if (u=="GB") m=1073741824; else if (u=="TB") m=1099511627776;
        printf "%.0f", n*m }'
}

# CPU time (user + system, all threads) the server under test spent, in clock ticks.
# The origin's share is not counted: it is the same for both sides of a row.
# shellcheck disable=SC2086 # a server's pids are a list
cpu_ticks() { cpu_ticks_of ${SERVER_PIDS[$1]}; }
us_per() { # TICKS REQUESTS -> CPU us per request
    awk -v t="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN{ printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }'
}

# run_wrk SERVER AE TARGET -> "rps p50ms p99ms errors wire_bytes_per_response cpu_us_per_request"
run_wrk() {
    local s=$1 ae=$2 t=$3 out args=()
    [[ -n "$ae" ]] && args=(-H "Accept-Encoding: $ae")
    local c0 c1
    c0=$(cpu_ticks "$s")
    out=$(WRK_PREFIX="$(srv_prefix "$s")" "${LOADER[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency \
          -s "$TMP/$t.lua" "${args[@]}" "http://127.0.0.1:$(srv_port "$s")" 2>&1) || true
    c1=$(cpu_ticks "$s")
    echo "$out" >>"$TMP/wrk-raw.log"
    local rps p50 p99 reqs read errs
    rps=$(awk '/^Requests\/sec:/{print $2}' <<<"$out")
    p50=$(awk '$1=="50%"{print $2}' <<<"$out")
    p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    reqs=$(awk '/requests in/{print $1}' <<<"$out")
    read=$(awk '/requests in/{print $5}' <<<"$out")
    errs=$(awk '/Socket errors/{gsub(",","");s=$4+$6+$8+$10} /Non-2xx/{s+=$5} END{print s+0}' <<<"$out")
    [[ -n "$rps" && -n "$p50" && -n "$p99" && -n "$reqs" ]] || { echo "$out" >&2; die "could not parse wrk output"; }
    echo "$rps $(to_ms "$p50") $(to_ms "$p99") $errs $(( $(to_bytes "$read") / (reqs > 0 ? reqs : 1) )) $(us_per $((c1 - c0)) "$reqs")"
}

# run_h2load SERVER AE TARGET -> the same fields as run_wrk, over TLS + HTTP/2. The
# target's paths are asked in turn on each connection; latency percentiles come from
# h2load's per-request log (microseconds until the end of each response).
run_h2load() {
    local s=$1 ae=$2 t=$3 out args=() uris=() p
    [[ -n "$ae" ]] && args=(-H "accept-encoding: $ae")
    for p in ${TARGET_PATHS[$t]}; do uris+=("$(srv_url "$s")$p"); done
    local c0 c1
    rm -f "$TMP/h2load-requests.log"
    c0=$(cpu_ticks "$s")
    out=$("${LOADER[@]}" h2load -n "$H2_REQUESTS" -c "$CONNS" -m "$H2_STREAMS" "${args[@]}" \
          --log-file="$TMP/h2load-requests.log" "${uris[@]}" 2>&1) || true
    c1=$(cpu_ticks "$s")
    echo "$out" >>"$TMP/h2load-raw.log"
    local rps finished ok2xx wire p50 p99
    rps=$(awk '/^finished in/{print $4}' <<<"$out")
    finished=$(awk '/^requests:/{print $6}' <<<"$out")
    ok2xx=$(awk '/^status codes:/{print $3}' <<<"$out")
    wire=$(awk '/^traffic:/{gsub(/[()]/,"",$3); print $3}' <<<"$out")
    [[ -n "$rps" && -n "$finished" && -n "$ok2xx" && -n "$wire" ]] || { echo "$out" >&2; die "could not parse h2load output"; }
    read -r p50 p99 < <(awk '{print $3}' "$TMP/h2load-requests.log" | sort -n |
        awk '{a[NR]=$1} END{ if (NR==0) {print "0 0"; exit}
             i50=int(NR*0.50+0.999999); i99=int(NR*0.99+0.999999); printf "%.3f %.3f\n", a[i50]/1000, a[i99]/1000 }')
    echo "$rps $p50 $p99 $((H2_REQUESTS - ok2xx)) $((wire / (finished > 0 ? finished : 1))) $(us_per $((c1 - c0)) "$finished")"
}

# run_load SERVER AE TARGET: wrk for HTTP/1.1 servers, h2load for the TLS ones.
run_load() { if [[ $(srv_scheme "$1") == https ]]; then run_h2load "$@"; else run_wrk "$@"; fi; }

# What h2load negotiated with each TLS server: protocol, cipher, key exchange, ALPN.
declare -A TLS_INFO=()
for s in "${!SERVER[@]}"; do
    [[ $(srv_scheme "$s") == https ]] || continue
    TLS_INFO[$s]=$(h2load -n 1 -c 1 "$(srv_url "$s")/page.html" 2>&1 |
        awk -F': ' '/^(TLS Protocol|Cipher|Server Temp Key|Application protocol):/{printf "%s%s", (n++ ? ", " : ""), $2}')
done

jnum() { # KEY JSON: the number under KEY (a regex) in flat JSON
    sed -n "s/.*\"$1\":\([-0-9.e]*\).*/\1/p" <<<"$2"
}

# run_loadgen SERVER AE TARGET RATE -> "achieved p50 p90 p99 p99.9 max errors cpu_us_per_request lag_p99"
# (latencies in ms, from each request's due time; lag: how late the loader itself sent)
run_loadgen() {
    local s=$1 ae=$2 t=$3 rate=$4 out args=() json lat
    [[ -n "$ae" ]] && args=(-H "accept-encoding: $ae")
    local c0 c1
    c0=$(cpu_ticks "$s")
    out=$("${LOADER[@]}" "$LOADGEN" rate --url "$(srv_url "$s")${TARGET_PATHS[$t]}" --rate "$rate" --duration "$DURATION" \
          --connections "$CONNS" --threads "$LOADGEN_THREADS" "${args[@]}" 2>&1) || true
    c1=$(cpu_ticks "$s")
    echo "$out" >>"$TMP/loadgen-raw.log"
    json=$(tail -1 <<<"$out")
    [[ $json == '{"'* ]] || { echo "$out" >&2; die "wirefold-loadgen failed"; }
    lat=$(sed -n 's/.*"latency_ms":{\([^}]*\)}.*/{\1}/p' <<<"$json")
    local answered errs lag
    answered=$(jnum answered "$json")
    lag=$(sed -n 's/.*"dispatch_lag_ms":{\([^}]*\)}.*/{\1}/p' <<<"$json")
    errs=$(( $(jnum failed "$json") + $(jnum non_2xx "$json") + $(jnum unfinished "$json") ))
    echo "$(jnum achieved_rps "$json") $(jnum p50 "$lat") $(jnum p90 "$lat") $(jnum p99 "$lat") $(jnum 'p99\.9' "$lat") $(jnum max "$lat") $errs $(us_per $((c1 - c0)) "$answered") $(jnum p99 "$lag")"
}

wall_seconds() { echo $(( $(date +%s) - START_TS )); }
load_now() { cut -d' ' -f1-3 /proc/loadavg; }

if [[ $MODE == open-loop ]]; then
    # ------------------------------------------------------------ open loop: measure
    OPEN=()   # "row|target|server|ae|saturation|rate|achieved|p50|p90|p99|p999|max|errors|cpu|ok|lag"
    for r in $ROWS; do
        IFS='|' read -r ae _ wf _ <<<"${ROW[$r]}"
        ngx=${OPEN_LOOP_PEER[$r]}
        for t in $TARGETS; do
            sat=""
            for _ in $(seq "$REPEATS"); do
                read -r rps _ <<<"$(run_wrk "$ngx" "$ae" "$t")"
                sat+=" $rps"
            done
            saturation=$(median <<<"$sat")
            rate=$(awk -v s="$saturation" -v f="$LOAD_SHARE" 'BEGIN{ printf "%.0f", s * f }')
            log "row $r $t: nginx ($ngx) saturates at $saturation req/s (wrk:$sat); open loop at $rate req/s"
            declare -A ACH=() P50=() P90=() P99=() P999=() MAX=() ERR=() CPU=() LAG=()
            for _ in $(seq "$REPEATS"); do
                for s in "$wf" "$ngx"; do
                    read -r ach p50 p90 p99 p999 max errs cpu lag <<<"$(run_loadgen "$s" "$ae" "$t" "$rate")"
                    ACH[$s]+=" $ach"; P50[$s]+=" $p50"; P90[$s]+=" $p90"; P99[$s]+=" $p99"; P999[$s]+=" $p999"
                    MAX[$s]+=" $max"; ERR[$s]=$(( ${ERR[$s]:-0} + errs )); CPU[$s]+=" $cpu"; LAG[$s]+=" $lag"
                done
            done
            for s in "$wf" "$ngx"; do
                IFS='|' read -r _ _ _ ok <<<"$(describe "$s" "$ae" "$t")"
                OPEN+=("$r|$t|$s|$ae|$saturation|$rate|$(median <<<"${ACH[$s]}")|$(median <<<"${P50[$s]}")|$(median <<<"${P90[$s]}")|$(median <<<"${P99[$s]}")|$(median <<<"${P999[$s]}")|$(median <<<"${MAX[$s]}")|${ERR[$s]}|$(median <<<"${CPU[$s]}")|$ok|$(median <<<"${LAG[$s]}")")
                log "row $r $t $s: p50 ${P50[$s]# } | p99 ${P99[$s]# } | achieved ${ACH[$s]# } | cpu us/req ${CPU[$s]# } | loader lag p99 ${LAG[$s]# } | $ok"
            done
            unset ACH P50 P90 P99 P999 MAX ERR CPU LAG
        done
    done

    # ------------------------------------------------------------ open loop: report
    echo
    echo "wirefold vs nginx, open loop — $LOAD_SHARE x nginx's saturation (wrk -t$THREADS -c$CONNS -d${DURATION}s, median of $REPEATS),"
    echo "wirefold-loadgen $CONNS connections, $LOADGEN_THREADS I/O thread(s), ${DURATION} s per run, median of $REPEATS runs, interleaved; loopback, $(nproc) cores"
    echo "latency from each request's due time (coordinated omission corrected), ms"
    echo
    printf '%-4s %-5s %-8s %-58s %8s %8s %8s %8s %8s %8s %8s %8s %5s %4s %8s\n' \
        row tgt AE server "rate" achieved p50 p90 p99 p99.9 max "cpu us" errs ok "lag p99"
    for rec in "${OPEN[@]}"; do
        IFS='|' read -r r t s ae _ rate ach p50 p90 p99 p999 max errs cpu ok lag <<<"$rec"
        printf '%-4s %-5s %-8s %-58s %8s %8.0f %8.3f %8.3f %8.3f %8.3f %8.3f %8.1f %5s %4s %8.3f\n' \
            "$r" "$t" "$(ae_label "$ae")" "$(srv_label "$s" | cut -c1-58)" "$rate" "$ach" "$p50" "$p90" "$p99" "$p999" "$max" "$cpu" "$errs" "$ok" "$lag"
    done
    echo "lag p99 = how late the loader itself handed requests to their connections (its own CPU share; included in the latencies)"
    echo
    echo "ratios wirefold/nginx at the same rate (<= 1 is wirefold ahead)"
    printf '%-4s %-5s %-8s %8s %7s %7s %7s  %s\n' row tgt AE rate p50 p99 cpu/req verdict
    OPEN_RATIOS=()
    for r in $ROWS; do
        IFS='|' read -r ae _ wf _ <<<"${ROW[$r]}"
        ngx=${OPEN_LOOP_PEER[$r]}
        for t in $TARGETS; do
            for rec in "${OPEN[@]}"; do
                [[ "$rec" == "$r|$t|$wf|"* ]] && IFS='|' read -r _ _ _ _ _ rate wach wp50 _ wp99 _ _ werrs wcpu wok _ <<<"$rec"
                [[ "$rec" == "$r|$t|$ngx|"* ]] && IFS='|' read -r _ _ _ _ _ _ _ np50 _ np99 _ _ _ ncpu _ _ <<<"$rec"
            done
            read -r r50 r99 rc < <(awk -v a="$wp50" -v b="$np50" -v c="$wp99" -v d="$np99" -v e="$wcpu" -v f="$ncpu" \
                'function q(x,y){ return y>0 ? x/y : 0 } BEGIN{ printf "%.3f %.3f %.3f\n", q(a,b), q(c,d), q(e,f) }')
            verdict=$(awk -v r99="$r99" -v ok="$wok" -v er="$werrs" -v ach="$wach" -v rate="$rate" 'BEGIN{
                v=""; if (ok!="yes") v=v" WRONG-BODY"; if (er>0) v=v" ERRORS";
                if (ach < 0.95*rate) v=v" fell-behind"; if (r99>1) v=v" p99-worse";
                print (v=="" ? "meets target" : "behind:" v) }')
            printf '%-4s %-5s %-8s %8s %7.2f %7.2f %7.2f  %s\n' "$r" "$t" "$(ae_label "$ae")" "$rate" "$r50" "$r99" "$rc" "$verdict"
            OPEN_RATIOS+=("$r|$t|$ngx|$r50|$r99|$rc|$verdict")
        done
    done
    echo "wall time: $(wall_seconds) s; load average at start $LOAD_START, at end $(load_now) (anything else running skews both sides)"
    {
        printf '{"bench":"compare-nginx","mode":"open-loop","loadgen_sched":"%s","wirefold":%s,"nginx":%s,' "${LOADGEN_SCHED:-default}" "$(jstr "$("$WIREFOLD" --version)")" "$(jstr "$(nginx -v 2>&1)")"
        printf '"load_share":%s,"loadgen_threads":%s,"connections":%s,"duration_s":%s,"repeats":%s,"wall_s":%s,"loadavg_start":%s,"loadavg_end":%s,"rows":[' \
            "$LOAD_SHARE" "$LOADGEN_THREADS" "$CONNS" "$DURATION" "$REPEATS" "$(wall_seconds)" "$(jstr "$LOAD_START")" "$(jstr "$(load_now)")"
        first=1
        for rec in "${OPEN[@]}"; do
            IFS='|' read -r r t s ae sat rate ach p50 p90 p99 p999 max errs cpu ok lag <<<"$rec"
            [[ $first == 1 ]] || printf ','; first=0
            printf '{"row":%s,"target":%s,"server":%s,"label":%s,"accept_encoding":%s,"nginx_saturation_rps":%s,"rate":%s,"achieved_rps":%s,"latency_ms":{"p50":%s,"p90":%s,"p99":%s,"p99.9":%s,"max":%s},"errors":%s,"cpu_us_per_req":%s,"body_correct":%s,"loader_lag_p99_ms":%s}' \
                "$(jstr "$r")" "$(jstr "$t")" "$(jstr "$s")" "$(jstr "$(srv_label "$s")")" "$(jstr "$ae")" "$sat" "$rate" "$ach" \
                "$p50" "$p90" "$p99" "$p999" "$max" "$errs" "$cpu" "$([[ $ok == yes ]] && echo true || echo false)" "$lag"
        done
        printf '],"ratios":['
        first=1
        for rec in "${OPEN_RATIOS[@]}"; do
            IFS='|' read -r r t n r50 r99 rc verdict <<<"$rec"
            [[ $first == 1 ]] || printf ','; first=0
            printf '{"row":%s,"target":%s,"nginx":%s,"p50":%s,"p99":%s,"cpu_per_req":%s,"verdict":%s}' \
                "$(jstr "$r")" "$(jstr "$t")" "$(jstr "$n")" "$r50" "$r99" "$rc" "$(jstr "$verdict")"
        done
        printf ']}\n'
    }
    exit 0
fi

# ---------------------------------------------------------------- closed loop: measure
# Results: one record per (row, target, server).
RESULTS=()     # "row|target|server|ae|bytes|wire|codings|cache|ok|rps|p50|p99|errors|cpu"
for r in $ROWS; do
    IFS='|' read -r ae _ wf ngxs <<<"${ROW[$r]}"
    for t in $TARGETS; do
        read -r -a servers <<<"$wf $ngxs"
        declare -A RPS=() P50=() P99=() ERR=() WIRE=() CPU=()
        for _ in $(seq "$REPEATS"); do
            for s in "${servers[@]}"; do
                read -r rps p50 p99 errs wire cpu <<<"$(run_load "$s" "$ae" "$t")"
                CPU[$s]+=" $cpu"; RPS[$s]+=" $rps"; P50[$s]+=" $p50"; P99[$s]+=" $p99"; ERR[$s]=$(( ${ERR[$s]:-0} + errs )); WIRE[$s]+=" $wire"
            done
        done
        for s in "${servers[@]}"; do
            IFS='|' read -r bytes codings cstat ok <<<"$(describe "$s" "$ae" "$t")"
            rec="$r|$t|$s|$ae|$bytes|$(median <<<"${WIRE[$s]}")|$codings|$cstat|$ok|$(median <<<"${RPS[$s]}")|$(median <<<"${P50[$s]}")|$(median <<<"${P99[$s]}")|${ERR[$s]}|$(median <<<"${CPU[$s]}")"
            RESULTS+=("$rec")
            log "row $r $t $s: rps ${RPS[$s]# } | p99 ${P99[$s]# } | cpu us/req ${CPU[$s]# } | $bytes B $codings $ok"
        done
        unset RPS P50 P99 ERR WIRE CPU
    done
done
ORIGIN_REQS=$(wc -l <"$TMP/origin-access.log" 2>/dev/null || echo 0)

# ---------------------------------------------------------------- closed loop: report
echo
echo "wirefold vs nginx — wrk -t$THREADS -c$CONNS -d${DURATION}s (rows 5*: h2load -n $H2_REQUESTS -c $CONNS -m $H2_STREAMS, TLS + HTTP/2), median of $REPEATS, loopback, $(nproc) cores"
echo "files: page.html $(stat -c %s "$FILES/page.html") B (${HTML_SRC#"$CORPUS"/}), style.css $(stat -c %s "$FILES/style.css") B (${CSS_SRC#"$CORPUS"/}),"
echo "       script.js $(stat -c %s "$FILES/script.js") B (${JS_SRC#"$CORPUS"/}), photo.jpg $(stat -c %s "$FILES/photo.jpg") B ($JPEG_SRC)"
echo "targets: html = /page.html; mix = page.html, style.css, script.js, photo.jpg round robin (bytes = mean body)"
echo "AE: none = no Accept-Encoding; gzip,br; gzip; chromium = \"$AE_CHROMIUM\" (nginx has no zstd in Debian, so it answers br)"
echo "wirefold files.check_interval_ms: ${FILE_CHECK_MS:-default (0)}"
echo "levels: wirefold cached \"$WF_CACHED\", on the fly \"$WF_ON_THE_FLY\"; nginx on the fly gzip $NGX_GZIP_LEVEL, br $NGX_BR_LEVEL; precompressed gzip -9, brotli -q 11"
for s in "${!TLS_INFO[@]}"; do echo "TLS negotiated by $s: ${TLS_INFO[$s]}"; done
echo
printf '%-4s %-5s %-8s %-58s %9s %9s %-18s %9s %8s %8s %8s %5s %4s\n' \
    row tgt AE server "body B" "wire B" coding "req/s" "p50 ms" "p99 ms" "cpu us" errs ok
for rec in "${RESULTS[@]}"; do
    IFS='|' read -r r t s ae bytes wire codings cstat ok rps p50 p99 errs cpu <<<"$rec"
    printf '%-4s %-5s %-8s %-58s %9s %9s %-18s %9.0f %8.2f %8.2f %8.1f %5s %4s\n' \
        "$r" "$t" "$(ae_label "$ae")" "$(srv_label "$s" | cut -c1-58)" "$bytes" "$wire" "$codings" "$rps" "$p50" "$p99" "$cpu" "$errs" "$ok"
done
echo
echo "cpu us = CPU time (user+system, all threads/workers) the server under test spent per request; the origin's is not counted"
echo
echo "ratios wirefold/nginx (req/s: >= 1 is wirefold ahead; p50, p99, bytes, cpu/req: <= 1 is wirefold ahead)"
printf '%-4s %-5s %-8s %-58s %7s %7s %7s %7s %7s  %s\n' row tgt AE "nginx peer" "req/s" p50 p99 bytes "cpu/req" verdict
RATIOS=()
for r in $ROWS; do
    IFS='|' read -r ae _ wf ngxs <<<"${ROW[$r]}"
    for t in $TARGETS; do
        wrec=""; for rec in "${RESULTS[@]}"; do [[ "$rec" == "$r|$t|$wf|"* ]] && wrec=$rec; done
        IFS='|' read -r _ _ _ _ wbytes _ _ _ wok wrps wp50 wp99 werrs wcpu <<<"$wrec"
        for n in $ngxs; do
            nrec=""; for rec in "${RESULTS[@]}"; do [[ "$rec" == "$r|$t|$n|"* ]] && nrec=$rec; done
            IFS='|' read -r _ _ _ _ nbytes _ _ _ _ nrps np50 np99 _ ncpu <<<"$nrec"
            line=$(awk -v a="$wrps" -v b="$nrps" -v c="$wp50" -v d="$np50" -v e="$wp99" -v f="$np99" -v g="$wbytes" -v h="$nbytes" -v i="$wcpu" -v j="$ncpu" \
                'function q(x,y){ return y>0 ? x/y : 0 } BEGIN{ printf "%.3f %.3f %.3f %.3f %.3f", q(a,b), q(c,d), q(e,f), q(g,h), q(i,j) }')
            read -r rr r50 r99 rb rc <<<"$line"
            verdict=$(awk -v rr="$rr" -v r99="$r99" -v rb="$rb" -v ok="$wok" -v er="$werrs" 'BEGIN{
                v=""; if (ok!="yes") v=v" WRONG-BODY"; if (er>0) v=v" ERRORS";
                if (rr<1) v=v" slower"; if (r99>1) v=v" p99-worse"; if (rb>1) v=v" bigger";
                print (v=="" ? "meets target" : "behind:" v) }')
            printf '%-4s %-5s %-8s %-58s %7.2f %7.2f %7.2f %7.2f %7.2f  %s\n' "$r" "$t" "$(ae_label "$ae")" "$(srv_label "$n" | cut -c1-58)" "$rr" "$r50" "$r99" "$rb" "$rc" "$verdict"
            RATIOS+=("$r|$t|$n|$rr|$r50|$r99|$rb|$rc|$verdict")
        done
    done
done
echo
echo "proxy cache status after the runs (Cache-Status / X-Cache-Status, one per file of the target):"
for rec in "${RESULTS[@]}"; do
    IFS='|' read -r r t s ae _ _ _ cstat _ <<<"$rec"
    [[ "$t" == "${TARGETS##* }" && "$r" == [345]* && "$s" != *root* && "$s" != *static* ]] && printf '  %-4s %-8s %-16s %s\n' "$r" "$(ae_label "$ae")" "$s" "$cstat"
done
echo "origin requests during the whole run (warm-up included): $ORIGIN_REQS"
echo "wall time: $(wall_seconds) s; load average at start $LOAD_START, at end $(load_now) (anything else running skews both sides)"

# ---------------------------------------------------------------- JSON
{
    printf '{"bench":"compare-nginx","mode":"closed","loadgen_sched":"%s","wirefold":%s,"nginx":%s,' "${LOADGEN_SCHED:-default}" "$(jstr "$("$WIREFOLD" --version)")" "$(jstr "$(nginx -v 2>&1)")"
    printf '"wrk":{"threads":%s,"connections":%s,"duration_s":%s,"repeats":%s},"h2load":{"requests":%s,"clients":%s,"streams":%s},"wall_s":%s,"loadavg_start":%s,"loadavg_end":%s,' \
        "$THREADS" "$CONNS" "$DURATION" "$REPEATS" "$H2_REQUESTS" "$CONNS" "$H2_STREAMS" "$(wall_seconds)" "$(jstr "$LOAD_START")" "$(jstr "$(load_now)")"
    printf '"levels":{"wirefold_cached":%s,"wirefold_on_the_fly":%s,"nginx_gzip":%s,"nginx_br":%s,"precompressed":"gzip -9, brotli -q 11"},' \
        "$(jstr "$WF_CACHED")" "$(jstr "$WF_ON_THE_FLY")" "$NGX_GZIP_LEVEL" "$NGX_BR_LEVEL"
    printf '"tls":{'
    first=1
    for s in "${!TLS_INFO[@]}"; do
        [[ $first == 1 ]] || printf ','; first=0
        printf '%s:%s' "$(jstr "$s")" "$(jstr "${TLS_INFO[$s]}")"
    done
    printf '},"files":{'
    first=1
    for f in page.html style.css script.js photo.jpg; do
        [[ $first == 1 ]] || printf ','; first=0
        printf '%s:{"bytes":%s,"source":%s}' "$(jstr "$f")" "$(stat -c %s "$FILES/$f")" "$(jstr "${SRC[$f]}")"
    done
    printf '},"rows":['
    first=1
    for rec in "${RESULTS[@]}"; do
        IFS='|' read -r r t s ae bytes wire codings cstat ok rps p50 p99 errs cpu <<<"$rec"
        [[ $first == 1 ]] || printf ','; first=0
        printf '{"row":%s,"target":%s,"server":%s,"label":%s,"accept_encoding":%s,"body_bytes":%s,"wire_bytes":%s,"codings":%s,"cache_status":%s,"body_correct":%s,"rps":%s,"p50_ms":%s,"p99_ms":%s,"errors":%s,"cpu_us_per_req":%s}' \
            "$(jstr "$r")" "$(jstr "$t")" "$(jstr "$s")" "$(jstr "$(srv_label "$s")")" "$(jstr "$ae")" "$bytes" "$wire" \
            "$(jstr "$codings")" "$(jstr "$cstat")" "$([[ $ok == yes ]] && echo true || echo false)" "$rps" "$p50" "$p99" "$errs" "$cpu"
    done
    printf '],"ratios":['
    first=1
    for rec in "${RATIOS[@]}"; do
        IFS='|' read -r r t n rr r50 r99 rb rc verdict <<<"$rec"
        [[ $first == 1 ]] || printf ','; first=0
        printf '{"row":%s,"target":%s,"nginx":%s,"rps":%s,"p50":%s,"p99":%s,"bytes":%s,"cpu_per_req":%s,"verdict":%s}' \
            "$(jstr "$r")" "$(jstr "$t")" "$(jstr "$n")" "$rr" "$r50" "$r99" "$rb" "$rc" "$(jstr "$verdict")"
    done
    printf ']}\n'
}
