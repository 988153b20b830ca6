#!/usr/bin/env bash
# fleet.sh — the shared store of a fleet (docs/operations.md, Fleet) measured against
# the embedded store, in one run, on loopback.
#
# Usage: bench/fleet.sh [-h]
#
# Environment (all optional):
#   WIREFOLD=PATH    a wirefold binary to use (default: cargo build --release -p wirefold)
#   CORPUS=DIR       the shared corpus (default: <repo>/../shared/corpus)
#   PAGES=50         distinct HTML pages from the corpus, requested round robin
#   DURATION=10      seconds per wrk run        REPEATS=3  runs per cell (median)
#   CONNS=32         wrk connections of the throughput runs (2 threads)
#   KEEP_TMP=1       keep the temp dir (configs, logs) for inspection
#
# nginx (one process) is the origin, serving the pages with `Cache-Control: no-cache`
# (every request is revalidated: the cache entry is read and written each time, which
# is the store's work per request), and the round-robin balancer of the throughput
# runs. redis-server runs with maxmemory 512mb, allkeys-lru, no persistence. The
# instances keep brotli 5 (their on-the-fly level) rather than making brotli 11 in
# the background, so that no run competes with the previous one's background
# compression: the difference measured is the store's.
#
# Prints, per cell, the median over REPEATS:
#   latency   wrk -t1 -c1 (one request at a time, no queueing) straight to one
#             instance: p50 and p99 with the embedded store and with Redis; their
#             difference is the Redis tier's added latency per request.
#   req/s     wrk -t2 -c$CONNS through the balancer: one instance on Redis, two
#             instances on the same Redis; the ratio is what a second instance adds
#             (on 2 shared cores the absolute figures mean little).
#   hit rate  the local tier's blob lookups answered in memory, from the Redis
#             instances' wirefold_store_memory_lookups_total after the runs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
# shellcheck source=bench/nginx-lib.sh
source "$HERE/nginx-lib.sh"

if [[ "${1:-}" == "-h" ]]; then sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
CORPUS=${CORPUS:-$REPO/../shared/corpus}
PAGES=${PAGES:-50}
DURATION=${DURATION:-10}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-32}

need_tools redis-server=redis-server wrk=wrk
find_wirefold
bench_temp wirefold-fleet

# ---------------------------------------------------------------- the pages
mkdir -p "$TMP/root"
n=0
while IFS= read -r page; do
    cp "$page" "$TMP/root/p$n.html"
    n=$((n + 1))
done < <(find "$CORPUS/html" -type f -name '*.html' | sort | head -n "$PAGES")
((n == PAGES)) || die "the corpus has $n HTML pages, fewer than PAGES=$PAGES"
cat >"$TMP/rotate.lua" <<LUA
local pages = $PAGES
local n = 0
request = function()
    n = n + 1
    return wrk.format("GET", "/p" .. (n % pages) .. ".html", {["Accept-Encoding"] = "gzip, br"})
end
LUA

# ---------------------------------------------------------------- servers
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$TMP" --save "" --appendonly no \
    --maxmemory 512mb --maxmemory-policy allkeys-lru --logfile "$TMP/redis.log" &
PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$REDIS_PORT"

ORIGIN_PORT=$(free_port)
cat >"$TMP/wirefold.toml" <<TOML
[[compression.profile]]
types = ["text/*"]
cached = "br:5, zstd:9, gzip:6"
on_the_fly = "br:5, zstd:9, gzip:6"
TOML
# start_instance NAME [STORE]: a wirefold serve on a free port; sets PORT_<NAME>, ADMIN_<NAME>.
start_instance() {
    local name=$1 store=${2:-} port admin
    port=$(free_port)
    admin=$(free_port)
    local args=(serve --origin "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:$port"
        --admin "127.0.0.1:$admin" --data-dir "$TMP/data-$name" --config "$TMP/wirefold.toml")
    [[ -n "$store" ]] && args+=(--store "$store")
    "$WIREFOLD" "${args[@]}" >"$TMP/$name.out" 2>"$TMP/$name.log" &
    PIDS+=($!)
    wait_http "wirefold $name" "$!" "http://127.0.0.1:$admin/healthz"
    printf -v "PORT_$name" '%s' "$port"
    printf -v "ADMIN_$name" '%s' "$admin"
}
start_instance embedded
start_instance a "$REDIS"
start_instance b "$REDIS"

# nginx: the origin, and a balancer over instance a alone and one over a and b.
ONE_PORT=$(free_port)
TWO_PORT=$(free_port)
cat >"$TMP/nginx.conf" <<CONF
daemon off; master_process off; pid $TMP/nginx.pid; error_log $TMP/nginx-error.log;
events { worker_connections 4096; }
http {
  client_body_temp_path $TMP/nb; proxy_temp_path $TMP/np; fastcgi_temp_path $TMP/nf;
  uwsgi_temp_path $TMP/nu; scgi_temp_path $TMP/ns;
  access_log off;
  server {
    listen 127.0.0.1:$ORIGIN_PORT;
    root $TMP/root;
    add_header Cache-Control no-cache;
    types { text/html html; }
  }
  upstream one { server 127.0.0.1:$PORT_a; keepalive 64; }
  upstream two { server 127.0.0.1:$PORT_a; server 127.0.0.1:$PORT_b; keepalive 64; }
  server {
    listen 127.0.0.1:$ONE_PORT;
    location / { proxy_pass http://one; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host \$http_host; }
  }
  server {
    listen 127.0.0.1:$TWO_PORT;
    location / { proxy_pass http://two; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host \$http_host; }
  }
}
CONF
nginx -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf" &
PIDS+=($!)
wait_http nginx "$!" "http://127.0.0.1:$ORIGIN_PORT/p0.html"

# ---------------------------------------------------------------- runs
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# wrk_run URL THREADS CONNS: prints "p50_ms p99_ms req_per_s"; a run with any
# answer other than 2xx/3xx (wrk's "Non-2xx or 3xx responses") or socket error fails.
wrk_run() {
    local out
    out=$(wrk -t"$2" -c"$3" -d"${DURATION}s" --latency -s "$TMP/rotate.lua" "$1")
    if grep -qE "Non-2xx|Socket errors" <<<"$out"; then
        die "$1: not every answer was a success: $out"
    fi
    awk '
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
        $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) } $1 == "Requests/sec:" { rps = $2 }
        END { printf "%.3f %.3f %.0f\n", p50, p99, rps }' <<<"$out"
}
# cell NAME URL THREADS CONNS: REPEATS runs; sets P50, P99, RPS (medians).
cell() {
    local out=() i
    wrk -t1 -c4 -d2s -s "$TMP/rotate.lua" "$2" >/dev/null # every page stored, hot
    for i in $(seq "$REPEATS"); do out+=("$(wrk_run "$2" "$3" "$4")"); done
    P50=$(printf '%s\n' "${out[@]}" | awk '{print $1}' | median)
    P99=$(printf '%s\n' "${out[@]}" | awk '{print $2}' | median)
    RPS=$(printf '%s\n' "${out[@]}" | awk '{print $3}' | median)
    log "$1: p50 $P50 ms, p99 $P99 ms, $RPS req/s (runs: ${out[*]})"
}
metric_sum() { # ADMIN_PORT NAME_AND_LABELS
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 { s += $NF } END { print s + 0 }'
}

log "latency, one request at a time, $PAGES pages"
cell "embedded store" "http://127.0.0.1:$PORT_embedded" 1 1
E50=$P50 E99=$P99
cell "redis store" "http://127.0.0.1:$PORT_a" 1 1
R50=$P50 R99=$P99
log "throughput through the balancer, $CONNS connections"
cell "one instance on redis" "http://127.0.0.1:$ONE_PORT" 2 "$CONNS"
ONE=$RPS
cell "two instances on redis" "http://127.0.0.1:$TWO_PORT" 2 "$CONNS"
TWO=$RPS
hits=0 misses=0
for admin in "$ADMIN_a" "$ADMIN_b"; do
    hits=$((hits + $(metric_sum "$admin" 'wirefold_store_memory_lookups_total{result="hit"}')))
    misses=$((misses + $(metric_sum "$admin" 'wirefold_store_memory_lookups_total{result="miss"}')))
done
unreachable=$(metric_sum "$ADMIN_a" 'wirefold_store_shared_changes_total{state="unreachable"}')
redis_mem=$(redis-cli -p "$REDIS_PORT" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r')
redis_keys=$(redis-cli -p "$REDIS_PORT" dbsize | tr -d '\r')
redis_commands=$(redis-cli -p "$REDIS_PORT" info stats | awk -F: '/^total_commands_processed:/ {print $2}' | tr -d '\r')
redis_cpu=$(redis-cli -p "$REDIS_PORT" info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {print s}')
served=0
for admin in "$ADMIN_a" "$ADMIN_b"; do
    served=$((served + $(metric_sum "$admin" 'wirefold_requests_total')))
done

printf '\n%-34s %10s %10s\n' "" "p50 ms" "p99 ms"
printf '%-34s %10s %10s\n' "embedded store" "$E50" "$E99"
printf '%-34s %10s %10s\n' "redis store" "$R50" "$R99"
awk -v a="$R50" -v b="$E50" -v c="$R99" -v d="$E99" 'BEGIN { printf "%-34s %+10.3f %+10.3f\n", "added by redis", a - b, c - d }'
printf '\n%-34s %10s\n' "" "req/s"
printf '%-34s %10s\n' "one instance on redis" "$ONE" "two instances on redis" "$TWO"
awk -v a="$TWO" -v b="$ONE" 'BEGIN { printf "%-34s %10.2f\n", "two / one", a / b }'
awk -v h="$hits" -v m="$misses" 'BEGIN { printf "\nlocal tier: %d hits, %d misses, hit rate %.1f%%\n", h, m, (h + m) ? 100 * h / (h + m) : 0 }'
echo "redis: $redis_keys keys, $redis_mem bytes used, $redis_commands commands for $served requests ($(awk -v c="$redis_commands" -v r="$served" 'BEGIN { printf "%.2f", c / r }') per request), ${redis_cpu} s of CPU; instance a saw it unreachable $unreachable times"
