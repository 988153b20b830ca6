#!/usr/bin/env bash
# bench/allocations.sh — heap allocations per request on wirefold's cached path, and
# where they are made.
#
# `wirefold serve --root` with the corpus page nearest 100 KB (the page of
# bench/compare-nginx.sh, same compression profile) answers REQUESTS requests for its
# cached encoding, one connection, HTTP/1.1 (h2load --h1), twice. The first time every
# malloc, calloc and realloc the server makes is counted (perf stat on uprobes on libc;
# needs root); the second, recorded with DWARF call graphs, attributes them to the first
# frame of wirefold's or its HTTP crates' code. The last line is JSON:
# {"requests": N, "allocations_per_request": X}.
#
# Environment:
#   WIREFOLD=PATH     a wirefold binary (default: cargo build --release -p wirefold)
#   ENCODING=br       the Accept-Encoding sent (br, gzip, "gzip, deflate, br, zstd", identity)
#   REQUESTS=4000     requests counted
#   TOP=20            call sites listed
#   CORPUS=DIR        the shared corpus (default: <repo>/../shared/corpus)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
# shellcheck source=bench/nginx-lib.sh
source "$HERE/nginx-lib.sh"

CORPUS=${CORPUS:-$REPO/../shared/corpus}
ENCODING=${ENCODING:-br}
REQUESTS=${REQUESTS:-4000}
TOP=${TOP:-20}
[[ $(id -u) -eq 0 ]] || die "uprobes need root"
command -v perf >/dev/null || apt_install linux-perf
command -v h2load >/dev/null || apt_install nghttp2-client
find_wirefold
bench_temp allocations
pick_page

mkdir -p "$TMP/files"
cp "$HTML_SRC" "$TMP/files/page.html"
cat > "$TMP/wirefold.toml" <<'EOF'
[compression]
enabled = true
min_size = 512
[[compression.profile]]
types = ["text/*"]
cached = "br:11, zstd:19, gzip:9"
on_the_fly = "zstd:3, br:4, gzip:6"
EOF
PORT=$(free_port); ADMIN=$(free_port)
WIREFOLD_LOG=warn "$WIREFOLD" serve --root "$TMP/files" --listen "127.0.0.1:$PORT" \
    --admin "127.0.0.1:$ADMIN" --data-dir "$TMP/data" --config "$TMP/wirefold.toml" \
    > "$TMP/wirefold.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
URL="http://127.0.0.1:$PORT/page.html"
wait_http wirefold "$SERVER" "$URL"

# Warm up: the first request starts the cached level in the background; the counted
# requests must all be answered from it.
curl -s -o /dev/null -H "Accept-Encoding: $ENCODING" "$URL"
sleep 2
h2load --h1 -n 2000 -c 1 -H "Accept-Encoding: $ENCODING" "$URL" > /dev/null

LIBC=$(ldd "$WIREFOLD" | awk '/libc\.so/{print $3; exit}')
[[ -f "$LIBC" ]] || die "libc not found in ldd $WIREFOLD"
ADDED=()
for fn in malloc calloc realloc; do
    if ! perf probe -l 2>/dev/null | grep -q "probe_libc:$fn "; then
        perf probe -q -x "$LIBC" "$fn" || die "perf probe -x $LIBC $fn failed"
        ADDED+=("probe_libc:$fn")
    fi
done
remove_probes() { for p in "${ADDED[@]}"; do perf probe -q -d "$p" || true; done; }
trap 'rc=$?; remove_probes; (exit "$rc"); bench_cleanup' EXIT

run_load() { h2load --h1 -n "$REQUESTS" -c 1 -H "Accept-Encoding: $ENCODING" "$URL" > "$TMP/h2load.out" 2>&1
    grep -q "$REQUESTS succeeded, 0 failed" "$TMP/h2load.out" || die "not every request succeeded: $(grep requests: "$TMP/h2load.out")"; }
EVENTS=probe_libc:malloc,probe_libc:calloc,probe_libc:realloc

# The count: every call, exactly (perf stat loses none).
log "counting the allocations of $REQUESTS requests (Accept-Encoding: $ENCODING)"
perf stat -x, -e "$EVENTS" -p "$SERVER" -o "$TMP/stat.csv" -- bash -c "$(declare -f run_load die log); REQUESTS=$REQUESTS ENCODING='$ENCODING' URL=$URL TMP=$TMP run_load"
TOTAL=$(awk -F, '$3 ~ /probe_libc/ {n += $1} END {print n + 0}' "$TMP/stat.csv")

# The call sites: a second run with call graphs (perf record may drop samples when
# its buffer fills; the sites' shares of what it kept scale the exact count).
log "recording where they are made"
perf record -q -m 64M -e "$EVENTS" --call-graph dwarf,4096 -p "$SERVER" -o "$TMP/perf.data" -- \
    bash -c "$(declare -f run_load die log); REQUESTS=$REQUESTS ENCODING='$ENCODING' URL=$URL TMP=$TMP run_load"

# Each sample: its count, then its frames from the allocation outwards; it is
# attributed to the first frame of wirefold's crates or of the HTTP stack it drives.
perf report -i "$TMP/perf.data" --no-children --stdio -g folded,0,callee,function,count 2>/dev/null \
    | grep ';' | awk -v requests="$REQUESTS" -v exact="$TOTAL" -v top="$TOP" '
    {
        count = $1; line = $0; sub(/^[^ ]+ /, "", line)
        n = split(line, frames, ";"); site = "(outside)"
        for (i = 2; i <= n; i++) {
            f = frames[i]; sub(/ \(inlined\)$/, "", f)
            if (f ~ /^<?(proxy|wirefold_[a-z_]+|delta|codec|fidelity|hyper|h2|http|http_body_util|tokio|quick_cache|prometheus_client)::/) { site = f; break }
        }
        sites[site] += count; recorded += count
    }
    END {
        sort = "sort -rn | head -" top
        for (s in sites) printf "%8.2f  %s\n", exact / requests * sites[s] / recorded, substr(s, 1, 150) | sort
        close(sort)
        printf "{\"requests\": %d, \"allocations_per_request\": %.1f}\n", requests, exact / requests
    }'
