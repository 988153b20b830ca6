#!/usr/bin/env bash
# bombs.sh — wirefold's memory under decompression bombs, on loopback.
#
# Usage: bench/bombs.sh [-h]
#
# Environment (all optional):
#   WIREFOLD=PATH    the wirefold binary to measure (default: cargo build --release -p wirefold)
#   BASELINE=PATH    a second binary measured the same way right after (e.g. a build of main)
#   BOMBS=16         concurrent requests, each for its own URL (no coalescing)
#   LIMITS="..."     extra [limits] lines for WIREFOLD's config (not BASELINE's), e.g.
#                    LIMITS="max_decoding_memory = 16777216"
#   KEEP_TMP=1       keep the temp dir (logs) for inspection
#
# A python3 origin serves a 1 GB run of zeros as a ~1 MB gzip body (`gzip -9`,
# `Content-Encoding: gzip`), and, for the streamed case, ten of those members
# concatenated (~10 MB, past limits.max_buffered_body, so it streams).
# Each binary gets a fresh process per scenario:
#   bombs   BOMBS concurrent identity curls of /bomb/N (buffered decodes)
#   slow    one identity curl of /stream at 2 MB/s for 8 s (a streamed decode for a
#           slow client)
# Idle RSS is VmRSS after start; peak is VmHWM once the requests are done (the
# process's high-water mark, sampled from /proc). Output: one line per binary and
# scenario: idle, peak, peak above idle (MB = 10^6 bytes), the statuses, bytes received,
# and wirefold_decode_memory_peak_bytes where the binary has it.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -gt 0 ]] && { echo "bombs.sh takes no arguments (see -h); got: $*" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BOMBS=${BOMBS:-16}

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
for tool in curl python3 gzip; do command -v "$tool" >/dev/null || die "$tool is needed"; done

if [[ -z "${WIREFOLD:-}" ]]; then
    log "building the release binary"
    (cd "$REPO" && cargo build --release -p wirefold >&2)
    WIREFOLD=$REPO/target/release/wirefold
fi
[[ -x "$WIREFOLD" ]] || die "no wirefold binary at $WIREFOLD"

bench_temp bombs


stop() { # PID: one process this script started
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# ---------------------------------------------------------------- the bodies and origin
log "making the bombs (1 GB of zeros, gzip -9)"
head -c 1000000000 /dev/zero | gzip -9 -c >"$TMP/bomb.gz"
for _ in $(seq 10); do cat "$TMP/bomb.gz"; done >"$TMP/stream.gz"
log "bomb: $(stat -c %s "$TMP/bomb.gz") bytes; stream: $(stat -c %s "$TMP/stream.gz") bytes"

cat >"$TMP/origin.py" <<'EOF'
import http.server, sys
bodies = {"bomb": open(sys.argv[2] + "/bomb.gz", "rb").read(),
          "stream": open(sys.argv[2] + "/stream.gz", "rb").read()}
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = bodies["stream" if self.path.startswith("/stream") else "bomb"]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF
P_ORIGIN=$(free_port)
python3 "$TMP/origin.py" "$P_ORIGIN" "$TMP" >"$TMP/origin.log" 2>&1 &
PIDS+=($!)
wait_http origin "$!" "http://127.0.0.1:$P_ORIGIN/ready"

# ---------------------------------------------------------------- one measurement
kb() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$2/status"; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1000 }'; }

printf '[limits]\n%s\n' "${LIMITS:-}" >"$TMP/wirefold.toml"
: >"$TMP/baseline.toml"

measure() { # LABEL BINARY SCENARIO
    local label=$1 binary=$2 scenario=$3 port admin pid idle peak
    port=$(free_port); admin=$(free_port)
    WIREFOLD_LOG=error "$binary" serve --origin "http://127.0.0.1:$P_ORIGIN" \
        --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" --config "$TMP/$label.toml" \
        --data-dir "$TMP/data-$label-$scenario" >"$TMP/$label-$scenario.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_http "$label" "$pid" "http://127.0.0.1:$admin/healthz"
    sleep 1
    idle=$(kb VmRSS "$pid")
    local out="$TMP/$label-$scenario.out"
    : >"$out"
    case "$scenario" in
        bombs)
            local curls=()
            for i in $(seq "$BOMBS"); do
                curl -s -o /dev/null -w '%{http_code} %{size_download}\n' --max-time 300 \
                    "http://127.0.0.1:$port/bomb/$i" >>"$out" &
                curls+=($!)
            done
            for c in "${curls[@]}"; do wait "$c" || true; done
            ;;
        slow)
            curl -s -o /dev/null -w '%{http_code} %{size_download}\n' --limit-rate 2M \
                --max-time 8 "http://127.0.0.1:$port/stream/1" >>"$out" || true
            ;;
    esac
    peak=$(kb VmHWM "$pid")
    local statuses received budget_peak
    budget_peak=$(curl -s "http://127.0.0.1:$admin/metrics" \
        | awk '$1 == "wirefold_decode_memory_peak_bytes" { printf "%.1f MB", $2 / 1e6 }')
    statuses=$(awk '{ print $1 }' "$out" | sort | uniq -c | awk '{ printf "%s%sx%s", sep, $1, $2; sep = " " }')
    received=$(awk '{ s += $2 } END { printf "%.1f", s / 1e6 }' "$out")
    printf '%-9s %-6s idle %7s MB  peak %7s MB  above idle %7s MB  statuses %s  received %s MB  decode budget peak %s\n' \
        "$label" "$scenario" "$(mb "$idle")" "$(mb "$peak")" "$(mb $((peak - idle)))" \
        "${statuses:-none}" "$received" "${budget_peak:-n/a}"
    stop "$pid"
}

echo "# bench/bombs.sh: $BOMBS concurrent 1 GB gzip bombs ($(stat -c %s "$TMP/bomb.gz") bytes each), and a slow client of a streamed 10 GB one"
for scenario in bombs slow; do
    measure wirefold "$WIREFOLD" "$scenario"
    if [[ -n "${BASELINE:-}" ]]; then measure baseline "$BASELINE" "$scenario"; fi
done
