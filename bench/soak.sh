#!/usr/bin/env bash
# soak.sh — wirefold at saturation for a long time, on loopback, every body verified
# (docs/benchmarks.md, "Soak").
#
# Usage: bench/soak.sh [MINUTES]        (default 30)
#
# Environment (all optional):
#   WIREFOLD=PATH       a wirefold binary       (default: cargo build --release --locked)
#   SOAK=PATH           a wirefold-soak binary  (default: built with wirefold)
#   CONNECTIONS=64      driver workers, each on one keep-alive connection
#   PAIR_SHARE=0.375    share of the workers on the proxy pair
#   HOSTILE_SHARE=0.05  share of hostile requests
#   STORE_MB=256        each process's store on disk (cache.max_bytes, the client's
#                       max_store_bytes): small enough to fill during the warm-up, so
#                       the second half measures the steady state (the product default,
#                       1024, takes ~34 min to fill at full rate on 2 cores)
#   KEEP_TMP=1          keep the temp dir (data dirs, whole logs)
#
# Starts on loopback: the soak origin (`wirefold-soak origin`: every body a pure
# function of its URL and of the version its ETag names, versions changing every 1-10 s
# or never), `wirefold serve --origin` in front of it, and the proxy pair (`wirefold
# client` -> TLS link -> `wirefold serve --link`, forward mode). Then `wirefold-soak
# drive` runs CONNECTIONS workers for MINUTES: identity, gzip, br, zstd, dcb/dcz with
# the dictionaries the server announced (Use-As-Dictionary and derived ones), RFC 3229
# deltas (226), revalidations (304), ranges, HEAD, through the server and through the
# pair, plus HOSTILE_SHARE hostile requests (hostile field values, malformed requests
# over raw TCP, slowloris heads). Every body is decoded with wirefold's own decoders
# and compared by SHA-256 with the truth of the instance its ETag names; a 304 must
# confirm an instance the request listed; a hostile request must get a 4xx or a close.
# RSS and open descriptors of the three wirefold processes are sampled every 10 s.
#
# Output: progress every 10 s and a table per request kind on stderr; in
# bench/results/soak-DATE/: summary.json, samples.csv, minutes.csv, soak.svg (RSS, fds,
# p50/p99 per minute) and the tail of each process's log. The last line of stdout:
#   {"requests": N, "wrong_bodies": N, "errors": {KIND: N}, "rss_mb": [FIRST, MAX, LAST],
#    "fds": [FIRST, MAX, LAST], "p99_ms": [FIRST_MINUTE, LAST_MINUTE]}
# (rss_mb and fds: totals over the three wirefold processes). Exit status 1 when a
# body was wrong or a wirefold process exited.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -le 1 ]] || { echo "soak.sh takes at most one argument, MINUTES (see -h); got: $*" >&2; exit 2; }
MINUTES=${1:-30}
[[ $MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: MINUTES must be a whole number of minutes, got: $MINUTES" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
command -v curl >/dev/null || die "needs curl (waiting for the servers)"

# ---------------------------------------------------------------- binaries
if [[ -z ${WIREFOLD:-} || -z ${SOAK:-} ]]; then
    command -v cargo >/dev/null || die "cargo not found: install Rust or set WIREFOLD= and SOAK="
    log "cargo build --release --locked -p wirefold -p wirefold-soak"
    (cd "$REPO" && cargo build --release --locked -q -p wirefold -p wirefold-soak) >&2 || die "release build failed"
    TARGET=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    WIREFOLD=${WIREFOLD:-$TARGET/release/wirefold}
    SOAK=${SOAK:-$TARGET/release/wirefold-soak}
fi
[[ -x $WIREFOLD ]] || die "no wirefold binary at $WIREFOLD"
[[ -x $SOAK ]] || die "no wirefold-soak binary at $SOAK"

bench_temp wirefold-soak
RESULTS=$REPO/bench/results/soak-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

P_ORIGIN=$(free_port)
P_DIRECT=$(free_port); P_DIRECT_ADMIN=$(free_port)
P_LINK=$(free_port); P_LINK_ADMIN=$(free_port)
P_CLIENT=$(free_port); P_CLIENT_ADMIN=$(free_port)

STORE_MB=${STORE_MB:-256}
[[ $STORE_MB =~ ^[1-9][0-9]*$ ]] || die "STORE_MB must be a whole number of MiB, got: $STORE_MB"
STORE_BYTES=$((STORE_MB * 1024 * 1024))
# Short grace periods: at the end nothing in flight matters.
printf '[limits]\nshutdown_grace_ms = 2000\n\n[cache]\nmax_bytes = %d\n' "$STORE_BYTES" >"$TMP/direct.toml"
# The soak origin is on loopback, which a forward server proxy refuses by default.
printf '[limits]\nshutdown_grace_ms = 2000\n\n[cache]\nmax_bytes = %d\n\n[link]\ndestinations = "any"\n' \
    "$STORE_BYTES" >"$TMP/link.toml"
printf 'shutdown_grace_ms = 2000\nmax_store_bytes = %d\n' "$STORE_BYTES" >"$TMP/client.toml"

# ---------------------------------------------------------------- the processes
export NO_COLOR=1 # plain logs, so that warnings can be counted
"$SOAK" origin --listen "127.0.0.1:$P_ORIGIN" >"$TMP/origin.log" 2>&1 &
ORIGIN_PID=$!; PIDS+=("$ORIGIN_PID")
for _ in $(seq 100); do
    grep -qx ready "$TMP/origin.log" && break
    kill -0 "$ORIGIN_PID" 2>/dev/null || die "the soak origin exited: $(cat "$TMP/origin.log")"
    sleep 0.1
done
grep -qx ready "$TMP/origin.log" || die "the soak origin did not start"

"$WIREFOLD" serve --origin "http://127.0.0.1:$P_ORIGIN" --listen "127.0.0.1:$P_DIRECT" \
    --admin "127.0.0.1:$P_DIRECT_ADMIN" --data-dir "$TMP/direct" --config "$TMP/direct.toml" \
    >"$TMP/direct.log" 2>&1 &
DIRECT_PID=$!; PIDS+=("$DIRECT_PID")
"$WIREFOLD" serve --link --tls-self-signed --listen "127.0.0.1:$P_LINK" \
    --admin "127.0.0.1:$P_LINK_ADMIN" --data-dir "$TMP/link" --config "$TMP/link.toml" \
    >"$TMP/link.log" 2>&1 &
LINK_PID=$!; PIDS+=("$LINK_PID")
wait_http "wirefold serve --origin" "$DIRECT_PID" "http://127.0.0.1:$P_DIRECT_ADMIN/healthz"
wait_http "wirefold serve --link" "$LINK_PID" "http://127.0.0.1:$P_LINK_ADMIN/healthz"
[[ -s $TMP/link/self-signed-cert.pem ]] || die "no $TMP/link/self-signed-cert.pem"
"$WIREFOLD" client --upstream "https://localhost:$P_LINK" --upstream-connect "127.0.0.1:$P_LINK" \
    --upstream-ca "$TMP/link/self-signed-cert.pem" --listen "127.0.0.1:$P_CLIENT" \
    --admin "127.0.0.1:$P_CLIENT_ADMIN" --data-dir "$TMP/client" --config "$TMP/client.toml" \
    >"$TMP/client.log" 2>&1 &
CLIENT_PID=$!; PIDS+=("$CLIENT_PID")
wait_http "wirefold client" "$CLIENT_PID" "http://127.0.0.1:$P_CLIENT_ADMIN/healthz"
log "origin :$P_ORIGIN, serve --origin :$P_DIRECT (pid $DIRECT_PID), serve --link :$P_LINK (pid $LINK_PID), client :$P_CLIENT (pid $CLIENT_PID)"

# ---------------------------------------------------------------- the run
log "driving for $MINUTES min with ${CONNECTIONS:-64} connections; results in $RESULTS"
rc=0
"$SOAK" drive --duration "${MINUTES}m" \
    --direct "127.0.0.1:$P_DIRECT" \
    --pair-proxy "127.0.0.1:$P_CLIENT" --pair-origin "127.0.0.1:$P_ORIGIN" \
    --connections "${CONNECTIONS:-64}" --pair-share "${PAIR_SHARE:-0.375}" \
    --hostile-share "${HOSTILE_SHARE:-0.05}" \
    --watch "serve=$DIRECT_PID" --watch "link=$LINK_PID" --watch "client=$CLIENT_PID" \
    --results "$RESULTS" >"$TMP/drive.out" || rc=$?

for name in origin direct link client; do
    tail -n 200 "$TMP/$name.log" >"$RESULTS/$name.log.tail"
    log "$name.log: $(grep -c 'WARN' "$TMP/$name.log" || true) warnings, $(grep -c 'ERROR' "$TMP/$name.log" || true) errors"
done
[[ -s $TMP/drive.out ]] || die "the driver printed nothing (exit $rc)"
tail -n 1 "$TMP/drive.out" >"$RESULTS/last-line.json"
tail -n 1 "$TMP/drive.out"
exit "$rc"
