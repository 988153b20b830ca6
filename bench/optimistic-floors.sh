#!/usr/bin/env bash
# Usage: bench/optimistic-floors.sh [CORPUS_DIR] [MAX_AVG_BYTES]
#
# How far the optimistic pair could get at best, per corpus series, on the modem
# profile with a 5 s origin delay (bench/optimistic.sh's optimistic_5s), without
# running a link: for choosing series before a 30-minute bench, and for knowing
# what the 0.6 target asks of the pages (docs/optimistic-bench.md).
#
# Per series, the versions bench/optimistic.sh replays (at most 10, evenly spaced),
# and per measured page k:
#   floor = (max(5 s + RTT, T(k-1)) + delta(k-1 → k) / payload rate) / (5 s + T(k))
# T(v) is the direct fetch without delay, modelled as 0.37 s + br-11 size / 3380 B/s
# (fitted to the measured modem baselines: 2.5 s for 7.2 KB, 6.7 s for 21.6 KB);
# delta is zstd's own (-19 --patch-from); the payload rate is 28.8 kbit/s × 1448/1500.
# Series whose pages average over MAX_AVG_BYTES (default 230000) are skipped: a
# modem takes minutes per page there.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CORPUS=${1:-$REPO/../shared/corpus/html}
MAX_AVG=${2:-230000}
VERSIONS=10
for tool in brotli zstd awk; do
  command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done

printf '%-55s %8s %8s %8s\n' series "br (KB)" "page (s)" floor
find "$CORPUS" -type f -name '001.*' -printf '%h\n' | sort | while read -r dir; do
  mapfile -t files < <(find "$dir" -maxdepth 1 -type f -name '[0-9]*' -printf '%f\n' | sort -n)
  n=${#files[@]}
  ((n >= 2)) || continue
  total=0
  for f in "${files[@]}"; do total=$((total + $(stat -c %s "$dir/$f"))); done
  ((total / n <= MAX_AVG)) || continue
  count=$((n < VERSIONS ? n : VERSIONS))
  prev=
  for ((k = 0; k < count; k++)); do
    index=$(( n <= VERSIONS ? k : (k * (n - 1) + (VERSIONS - 1) / 2) / (VERSIONS - 1) ))
    file=$dir/${files[index]}
    br=$(brotli -q 11 -c "$file" | wc -c)
    delta=0
    if [[ -n $prev ]]; then
      # -qq: zstd 1.5 prints tuning notes for --patch-from even with -q.
      delta=$(zstd -19 -qq -c --single-thread --patch-from="$prev" "$file" | wc -c) ||
        { echo "zstd could not make a delta of $file" >&2; exit 1; }
    fi
    echo "$br $delta"
    prev=$file
  done | awk -v name="${dir#"$CORPUS"/}" '
    function t(size) { return 0.37 + size / 3380 }
    function max(a, b) { return a > b ? a : b }
    NR > 1 { floor += (max(5.32, t(prev)) + $2 / (28800 / 8 * 1448 / 1500)) / (5 + t($1)); page += t($1); m++ }
    { brs += $1; prev = $1 }
    END { printf "%-55s %8.1f %8.1f %8.3f\n", name, brs / NR / 1000, page / m, floor / m }'
done
