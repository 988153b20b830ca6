# bench/lib.sh — what the benchmark scripts share, sourced after they set `HERE`:
# logging, a temp dir and the processes started into `PIDS` (all stopped and removed
# on any exit; KEEP_TMP=1 keeps the dir), free loopback ports, waiting for HTTP.

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# bench_temp NAME: makes $TMP (NAME.XXXXXX under $TMPDIR or /tmp) and arms the cleanup.
bench_temp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM HUP
    trap 'exit 141' PIPE
}

bench_cleanup() {
    local rc=$?
    trap '' PIPE INT TERM HUP
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}

USED_PORTS=" "
# Listening ports come from below the kernel's ephemeral range (when it leaves room),
# so that no client socket (wrk's, the loader's 10,000) holds one when a server starts.
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
if ((EPHEMERAL_LOW > 11000)); then PORT_LOW=10000; PORT_SPAN=$((EPHEMERAL_LOW - 10000)); else PORT_LOW=20000; PORT_SPAN=30000; fi
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((PORT_LOW + RANDOM % PORT_SPAN))
        [[ "$USED_PORTS" == *" $p "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            USED_PORTS+="$p "
            echo "$p"
            return 0
        fi
    done
    die "no free port found"
}

wait_http() { # NAME PID URL (https: any certificate)
    local name=$1 pid=$2 url=$3
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || die "$name exited at start; see its log in $TMP (set KEEP_TMP=1)"
        curl -sk -o /dev/null --max-time 1 "$url" && return 0
        sleep 0.1
    done
    die "$name did not answer at $url"
}
