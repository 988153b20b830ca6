# shellcheck shell=bash
# bench/nginx-lib.sh — what the nginx comparisons (compare-nginx.sh, idle-conns.sh)
# share, sourced after bench/lib.sh: installing the tools,
# finding the binaries, the files served, the compression levels, the nginx and
# wirefold configurations of the static rows, starting servers, reading /proc.

# Compression levels, stated once and used by both sides.
WF_CACHED="br:11, zstd:19, gzip:9"      # wirefold: reusable bodies (files, cached responses)
WF_ON_THE_FLY="zstd:3, br:4, gzip:6"    # wirefold: bodies compressed on every request
NGX_GZIP_LEVEL=6                         # nginx on the fly: gzip_comp_level
NGX_BR_LEVEL=4                           # nginx on the fly: brotli_comp_level
PRE_GZIP="gzip -9 -k -n"                 # nginx precompressed .gz
PRE_BR="brotli -q 11 -k"                 # nginx precompressed .br
MIN_SIZE=512
# wirefold's files.check_interval_ms (nginx here trusts an open file for 60 s:
# open_file_cache_valid); unset leaves wirefold's default, a stat per request, and keeps
# the config readable by builds that predate the key.
FILE_CHECK_MS=${FILE_CHECK_MS:-}
AE_CHROMIUM="gzip, deflate, br, zstd"

# ---------------------------------------------------------------- tools
# need_tools [EXTRA_PACKAGE_IF_MISSING=COMMAND]...: nginx with the brotli modules, curl,
# gzip, brotli, zstd, wrk, and the extras given as PACKAGE=COMMAND; installs what is
# missing with apt-get (as root).
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
need_tools() {
    local need_pkgs=() extra
    command -v nginx >/dev/null || need_pkgs+=(nginx)
    [[ -e /usr/lib/nginx/modules/ngx_http_brotli_filter_module.so ]] || need_pkgs+=(libnginx-mod-http-brotli-filter)
    [[ -e /usr/lib/nginx/modules/ngx_http_brotli_static_module.so ]] || need_pkgs+=(libnginx-mod-http-brotli-static)
    for extra in wrk=wrk brotli=brotli curl=curl gzip=gzip zstd=zstd "$@"; do
        command -v "${extra#*=}" >/dev/null || need_pkgs+=("${extra%%=*}")
    done
    if [[ ${#need_pkgs[@]} -gt 0 ]]; then apt_install "${need_pkgs[@]}"; fi
}

# ---------------------------------------------------------------- binaries
# find_wirefold: $WIREFOLD made absolute, or a release build of the repository's, with
# the features the Debian package has.
find_wirefold() {
    if [[ -n "${WIREFOLD:-}" ]]; then
        [[ -x "$WIREFOLD" ]] || die "WIREFOLD=$WIREFOLD is not an executable"
        WIREFOLD=$(cd "$(dirname "$WIREFOLD")" && pwd)/$(basename "$WIREFOLD")
    else
        WIREFOLD=$(release_binary wirefold wirefold --features redis)
    fi
}
# find_loadgen: $LOADGEN made absolute, or a release build of crates/loadgen.
find_loadgen() {
    if [[ -n "${LOADGEN:-}" ]]; then
        [[ -x "$LOADGEN" ]] || die "LOADGEN=$LOADGEN is not an executable"
        LOADGEN=$(cd "$(dirname "$LOADGEN")" && pwd)/$(basename "$LOADGEN")
    else
        LOADGEN=$(release_binary wirefold-loadgen wirefold-loadgen)
    fi
}
release_binary() { # PACKAGE BINARY [CARGO ARGS]: builds it (release) and prints its path
    command -v cargo >/dev/null || die "cargo not found: install Rust or give the path to $2"
    log "cargo build --release --locked -p $1 ${*:3}"
    (cd "$REPO" && cargo build --release --locked -q -p "$1" "${@:3}") >&2 || die "release build of $1 failed"
    local target
    target=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    echo "$target/release/$2"
}

# ---------------------------------------------------------------- the files
# pick_page: HTML_SRC, the corpus's HTML page closest to 100 KB.
pick_page() {
    [[ -d "$CORPUS/html" ]] || die "corpus not found at $CORPUS (set CORPUS=DIR)"
    HTML_SRC=$(find "$CORPUS/html" -type f -name '*.html' -printf '%s %p\n' \
        | awk '{d=$1-100000; if (d<0) d=-d; print d, $2}' | sort -k1,1n -k2 | awk 'NR==1{print $2}')
    [[ -f "$HTML_SRC" ]] || die "no HTML page in $CORPUS/html"
}
# precompress DIR FILE...: FILE.gz and FILE.br beside each, as nginx's *_static want.
precompress() {
    local dir=$1 f; shift
    for f in "$@"; do (cd "$dir" && $PRE_GZIP "$f" && $PRE_BR "$f"); done
}

# ---------------------------------------------------------------- configurations
NGX_USER=""
[[ $(id -u) -eq 0 ]] && NGX_USER="user root;"
MIME=/etc/nginx/mime.types
BROTLI_MODULES="load_module /usr/lib/nginx/modules/ngx_http_brotli_filter_module.so;
load_module /usr/lib/nginx/modules/ngx_http_brotli_static_module.so;"

nginx_main() { # NAME WORKERS [CONNECTIONS]: the main context, with the brotli modules
    [[ -f $MIME ]] || die "$MIME missing (package nginx-common)"
    local connections=${3:-4096}
    cat <<EOF
$NGX_USER
worker_processes $2;
worker_rlimit_nofile $((connections + 1024));
pid $TMP/$1.pid;
error_log $TMP/$1-error.log warn;
$BROTLI_MODULES
events { worker_connections $connections; }
EOF
}
# The http context's settings every nginx peer shares: access logging off (its best
# case). tcp_nopush stays off: with Debian's default `tcp_nopush on`, proxy_cache hits
# (sent with sendfile after the header) stall on the 40 ms delayed ACK over loopback
# (~1.1k req/s instead of ~20k for the 100 KB page); static files are unaffected.
nginx_http_common() {
    cat <<EOF
    include $MIME;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush off;
    keepalive_requests 1000000;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
EOF
}
# nginx_static_server LISTEN-PARAMETERS [DIRECTIVES]: the static rows' server, serving
# $PRE: page.html.gz (gzip -9) and page.html.br (brotli -q 11) beside the files.
nginx_static_server() {
    cat <<EOF
    server {
        listen $1;
        root $PRE;
        gzip_static on;
        brotli_static on;
        gzip_vary on;
        ${2:-}
    }
EOF
}

# write_wirefold_config FILE [EXTRA-TOML]: the compression profile both sides' levels
# above describe.
write_wirefold_config() {
    cat > "$1" <<EOF
[compression]
enabled = true
min_size = $MIN_SIZE

[[compression.profile]]
types = ["text/*", "application/javascript", "application/json", "image/svg+xml"]
cached = "$WF_CACHED"
on_the_fly = "$WF_ON_THE_FLY"
${FILE_CHECK_MS:+
[files]
check_interval_ms = $FILE_CHECK_MS}
${2:-}
EOF
}

# ---------------------------------------------------------------- processes
start_nginx() { # NAME: starts $TMP/NAME.conf in the foreground; its pid in LAST_PID
    nginx -t -q -p "$TMP" -e "$TMP/$1-error.log" -c "$TMP/$1.conf" -g 'daemon off;' 2>"$TMP/$1-test.log" \
        || { cat "$TMP/$1-test.log" >&2; die "nginx config $1 invalid"; }
    nginx -p "$TMP" -e "$TMP/$1-error.log" -c "$TMP/$1.conf" -g 'daemon off;' >"$TMP/$1.out" 2>&1 &
    PIDS+=($!)
    LAST_PID=$!
}
start_wirefold() { # NAME PORT ADMIN CONFIG MODE-ARGS...: wirefold serve; its pid in LAST_PID
    local name=$1 port=$2 admin=$3 config=$4; shift 4
    WIREFOLD_LOG=warn "$WIREFOLD" serve "$@" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" \
        --data-dir "$TMP/$name-data" --config "$config" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    LAST_PID=$!
}
# children_of PID: the processes whose parent it is (nginx's workers and cache helpers).
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
# cpu_ticks_of PID...: CPU time (user + system, all threads) they spent, in clock ticks.
cpu_ticks_of() {
    local t=0 pid
    for pid in "$@"; do
        [[ -r /proc/$pid/stat ]] && t=$((t + $(awk '{sub(/^.*\) /,""); print $12 + $13}' "/proc/$pid/stat")))
    done
    echo "$t"
}
# rss_kb_of PID...: their resident set sizes (VmRSS), summed, in KiB.
rss_kb_of() {
    local t=0 pid kb
    for pid in "$@"; do
        kb=$(awk '$1=="VmRSS:"{print $2}' "/proc/$pid/status" 2>/dev/null || true)
        t=$((t + ${kb:-0}))
    done
    echo "$t"
}
# raise_nofile N: the soft limit on open files to at least N (up to the hard limit).
raise_nofile() {
    local hard
    hard=$(ulimit -Hn)
    [[ $hard == unlimited || $hard -ge $1 ]] || die "needs $1 open files, the hard limit (ulimit -Hn) is $hard"
    [[ $(ulimit -Sn) != unlimited && $(ulimit -Sn) -lt $1 ]] && ulimit -Sn "$1"
    return 0
}

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }
jstr() { local s=$1; s=${s//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
