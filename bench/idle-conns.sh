#!/usr/bin/env bash
# idle-conns.sh — the memory of many idle keep-alive connections: nginx against
# wirefold, one after the other, on loopback.
#
# Usage: bench/idle-conns.sh [-h]
#
# Environment (all optional):
#   WIREFOLD=PATH      a wirefold binary (default: cargo build --release -p wirefold)
#   LOADGEN=PATH       a wirefold-loadgen binary (default: cargo build --release)
#   CORPUS=DIR         the shared corpus (default: <repo>/../shared/corpus)
#   CONNECTIONS=10000  idle connections held open at once
#   HOLD=10            seconds they are held once all are open
#   SETTLE=2           seconds after the last one opened before RSS is read
#   KEEP_TMP=1         keep the temp dir (configs, logs) for inspection
#
# Each server in turn, started alone: nginx as compare-nginx.sh's static rows run it (2
# workers, reuseport, gzip_static + brotli_static on the precompressed files, access log
# off), with worker_connections CONNECTIONS+1024 and worker_rlimit_nofile to match; then
# wirefold `serve --root` on the same files with the same compression profile. After a
# warm-up (the page's br encoding made and kept), RSS is read; then `wirefold-loadgen
# idle` opens CONNECTIONS connections, 256 at a time, each asking GET /page.html with
# "Accept-Encoding: gzip, br" once and reading the whole br answer, and holds them all
# idle; SETTLE s after the last one is open, RSS is read again. RSS is VmRSS from /proc,
# summed over nginx's master and workers; wirefold is one process. Per connection = the
# difference / CONNECTIONS. The loader reports any connection the server closed while
# held; such a run is marked, its figures describe fewer connections.
#
# Limits: the shell's open-file limit is raised to CONNECTIONS+1100 for the loader and
# the servers (it must be under the hard limit). wirefold's connection limit
# (limits.max_connections, by default 3/4 of the open-file limit) is set to
# CONNECTIONS+1024 as nginx's worker_connections is, and wirefold
# closes an idle keep-alive connection after limits.header_timeout_ms (10 s by
# default: hyper's header timer runs while a connection waits for its next request);
# nginx's keepalive_timeout is 75 s. The run's wirefold configuration raises
# header_timeout_ms to HOLD+SETTLE+60 s, so that the connections are still open when
# measured.
#
# Output: a table (RSS before and with the connections, KB per connection), the ratios
# wirefold/nginx, and a last line of JSON.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -gt 0 ]] && { echo "idle-conns.sh takes no arguments (see -h); got: $*" >&2; exit 2; }

START_TS=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
# shellcheck source=bench/nginx-lib.sh
source "$HERE/nginx-lib.sh"

CORPUS=${CORPUS:-$REPO/../shared/corpus}
CONNECTIONS=${CONNECTIONS:-10000}
HOLD=${HOLD:-10}
SETTLE=${SETTLE:-2}
AE="gzip, br"
[[ $CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "CONNECTIONS must be a whole number, got $CONNECTIONS"
[[ $HOLD =~ ^[0-9]+$ && $SETTLE =~ ^[0-9]+$ && $HOLD -gt $SETTLE ]] || die "HOLD and SETTLE are whole seconds, HOLD > SETTLE"

# shellcheck disable=SC2119 # no extra tools
need_tools
find_wirefold
find_loadgen
raise_nofile $((CONNECTIONS + 1100))
bench_temp idle-conns

# ---------------------------------------------------------------- files, configs
pick_page
FILES="$TMP/files"; PRE="$TMP/pre"
mkdir -p "$FILES" "$PRE"
cp "$HTML_SRC" "$FILES/page.html"
cp "$HTML_SRC" "$PRE/page.html"
precompress "$PRE" page.html
chmod -R a+rX "$TMP"

P_NGX=$(free_port); P_WF=$(free_port); P_WF_ADMIN=$(free_port)
NGX_CONNECTIONS=$((CONNECTIONS + 1024))
{
    nginx_main idle "2" "$NGX_CONNECTIONS"
    echo "http {"
    nginx_http_common
    nginx_static_server "127.0.0.1:$P_NGX reuseport"
    echo "}"
} > "$TMP/idle.conf"
HEADER_TIMEOUT_MS=$(( (HOLD + SETTLE + 60) * 1000 ))
write_wirefold_config "$TMP/wirefold.toml" "
[limits]
header_timeout_ms = $HEADER_TIMEOUT_MS
max_connections = $NGX_CONNECTIONS"

# ---------------------------------------------------------------- one server
# body_ok URL: the br answer decodes to the file.
body_ok() {
    curl -s -H "Accept-Encoding: $AE" -o "$TMP/body" "$1"
    if brotli -dc <"$TMP/body" 2>/dev/null | cmp -s - "$FILES/page.html"; then echo yes; else echo no; fi
}
# warm PORT: requests until the page's coded size stops changing (wirefold encodes its
# kept br in the background after the first request).
warm() {
    local last="" n
    for _ in $(seq 30); do
        n=$(curl -s -H "Accept-Encoding: $AE" -o /dev/null -w '%{size_download}' "http://127.0.0.1:$1/page.html")
        [[ $n == "$last" ]] && return 0
        last=$n
        sleep 1
    done
    log "warning: the page's size on port $1 still changing after 30 s"
}
# measure NAME PORT PIDS-FUNCTION: MEASURED="rss_before_kb|rss_with_kb|established|closed|open_at_end|open_s|ok"
# (not in a subshell: the loader it starts is in PIDS, stopped if the script stops)
measure() {
    local name=$1 port=$2 pids_of=$3 before with out pid line
    warm "$port"
    local ok
    ok=$(body_ok "http://127.0.0.1:$port/page.html")
    # shellcheck disable=SC2046 # a server's pids are a list
    before=$(rss_kb_of $($pids_of))
    out="$TMP/loadgen-$name.out"
    : >"$out"
    "$LOADGEN" idle --addr "127.0.0.1:$port" --path /page.html -H "accept-encoding: $AE" \
        --connections "$CONNECTIONS" --hold "$HOLD" >"$out" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    until grep -q '^established' "$out"; do
        kill -0 "$pid" 2>/dev/null || { cat "$out" >&2; die "wirefold-loadgen exited before establishing its connections ($name)"; }
        sleep 0.2
    done
    log "$name: $(grep '^established' "$out")"
    sleep "$SETTLE"
    # shellcheck disable=SC2046
    with=$(rss_kb_of $($pids_of))
    wait "$pid" || true
    line=$(tail -1 "$out")
    [[ $line == '{"'* ]] || { cat "$out" >&2; die "wirefold-loadgen gave no report ($name)"; }
    log "$name: $(tail -2 "$out" | head -1)"
    MEASURED="$before|$with|$(jnum established "$line")|$(jnum closed_by_server "$line")|$(jnum open_at_end "$line")|$(jnum open_s "$line")|$ok"
}
jnum() { sed -n "s/.*\"$1\":\([-0-9.e]*\).*/\1/p" <<<"$2"; }
stop() { # PID: stops a server this script started, and waits for it
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# ---------------------------------------------------------------- nginx, then wirefold
start_nginx idle
NGX_PID=$LAST_PID
wait_http nginx "$NGX_PID" "http://127.0.0.1:$P_NGX/page.html"
ngx_pids() { echo "$NGX_PID $(children_of "$NGX_PID" | tr '\n' ' ')"; }
NGX_WORKERS=$(children_of "$NGX_PID" | wc -l)
measure nginx "$P_NGX" ngx_pids
IFS='|' read -r n_before n_with n_est n_closed n_open n_open_s n_ok <<<"$MEASURED"
stop "$NGX_PID"

start_wirefold wf-root "$P_WF" "$P_WF_ADMIN" "$TMP/wirefold.toml" --root "$FILES"
WF_PID=$LAST_PID
wait_http wirefold "$WF_PID" "http://127.0.0.1:$P_WF/page.html"
wf_pids() { echo "$WF_PID"; }
WF_THREADS=$(awk '$1=="Threads:"{print $2}' "/proc/$WF_PID/status")
measure wirefold "$P_WF" wf_pids
IFS='|' read -r w_before w_with w_est w_closed w_open w_open_s w_ok <<<"$MEASURED"
stop "$WF_PID"

# ---------------------------------------------------------------- report
per_conn() { awk -v b="$1" -v w="$2" -v n="$3" 'BEGIN{ printf "%.2f", (n > 0 ? (w - b) / n : 0) }'; }
mb() { awk -v k="$1" 'BEGIN{ printf "%.1f", k / 1024 }'; }
n_per=$(per_conn "$n_before" "$n_with" "$n_open")
w_per=$(per_conn "$w_before" "$w_with" "$w_open")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ printf "%.2f", (b > 0 ? a / b : 0) }'; }
WALL=$(( $(date +%s) - START_TS ))
echo
echo "idle keep-alive connections: $CONNECTIONS, each after one GET /page.html ($(stat -c %s "$FILES/page.html") B, AE \"$AE\": br), held ${HOLD} s, RSS read ${SETTLE} s after the last opened"
echo "nginx $(nginx -v 2>&1 | sed 's/.*\///') ($NGX_WORKERS workers, worker_connections $NGX_CONNECTIONS), wirefold $("$WIREFOLD" --version | awk '{print $2}') ($WF_THREADS threads after start; limits.header_timeout_ms = $HEADER_TIMEOUT_MS)"
echo
printf '%-10s %14s %14s %14s %12s %8s %12s %8s %4s\n' server "RSS before MB" "RSS with MB" "KB per conn" established closed "open at end" "open s" ok
printf '%-10s %14s %14s %14s %12s %8s %12s %8.1f %4s\n' nginx "$(mb "$n_before")" "$(mb "$n_with")" "$n_per" "$n_est" "$n_closed" "$n_open" "$n_open_s" "$n_ok"
printf '%-10s %14s %14s %14s %12s %8s %12s %8.1f %4s\n' wirefold "$(mb "$w_before")" "$(mb "$w_with")" "$w_per" "$w_est" "$w_closed" "$w_open" "$w_open_s" "$w_ok"
echo
verdict="meets target"
[[ $n_open == "$CONNECTIONS" && $w_open == "$CONNECTIONS" ]] || verdict="INCOMPLETE: not every connection stayed open"
[[ $w_ok == yes && $n_ok == yes ]] || verdict="WRONG-BODY"
[[ $verdict == "meets target" ]] && awk -v w="$w_with" -v n="$n_with" 'BEGIN{ exit !(w > n) }' && verdict="behind: more memory"
echo "ratios wirefold/nginx: RSS with the connections $(ratio "$w_with" "$n_with"), KB per connection $(ratio "$w_per" "$n_per"); verdict: $verdict"
echo "wall time: ${WALL} s; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '{"bench":"idle-conns","wirefold":%s,"nginx":%s,"connections":%s,"hold_s":%s,"settle_s":%s,"wirefold_header_timeout_ms":%s,"wall_s":%s,"loadavg_start":%s,' \
    "$(jstr "$("$WIREFOLD" --version)")" "$(jstr "$(nginx -v 2>&1)")" "$CONNECTIONS" "$HOLD" "$SETTLE" "$HEADER_TIMEOUT_MS" "$WALL" "$(jstr "$LOAD_START")"
printf '"servers":{"nginx":{"rss_before_kb":%s,"rss_with_kb":%s,"kb_per_connection":%s,"established":%s,"closed_by_server":%s,"open_at_end":%s,"body_correct":%s},' \
    "$n_before" "$n_with" "$n_per" "$n_est" "$n_closed" "$n_open" "$([[ $n_ok == yes ]] && echo true || echo false)"
printf '"wirefold":{"rss_before_kb":%s,"rss_with_kb":%s,"kb_per_connection":%s,"established":%s,"closed_by_server":%s,"open_at_end":%s,"body_correct":%s}},' \
    "$w_before" "$w_with" "$w_per" "$w_est" "$w_closed" "$w_open" "$([[ $w_ok == yes ]] && echo true || echo false)"
printf '"ratios":{"rss_with":%s,"kb_per_connection":%s},"verdict":%s}\n' "$(ratio "$w_with" "$n_with")" "$(ratio "$w_per" "$n_per")" "$(jstr "$verdict")"
