#!/usr/bin/env bash
# redis-clients.sh — Redis clients for the shared store tier measured against each
# other (issue 15): redis-rs blocking with shared.rs's pool, redis-rs async
# (MultiplexedConnection, cluster-async) and fred's pool, on one redis-server and on a
# 3-master Redis Cluster, all on loopback.
#
# Usage: bench/redis-clients.sh [-h]
#
# Environment (all optional):
#   CARGO_TARGET_DIR   where the benchmark crate builds (default /work/target-redis-bench,
#                      outside the checkout); built once with -j1, reused after
#   DURATION=5         measured seconds per cell (after 0.5 s of warm-up)
#   REPEATS=3          runs per cell; the medians are reported
#   CONCURRENCY="1 16 64"   simulated requests in flight
#   BLOBS="150000 1200000"  blob sizes read per request (1 key; 3 keys)
#   TOPOLOGIES="server cluster"
#   FRED_POOL=4        fred's pool size (clients, each multiplexed)
#   CLIENTS="redis-blocking:pool redis-async:block_on redis-async:async fred:block_on fred:async"
#                      client:mode pairs; redis-blocking:pool64 is shared.rs's pool
#                      keeping up to 64 idle connections instead of 16
#   KEEP_TMP=1         keep the temp dir (server logs, every cell's JSON line)
#
# A simulated request is one revalidation's store work in shared.rs, as three store
# calls: GET of a ~2 KB record; SET of it, then ZADD and ZREMRANGEBYRANK on its group
# index; MGET of a blob's head and chunks (512 KiB chunks, one hash tag). Clients and
# calling modes: redis-blocking/pool (each store call in spawn_blocking, a connection
# checked out of a pool of up to 16 idle per call, as shared.rs), redis-async and fred
# in mode block_on (each store call in spawn_blocking, the future driven by
# Handle::block_on: an async client under the store's blocking interface) and in mode
# async (awaited in the task: a store made async). The tokio runtime has 2 workers.
#
# Each cell is its own process, bounded by `timeout`; repeats are interleaved (all
# cells once, then again) so slow drift in the machine's load spreads over every cell.
# Output: a table on stderr, then one JSON line last on stdout with the medians per
# topology/blob/client/mode/concurrency: ops/s (simulated requests/s), p50 and p99
# latency in µs, client-process CPU µs per request (getrusage deltas), Redis servers'
# CPU µs per request (/proc/PID/stat deltas), errors, and the load averages seen.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
if [[ "${1:-}" == "-h" ]]; then sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi

DURATION=${DURATION:-5}
REPEATS=${REPEATS:-3}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
BLOBS=${BLOBS:-"150000 1200000"}
TOPOLOGIES=${TOPOLOGIES:-"server cluster"}
FRED_POOL=${FRED_POOL:-4}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-redis-bench}
CLIENTS_LIST=${CLIENTS:-"redis-blocking:pool redis-async:block_on redis-async:async fred:block_on fred:async"}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    log "apt-get install redis-server"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server redis-tools >&2
fi
command -v python3 >/dev/null || die "python3 is needed for the summary"

log "building the benchmark crate (target $CARGO_TARGET_DIR)"
cargo build --release -j1 --locked --manifest-path "$HERE/redis-clients/Cargo.toml" >&2
BIN=$CARGO_TARGET_DIR/release/redis-clients-bench

bench_temp redis-clients

# A listening port whose cluster bus port (+10000) is free too.
redis_port() {
    local p
    for _ in $(seq 50); do
        p=$(free_port)
        ((p + 10000 < 65536)) || continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then echo "$p"; return 0; fi
    done
    die "no free port pair found"
}

start_redis() { # NAME PORT [ARGS...]
    local name=$1 port=$2
    shift 2
    mkdir -p "$TMP/$name"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$TMP/$name" --save "" --appendonly no \
        --maxmemory 512mb --maxmemory-policy allkeys-lru --logfile "$TMP/$name/redis.log" "$@" &
    PIDS+=($!)
    LAST_PID=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    die "redis-server $name did not answer on port $port"
}

# ---------------------------------------------------------------- servers
declare -A NODES SERVER_PIDS
if [[ " $TOPOLOGIES " == *" server "* ]]; then
    port=$(redis_port)
    start_redis server "$port"
    NODES[server]="127.0.0.1:$port"
    SERVER_PIDS[server]=$LAST_PID
fi
if [[ " $TOPOLOGIES " == *" cluster "* ]]; then
    nodes=() pids=()
    for i in 1 2 3; do
        port=$(redis_port)
        start_redis "node$i" "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 5000
        nodes+=("127.0.0.1:$port")
        pids+=("$LAST_PID")
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$TMP/cluster-create.log" 2>&1 ||
        die "cluster create failed: $(tail -3 "$TMP/cluster-create.log")"
    for node in "${nodes[@]}"; do
        for _ in $(seq 100); do
            redis-cli -p "${node#*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
            sleep 0.1
        done
        redis-cli -p "${node#*:}" cluster info | grep -q '^cluster_state:ok' || die "cluster not ok at $node"
    done
    NODES[cluster]=$(IFS=,; echo "${nodes[*]}")
    SERVER_PIDS[cluster]=$(IFS=,; echo "${pids[*]}")
fi
for topology in $TOPOLOGIES; do
    timeout 60 "$BIN" --setup --topology "$topology" --nodes "${NODES[$topology]}" >&2
done

# ---------------------------------------------------------------- cells
LOADS=()
load() { LOADS+=("$(awk '{print $1}' /proc/loadavg)"); }
cells=0
for rep in $(seq "$REPEATS"); do
    load
    log "repeat $rep of $REPEATS (load average ${LOADS[-1]})"
    for topology in $TOPOLOGIES; do
        for blob in $BLOBS; do
            for conc in $CONCURRENCY; do
                for cm in $CLIENTS_LIST; do
                    client=${cm%%:*} mode=${cm#*:}
                    if ! timeout $((DURATION + 30)) "$BIN" --topology "$topology" --nodes "${NODES[$topology]}" \
                        --server-pids "${SERVER_PIDS[$topology]}" --client "$client" --mode "$mode" \
                        --concurrency "$conc" --blob-bytes "$blob" --seconds "$DURATION" \
                        --fred-pool "$FRED_POOL" >>"$TMP/cells.jsonl" 2>>"$TMP/cells.err"; then
                        log "cell $topology $blob $client/$mode c=$conc failed or timed out"
                        echo "{\"topology\":\"$topology\",\"client\":\"$client\",\"mode\":\"$mode\",\"concurrency\":$conc,\"blob_bytes\":$blob,\"failed\":true}" >>"$TMP/cells.jsonl"
                    fi
                    cells=$((cells + 1))
                done
            done
        done
    done
done
load
[[ -s "$TMP/cells.err" ]] && log "client errors (first lines): $(sort "$TMP/cells.err" | uniq -c | sort -rn | head -5 | tr '\n' ';')"

# ---------------------------------------------------------------- summary
LOADS_CSV=$(IFS=,; echo "${LOADS[*]}") python3 - "$TMP/cells.jsonl" "$DURATION" "$REPEATS" "$FRED_POOL" <<'PY'
import json, os, statistics, sys
path, duration, repeats, fred_pool = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if l.strip()]
groups = {}
for r in rows:
    k = (r["topology"], r["blob_bytes"], r["client"], r["mode"], r["concurrency"])
    groups.setdefault(k, []).append(r)
order = {"redis-blocking/pool": 0, "redis-blocking/pool64": 1, "redis-async/block_on": 2, "redis-async/async": 3, "fred/block_on": 4, "fred/async": 5}
cells = []
for k in sorted(groups, key=lambda k: (k[0] != "server", k[1], k[4], order[k[2] + "/" + k[3]])):
    ok = [r for r in groups[k] if not r.get("failed")]
    med = lambda f: round(statistics.median([r[f] for r in ok]), 1) if ok else None
    cells.append({
        "topology": k[0], "blob_bytes": k[1], "client": k[2], "mode": k[3], "concurrency": k[4],
        "ops_per_s": med("ops_per_s"), "p50_us": med("p50_us"), "p99_us": med("p99_us"),
        "cpu_us_per_req": med("cpu_us_per_req"), "server_cpu_us_per_req": med("server_cpu_us_per_req"),
        "errors": sum(r.get("errors", 0) for r in ok), "runs": len(ok), "failed_runs": len(groups[k]) - len(ok),
        "connects_max": max((r["connects"] for r in ok), default=None),
    })
out = sys.stderr
print(f"{'topology':8} {'blob':>8} {'client/mode':22} {'c':>3} {'ops/s':>9} {'p50 us':>8} {'p99 us':>8} {'cpu us/req':>10} {'srv us/req':>10} {'err':>4} {'conns':>5}", file=out)
for c in cells:
    print(f"{c['topology']:8} {c['blob_bytes']:>8} {c['client'] + '/' + c['mode']:22} {c['concurrency']:>3} "
          f"{c['ops_per_s']!s:>9} {c['p50_us']!s:>8} {c['p99_us']!s:>8} {c['cpu_us_per_req']!s:>10} "
          f"{c['server_cpu_us_per_req']!s:>10} {c['errors']:>4} {c['connects_max']!s:>5}", file=out)
print(json.dumps({"bench": "redis-clients", "duration_s": duration, "repeats": repeats, "fred_pool": fred_pool,
                  "load_averages": [float(x) for x in os.environ["LOADS_CSV"].split(",")], "cells": cells},
                 separators=(",", ":")))
PY
