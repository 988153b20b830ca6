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
#   THREADS=2        wrk threads                  CONNS=32     wrk connections
#   TARGETS="html mix"  html = the ~100 KB page; mix = page, CSS, JS, JPEG round robin
#   ROWS="1 2a 2b 3a 3b 3c 4a 4b 4c"   which rows to run
#   KEEP_TMP=1       keep the temp dir (configs, logs) for inspection
#
# Rows (AE = the Accept-Encoding every request of the row carries, for every server):
#   1   static files, identity                      AE: none
#   2a  static files, compressed                    AE: "gzip, br"
#   2b  static files, compressed                    AE: "gzip, deflate, br, zstd" (Chromium)
#   3a  proxy, cacheable (max-age=3600), identity   AE: none
#   3b  proxy, cacheable, compressed                AE: "gzip, br"
#   3c  proxy, cacheable, compressed                AE: Chromium's
#   4a  proxy, uncacheable (no-store), compressed   AE: "gzip, br"  -> br level 4 on both
#   4b  proxy, uncacheable, compressed              AE: "gzip"      -> gzip level 6 on both
#   4c  proxy, uncacheable, compressed              AE: Chromium's  -> wirefold zstd:3, nginx br 4
#
# Both servers get 2 cores' worth of workers (nginx worker_processes 2 with reuseport so
# both workers get connections; wirefold's tokio runtime uses one worker per core). wrk,
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
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -gt 0 ]] && { echo "compare-nginx.sh takes no arguments (see -h); got: $*" >&2; exit 2; }

START_TS=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CORPUS=${CORPUS:-$REPO/../shared/corpus}
DURATION=${DURATION:-4}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-2}
CONNS=${CONNS:-32}
TARGETS=${TARGETS:-html mix}
ROWS=${ROWS:-1 2a 2b 3a 3b 3c 4a 4b 4c}
AE_CHROMIUM="gzip, deflate, br, zstd"

# Compression levels, stated once and used by both sides.
WF_CACHED="br:11, zstd:19, gzip:9"      # wirefold: reusable bodies (files, cached responses)
WF_ON_THE_FLY="zstd:3, br:4, gzip:6"    # wirefold: bodies compressed on every request
NGX_GZIP_LEVEL=6                         # nginx on the fly: gzip_comp_level
NGX_BR_LEVEL=4                           # nginx on the fly: brotli_comp_level
PRE_GZIP="gzip -9 -k -n"                 # nginx precompressed .gz
PRE_BR="brotli -q 11 -k"                 # nginx precompressed .br
MIN_SIZE=512

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

# ---------------------------------------------------------------- install what's missing
need_pkgs=()
command -v nginx >/dev/null || need_pkgs+=(nginx)
[[ -e /usr/lib/nginx/modules/ngx_http_brotli_filter_module.so ]] || need_pkgs+=(libnginx-mod-http-brotli-filter)
[[ -e /usr/lib/nginx/modules/ngx_http_brotli_static_module.so ]] || need_pkgs+=(libnginx-mod-http-brotli-static)
command -v wrk >/dev/null || need_pkgs+=(wrk)
command -v brotli >/dev/null || need_pkgs+=(brotli)
command -v curl >/dev/null || need_pkgs+=(curl)
command -v gzip >/dev/null || need_pkgs+=(gzip)
command -v zstd >/dev/null || need_pkgs+=(zstd)
APT_UPDATED=0
apt_install() {
    [[ $(id -u) -eq 0 ]] || die "missing packages ($*) and not root: install them with apt-get"
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}
if [[ ${#need_pkgs[@]} -gt 0 ]]; then apt_install "${need_pkgs[@]}"; fi

# ---------------------------------------------------------------- wirefold binary
if [[ -n "${WIREFOLD:-}" ]]; then
    [[ -x "$WIREFOLD" ]] || die "WIREFOLD=$WIREFOLD is not an executable"
    WIREFOLD=$(cd "$(dirname "$WIREFOLD")" && pwd)/$(basename "$WIREFOLD")
else
    command -v cargo >/dev/null || die "cargo not found: install Rust or set WIREFOLD=path/to/wirefold"
    log "cargo build --release -p wirefold"
    (cd "$REPO" && cargo build --release -q -p wirefold) >&2 || die "release build failed"
    WIREFOLD="$REPO/target/release/wirefold"
fi

# ---------------------------------------------------------------- temp dir, processes
bench_temp compare-nginx

# ---------------------------------------------------------------- the files
[[ -d "$CORPUS/html" && -d "$CORPUS/assets" ]] || die "corpus not found at $CORPUS (set CORPUS=DIR)"
HTML_SRC=$(find "$CORPUS/html" -type f -name '*.html' -printf '%s %p\n' \
    | awk '{d=$1-100000; if (d<0) d=-d; print d, $2}' | sort -k1,1n -k2 | awk 'NR==1{print $2}')
CSS_SRC=$(find "$CORPUS"/assets/whatwg__whatwg.org/resources-whatwg-org_standard-css/ -type f -name '*.css' | sort | awk 'END{print}')
JS_SRC=$(find "$CORPUS"/assets/w3c__aria/common_script_aria-js/ -type f -name '*.js' | sort | awk 'END{print}')
[[ -f "$HTML_SRC" && -f "$CSS_SRC" && -f "$JS_SRC" ]] || die "could not pick HTML/CSS/JS from $CORPUS"

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
for f in page.html style.css script.js; do
    (cd "$PRE" && $PRE_GZIP "$f" && $PRE_BR "$f")
done
chmod -R a+rX "$TMP"
declare -A SRC=([page.html]=$HTML_SRC [style.css]=$CSS_SRC [script.js]=$JS_SRC [photo.jpg]=$JPEG_SRC)
log "files: $(for f in page.html style.css script.js photo.jpg; do printf '%s=%s B ' "$f" "$(stat -c %s "$FILES/$f")"; done)"

declare -A TARGET_PATHS=([html]="/page.html" [mix]="/page.html /style.css /script.js /photo.jpg")
for t in $TARGETS; do
    [[ -n "${TARGET_PATHS[$t]:-}" ]] || die "unknown target $t (html, mix)"
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

# ---------------------------------------------------------------- ports
P_ORIGIN=$(free_port); P_NGX_STATIC=$(free_port); P_NGX_OTF=$(free_port); P_NGX_PROXY=$(free_port)
P_WF_ROOT=$(free_port); P_WF_ROOT_ADMIN=$(free_port); P_WF_PROXY=$(free_port); P_WF_PROXY_ADMIN=$(free_port)

# ---------------------------------------------------------------- nginx configs
NGX_USER=""
[[ $(id -u) -eq 0 ]] && NGX_USER="user root;"
MIME=/etc/nginx/mime.types
[[ -f $MIME ]] || die "$MIME missing (package nginx-common)"
COMP_TYPES="text/plain text/css application/javascript application/json image/svg+xml"

nginx_main() { # NAME WORKERS MODULES
    cat <<EOF
$NGX_USER
worker_processes $2;
pid $TMP/$1.pid;
error_log $TMP/$1-error.log warn;
$3
events { worker_connections 4096; }
EOF
}
BROTLI_MODULES="load_module /usr/lib/nginx/modules/ngx_http_brotli_filter_module.so;
load_module /usr/lib/nginx/modules/ngx_http_brotli_static_module.so;"

# The origin: the same files, cacheable under /cache/, uncacheable under /nostore/, and
# precompressed (gzip_static/brotli_static, Vary) under /cachepre/. It never compresses
# on the fly. Its access log counts what reaches it.
{
    nginx_main origin 2 "$BROTLI_MODULES"
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

# The peer: four servers in one nginx with 2 workers. Access logging off (its best case).
# tcp_nopush stays off: with Debian's default `tcp_nopush on`, proxy_cache hits (sent with
# sendfile after the header) stall on the 40 ms delayed ACK over loopback (~1.1k req/s
# instead of ~20k for the 100 KB page); static files are unaffected either way.
{
    nginx_main peer 2 "$BROTLI_MODULES"
    cat <<EOF
http {
    include $MIME;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush off;
    keepalive_requests 1000000;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    proxy_cache_path $TMP/ngx-cache levels=1:2 keys_zone=wfbench:10m max_size=1g inactive=1h use_temp_path=off;
    upstream origin { server 127.0.0.1:$P_ORIGIN; keepalive 64; }

    # static, precompressed: page.html.gz (gzip -9) and page.html.br (brotli -q 11)
    server {
        listen 127.0.0.1:$P_NGX_STATIC reuseport;
        root $PRE;
        gzip_static on;
        brotli_static on;
        gzip_vary on;
    }

    # static, compressed on the fly
    server {
        listen 127.0.0.1:$P_NGX_OTF reuseport;
        root $FILES;
        gzip on; gzip_comp_level $NGX_GZIP_LEVEL; gzip_min_length $MIN_SIZE; gzip_vary on;
        gzip_types $COMP_TYPES;
        brotli on; brotli_comp_level $NGX_BR_LEVEL; brotli_min_length $MIN_SIZE;
        brotli_types $COMP_TYPES;
    }

    # reverse proxy with proxy_cache, compressing on the fly
    server {
        listen 127.0.0.1:$P_NGX_PROXY reuseport;
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
}
EOF
} > "$TMP/peer.conf"

# ---------------------------------------------------------------- wirefold config
cat > "$TMP/wirefold.toml" <<EOF
[compression]
enabled = true
min_size = $MIN_SIZE

[[compression.profile]]
types = ["text/*", "application/javascript", "application/json", "image/svg+xml"]
cached = "$WF_CACHED"
on_the_fly = "$WF_ON_THE_FLY"
EOF

# ---------------------------------------------------------------- start
start_nginx() { # NAME
    nginx -t -q -p "$TMP" -e "$TMP/$1-error.log" -c "$TMP/$1.conf" -g 'daemon off;' 2>"$TMP/$1-test.log" \
        || { cat "$TMP/$1-test.log" >&2; die "nginx config $1 invalid"; }
    nginx -p "$TMP" -e "$TMP/$1-error.log" -c "$TMP/$1.conf" -g 'daemon off;' >"$TMP/$1.out" 2>&1 &
    PIDS+=($!)
    LAST_PID=$!
}
start_wirefold() { # NAME PORT ADMIN MODE-ARGS...
    local name=$1 port=$2 admin=$3; shift 3
    WIREFOLD_LOG=warn "$WIREFOLD" serve "$@" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" \
        --data-dir "$TMP/$name-data" --config "$TMP/wirefold.toml" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    LAST_PID=$!
}

start_nginx origin;   wait_http origin "$LAST_PID" "http://127.0.0.1:$P_ORIGIN/cache/page.html"
start_nginx peer;     wait_http nginx "$LAST_PID" "http://127.0.0.1:$P_NGX_STATIC/page.html"
PEER_PID=$LAST_PID
start_wirefold wf-root "$P_WF_ROOT" "$P_WF_ROOT_ADMIN" --root "$FILES"
wait_http "wirefold --root" "$LAST_PID" "http://127.0.0.1:$P_WF_ROOT/page.html"
WF_ROOT_PID=$LAST_PID
start_wirefold wf-proxy "$P_WF_PROXY" "$P_WF_PROXY_ADMIN" --origin "http://127.0.0.1:$P_ORIGIN"
wait_http "wirefold --origin" "$LAST_PID" "http://127.0.0.1:$P_WF_PROXY/nostore/page.html"
WF_PROXY_PID=$LAST_PID
# nginx's worker (and cache helper) processes: children of the peer's master.
children_of() {
    local f line rest fields
    for f in /proc/[0-9]*/stat; do
        { read -r line <"$f"; } 2>/dev/null || continue
        rest=${line##*) }
        read -r -a fields <<<"$rest"
        [[ "${fields[1]}" == "$1" ]] && { f=${f#/proc/}; echo "${f%/stat}"; }
    done
    return 0
}
PEER_PIDS="$PEER_PID $(children_of "$PEER_PID" | tr '\n' ' ')"
CLK_TCK=$(getconf CLK_TCK)
log "nginx $(nginx -v 2>&1 | sed 's/.*\///'), wirefold $("$WIREFOLD" --version | awk '{print $2}'), wrk -t$THREADS -c$CONNS -d${DURATION}s x$REPEATS"

# ---------------------------------------------------------------- servers and rows
# server id -> "port|path prefix|label"
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
# row id -> "AE|scenario|wirefold server|nginx servers"
declare -A ROW=(
    [1]="|static files, identity|wf_root|ngx_static"
    [2a]="gzip, br|static files, compressed|wf_root|ngx_static ngx_otf"
    [2b]="$AE_CHROMIUM|static files, compressed|wf_root|ngx_static ngx_otf"
    [3a]="|proxy, cacheable, identity|wf_cache|ngx_cache"
    [3b]="gzip, br|proxy, cacheable, compressed|wf_cache|ngx_cache ngx_cachepre"
    [3c]="$AE_CHROMIUM|proxy, cacheable, compressed|wf_cache|ngx_cache ngx_cachepre"
    [4a]="gzip, br|proxy, no-store, on the fly (br 4 both)|wf_nostore|ngx_nostore"
    [4b]="gzip|proxy, no-store, on the fly (gzip 6 both)|wf_nostore|ngx_nostore"
    [4c]="$AE_CHROMIUM|proxy, no-store, on the fly (wf zstd 3, nginx br 4)|wf_nostore|ngx_nostore"
)
for r in $ROWS; do [[ -n "${ROW[$r]:-}" ]] || die "unknown row $r"; done

ae_label() { case "$1" in "") echo none ;; "$AE_CHROMIUM") echo chromium ;; *) echo "${1// /}" ;; esac; }
srv_port()   { cut -d'|' -f1 <<<"${SERVER[$1]}"; }
srv_prefix() { cut -d'|' -f2 <<<"${SERVER[$1]}"; }
srv_label()  { cut -d'|' -f3 <<<"${SERVER[$1]}"; }

curl_ae() { # AE URL [curl args...]: one request with exactly this Accept-Encoding (none if empty)
    local ae=$1 url=$2; shift 2
    if [[ -z "$ae" ]]; then curl -s "$@" "$url"; else curl -s -H "Accept-Encoding: $ae" "$@" "$url"; fi
}

# ---------------------------------------------------------------- warm up
ALL_AE=("" "gzip, br" "gzip" "$AE_CHROMIUM")
declare -A WARM_SIZE=()
log "warming: each file, each Accept-Encoding, 3 requests; then the background encodes"
for s in wf_root wf_cache ngx_cache ngx_cachepre wf_nostore ngx_nostore ngx_static ngx_otf; do
    for ae in "${ALL_AE[@]}"; do
        for p in ${TARGET_PATHS[mix]}; do
            for _ in 1 2 3; do
                curl_ae "$ae" "http://127.0.0.1:$(srv_port $s)$(srv_prefix $s)$p" -o /dev/null
            done
        done
    done
done
# wirefold's first request of an encoding serves the on-the-fly level and encodes the
# cached level in the background: wait until every cached size stops changing.
for _ in $(seq 30); do
    sleep 1
    changed=0
    for s in wf_root wf_cache; do
        for ae in "${ALL_AE[@]}"; do
            for p in ${TARGET_PATHS[mix]}; do
                url="http://127.0.0.1:$(srv_port $s)$(srv_prefix $s)$p"
                key="$s|$ae|$p"
                n=$(curl_ae "$ae" "$url" -o /dev/null -w '%{size_download}')
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
        url="http://127.0.0.1:$(srv_port $s)$(srv_prefix $s)$p"
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
server_pids() { case "$1" in wf_root) echo "$WF_ROOT_PID" ;; wf_*) echo "$WF_PROXY_PID" ;; *) echo "$PEER_PIDS" ;; esac; }
cpu_ticks() {
    local t=0 pid
    for pid in $(server_pids "$1"); do
        [[ -r /proc/$pid/stat ]] && t=$((t + $(awk '{sub(/^.*\) /,""); print $12 + $13}' "/proc/$pid/stat")))
    done
    echo "$t"
}

# run_wrk SERVER AE TARGET -> "rps p50ms p99ms errors wire_bytes_per_response cpu_us_per_request"
run_wrk() {
    local s=$1 ae=$2 t=$3 out args=()
    [[ -n "$ae" ]] && args=(-H "Accept-Encoding: $ae")
    local c0 c1
    c0=$(cpu_ticks "$s")
    out=$(WRK_PREFIX="$(srv_prefix "$s")" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency \
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
    echo "$rps $(to_ms "$p50") $(to_ms "$p99") $errs $(( $(to_bytes "$read") / (reqs > 0 ? reqs : 1) ))" \
         "$(awk -v t=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN{ printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
}

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }

# Results: one record per (row, target, server).
RESULTS=()     # "row|target|server|ae|bytes|wire|codings|cache|ok|rps|p50|p99|errors"
for r in $ROWS; do
    IFS='|' read -r ae scenario wf ngxs <<<"${ROW[$r]}"
    for t in $TARGETS; do
        servers=("$wf" $ngxs)
        declare -A RPS=() P50=() P99=() ERR=() WIRE=() CPU=()
        for rep in $(seq "$REPEATS"); do
            for s in "${servers[@]}"; do
                read -r rps p50 p99 errs wire cpu <<<"$(run_wrk "$s" "$ae" "$t")"
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

# ---------------------------------------------------------------- report
WALL=$(( $(date +%s) - START_TS ))
echo
echo "wirefold vs nginx — wrk -t$THREADS -c$CONNS -d${DURATION}s, median of $REPEATS, loopback, $(nproc) cores"
echo "files: page.html $(stat -c %s "$FILES/page.html") B (${HTML_SRC#"$CORPUS"/}), style.css $(stat -c %s "$FILES/style.css") B (${CSS_SRC#"$CORPUS"/}),"
echo "       script.js $(stat -c %s "$FILES/script.js") B (${JS_SRC#"$CORPUS"/}), photo.jpg $(stat -c %s "$FILES/photo.jpg") B ($JPEG_SRC)"
echo "targets: html = /page.html; mix = page.html, style.css, script.js, photo.jpg round robin (bytes = mean body)"
echo "AE: none = no Accept-Encoding; gzip,br; gzip; chromium = \"$AE_CHROMIUM\" (nginx has no zstd in Debian, so it answers br)"
echo "levels: wirefold cached \"$WF_CACHED\", on the fly \"$WF_ON_THE_FLY\"; nginx on the fly gzip $NGX_GZIP_LEVEL, br $NGX_BR_LEVEL; precompressed gzip -9, brotli -q 11"
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
    IFS='|' read -r ae scenario wf ngxs <<<"${ROW[$r]}"
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
    [[ "$t" == "${TARGETS##* }" && "$r" == [34]* ]] && printf '  %-4s %-8s %-13s %s\n' "$r" "$(ae_label "$ae")" "$s" "$cstat"
done
echo "origin requests during the whole run (warm-up included): $ORIGIN_REQS"
echo "wall time: ${WALL} s; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg) (anything else running skews both sides)"

# ---------------------------------------------------------------- JSON
jstr() { local s=$1; s=${s//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
{
    printf '{"bench":"compare-nginx","wirefold":%s,"nginx":%s,' "$(jstr "$("$WIREFOLD" --version)")" "$(jstr "$(nginx -v 2>&1)")"
    printf '"wrk":{"threads":%s,"connections":%s,"duration_s":%s,"repeats":%s},"wall_s":%s,"loadavg_start":%s,' "$THREADS" "$CONNS" "$DURATION" "$REPEATS" "$WALL" "$(jstr "$LOAD_START")"
    printf '"levels":{"wirefold_cached":%s,"wirefold_on_the_fly":%s,"nginx_gzip":%s,"nginx_br":%s,"precompressed":"gzip -9, brotli -q 11"},' \
        "$(jstr "$WF_CACHED")" "$(jstr "$WF_ON_THE_FLY")" "$NGX_GZIP_LEVEL" "$NGX_BR_LEVEL"
    printf '"files":{'
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
