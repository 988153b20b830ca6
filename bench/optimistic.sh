#!/usr/bin/env bash
# optimistic.sh — the proxy pair (simple and optimistic deltas) against a direct fetch
# with ordinary compression, over an emulated slow link (docs/optimistic-bench.md).
#
# Usage: bench/optimistic.sh [CORPUS_DIR]     (needs root: `wirefold lab link`)
#
# CORPUS_DIR: version series folders (default: <repo>/../shared/corpus/html).
# Environment (all optional):
#   SERIES="a/b c/d"  series folders below CORPUS_DIR; `all` = every series there
#   WIREFOLD=PATH     a wirefold binary to use (default: cargo build --release --locked)
#   PROFILES="modem mobile"   which link profiles to run
#   DELAYS="0 5"      origin delays in seconds (a quick A/B: DELAYS=0 PROFILES=mobile)
#   KEEP_TMP=1        keep the temp dir (logs, bodies, data dirs) for inspection
#
# As in Banga, Douglis & Rabinovich 1997 (Figure 8), `wirefold lab series-origin` returns the next
# version of a page on every GET, 10 versions per series at most. Per link profile
# (modem: 28.8kbit, 160 ms one way; mobile: 1.6mbit, 75 ms) and origin delay (0 s, 5 s):
#   baseline       curl --compressed straight to the origin through the link (br 11)
#   simple_Ns      curl -> client proxy (keeps the versions it served) -> link -> server proxy -> origin
#   optimistic_Ns  the same with `wirefold client --keep-instances 0` (it holds none)
# Each configuration gets a fresh origin (versions start at 1) and fresh proxies. All GETs
# of a series go through one curl process, one kept-alive connection, like the pair's
# warm link. GET 1 of a series is warm-up (it fills the proxies); GETs 2..N are measured,
# and each page's ratio is pair time / baseline time of the same GET at the same delay.
# Every body must be the expected version (status 200, SHA-256 of the file): anything
# else stops the run. The two profiles run at once, each behind its own link.
#
# Default selection: the smallest HTML series (by compressed size) of each of the three
# corpus repos with the smallest pages:
# google htmlcssguide (~7 KB br per page), w3c/aria accname (~8 KB), httpwg rfc6265
# (~22 KB). At 28.8 kbit/s a page takes 2.6, 2.9 and 6.7 s (measured), each 5 s
# configuration adds 50 s per series, and the modem runs 6 configurations of 10 GETs:
# ~16 min expected, ~20 min if the pair gained nothing (every configuration as slow as
# its baseline), against a budget of 30 min on a 2-core machine shared with builds.
# A fourth series would add 5-9 min (w3c/manifest's index: 6.8 s a page), one of
# webappsec-csp's (~50 KB br a page) 10-18 min. SERIES=all takes hours on the modem.
#
# Output: per profile and configuration a table (baseline: seconds per page; pair: ratio
# pair/baseline, mean, median, max, pages, and the floor: the best mean ratio a correct
# pair could reach, docs/optimistic-bench.md), per-page rows in bench/results/, and,
# when the pair ran, a last line of JSON:
#   {"profiles": {"modem": {"simple_0s": {"mean", "median", "max", "pages", "floor"},
#    "simple_5s", "optimistic_0s", "optimistic_5s"}, "mobile": {...}}}
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Polls until PORT on 127.0.0.1 accepts connections, while PID lives (at most a minute).
wait_port() {
  local pid=$1 port=$2 tries=0
  until (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 1
    ((++tries < 600)) || return 1
    sleep 0.1
  done
}

# ------------------------------------------------------------- inside the link
# __inside MODE OUT PATHS_FILE ORIGIN_PORT N [SP SD CD CP KEEP]: one curl process per
# series, N GETs each; writes OUT/<series index>/<GET>.body and OUT/<series index>/times.
if [[ "${1:-}" == "__inside" ]]; then
  mode=$2 out=$3 paths=$4 origin_port=$5 n=$6
  proxy=()
  if [[ $mode == pair ]]; then
    sp=$7 sd=$8 cd=$9 cp=${10} keep=${11}
    extra=()
    if [[ $keep == 0 ]]; then extra=(--keep-instances 0); fi
    "$WIREFOLD" client --upstream "https://localhost:$sp" \
      --upstream-connect "$WIREFOLD_LINK_HOST:$sp" --upstream-ca "$sd/self-signed-cert.pem" \
      --listen "127.0.0.1:$cp" --admin 127.0.0.1:0 --data-dir "$cd" --link-token "$LINK_TOKEN" "${extra[@]}" \
      >"$out/client.log" 2>&1 &
    client=$!
    trap 'kill "$client" 2>/dev/null || true' EXIT
    wait_port "$client" "$cp" || { cat "$out/client.log" >&2; die "client proxy did not start"; }
    # `lab link` puts the host in no_proxy; the proxy is local, so override it.
    proxy=(-x "http://127.0.0.1:$cp" --noproxy '')
  fi
  i=0
  while read -r path; do
    i=$((i + 1))
    mkdir -p "$out/$i"
    args=()
    for ((k = 1; k <= n; k++)); do
      args+=(-o "$out/$i/$k.body" "http://$WIREFOLD_LINK_HOST:$origin_port$path")
    done
    curl -s -S --compressed --max-time 600 "${proxy[@]}" \
      -w '%{http_code} %{time_total} %{size_download}\n' "${args[@]}" >"$out/$i/times"
  done <"$paths"
  exit 0
fi

[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -le 1 ]] || { echo "optimistic.sh takes at most one argument, CORPUS_DIR (see -h); got: $*" >&2; exit 2; }

START_TS=$(date +%s)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
CORPUS=${1:-$REPO/../shared/corpus/html}
[[ -d $CORPUS ]] || die "no corpus folder at $CORPUS (give CORPUS_DIR)"
CORPUS=$(cd "$CORPUS" && pwd)
SERIES=${SERIES:-google__styleguide/htmlcssguide-html w3c__aria/accname_index-html httpwg__httpwg.github.io/specs_rfc6265-html}
PROFILES=${PROFILES:-modem mobile}
VERSIONS=10
read -r -a DELAYS <<<"${DELAYS:-0 5}"

[[ $(id -u) == 0 ]] || die "needs root: wirefold lab link creates network namespaces"
command -v curl >/dev/null || die "needs curl"
curl -V | grep -qw brotli || die "this curl cannot decode br (curl -V lists no brotli)"
command -v sha256sum >/dev/null || die "needs sha256sum"
command -v zstd >/dev/null || die "needs zstd (the floor column's deltas)"

if [[ -z ${WIREFOLD:-} ]]; then
  log "building wirefold (release)"
  (cd "$REPO" && cargo build --release --locked -p wirefold) >&2
  WIREFOLD=${CARGO_TARGET_DIR:-$REPO/target}/release/wirefold
fi
[[ -x $WIREFOLD ]] || die "no wirefold binary at $WIREFOLD"
WIREFOLD=$(cd "$(dirname "$WIREFOLD")" && pwd)/$(basename "$WIREFOLD")
export WIREFOLD
# The server proxy listens beyond loopback (the link), so it requires a token.
LINK_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d " \n")
export LINK_TOKEN

PAIR=1
if ! "$WIREFOLD" client --help >/dev/null 2>&1 || ! "$WIREFOLD" serve --help 2>/dev/null | grep -q -- '--link'; then
  PAIR=0
  log "THE PROXY PAIR IS NOT AVAILABLE: \`wirefold client\` or \`wirefold serve --link\` is missing from $WIREFOLD."
  log "Measuring the baseline only; no JSON line is printed."
fi

TMP=$(mktemp -d /tmp/wirefold-optimistic.XXXXXX)
# The client proxy's end of the link vanishes with its namespace: nothing to drain.
printf '[limits]\nshutdown_grace_ms = 1000\n' >"$TMP/server.toml"
PIDS_FILE=$TMP/pids
: >"$PIDS_FILE"
cleanup() {
  local pid
  # Only processes of this run: a finished one's PID may since have been reused.
  while read -r pid; do
    if grep -qaF -e "$WIREFOLD" -e "$(basename "$SELF")" "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
  done <"$PIDS_FILE"
  wait 2>/dev/null || true
  if [[ ${KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------- series and expected bodies
if [[ $SERIES == all ]]; then
  mapfile -t DIRS < <(find "$CORPUS" -type f -name '001.*' -printf '%h\n' | sort)
else
  read -r -a names <<<"$SERIES"
  DIRS=()
  for name in "${names[@]}"; do DIRS+=("$CORPUS/$name"); done
fi
((${#DIRS[@]} > 0)) || die "no series selected"
# expected/<series index>: the SHA-256 of each version the origin serves, in order: the
# same rule as series-origin (at most VERSIONS, evenly spaced, first and last included).
mkdir -p "$TMP/expected" "$TMP/versions" "$TMP/deltas"
i=0
for dir in "${DIRS[@]}"; do
  i=$((i + 1))
  [[ -d $dir ]] || die "no series folder $dir"
  mapfile -t files < <(find "$dir" -maxdepth 1 -type f -name '[0-9]*' -printf '%f\n' | sort -n)
  n=${#files[@]}
  ((n >= 2)) || die "$dir holds fewer than two numbered versions"
  count=$((n < VERSIONS ? n : VERSIONS))
  for ((k = 0; k < count; k++)); do
    index=$(( n <= VERSIONS ? k : (k * (n - 1) + (VERSIONS - 1) / 2) / (VERSIONS - 1) ))
    echo "$dir/${files[index]}"
  done >"$TMP/versions/$i"
  xargs -d '\n' sha256sum <"$TMP/versions/$i" | cut -d' ' -f1 >"$TMP/expected/$i"
  # deltas/<series index>: line k = bytes of version k as zstd's own delta against
  # version k-1 (-19 --patch-from): what a delta-based pair must carry at least.
  prev=
  while read -r file; do
    if [[ -z $prev ]]; then
      echo 0
    else
      # -qq: zstd 1.5 prints tuning notes for --patch-from even with -q.
      zstd -19 -qq -c --single-thread --patch-from="$prev" "$file" | wc -c ||
        die "zstd could not make a delta of $file"
    fi
    prev=$file
  done <"$TMP/versions/$i" >"$TMP/deltas/$i"
done
log "${#DIRS[@]} series, $VERSIONS versions at most: ${DIRS[*]#"$CORPUS"/}"

# ------------------------------------------------------------- one configuration
started() { echo "$1" >>"$PIDS_FILE"; }

# Starts a fresh origin with DELAY seconds on PORT; prints its paths into FILE.
start_origin() {
  local delay=$1 port=$2 file=$3 logf=$3.log pid tries=0
  : >"$logf"
  "$WIREFOLD" lab series-origin --listen "0.0.0.0:$port" --delay-ms $((delay * 1000)) \
    --versions "$VERSIONS" "${DIRS[@]}" >"$logf" 2>&1 &
  pid=$!
  started "$pid"
  until grep -qx ready "$logf"; do
    kill -0 "$pid" 2>/dev/null || { cat "$logf" >&2; die "series-origin on port $port exited"; }
    ((++tries < 6000)) || die "series-origin on port $port not ready after 10 min"
    sleep 0.1
  done
  grep '^http://' "$logf" | sed 's|^http://[^/]*||' >"$file"
  ORIGIN_PID=$pid
}

# run_config PROFILE RATE DELAY_ONE_WAY CONFIG ORIGIN_DELAY PORT_BASE: measures one
# configuration and appends its rows (profile config series page status seconds bytes).
run_config() {
  local profile=$1 rate=$2 one_way=$3 config=$4 delay=$5 base=$6
  local dir=$TMP/$profile/$config op=$base sp=$((base + 1)) cp=$((base + 2))
  local mode=baseline keep=1 server=
  mkdir -p "$dir/out"
  start_origin "$delay" "$op" "$dir/paths"
  local origin=$ORIGIN_PID
  local inside=(bash "$SELF" __inside baseline "$dir/out" "$dir/paths" "$op" "$VERSIONS")
  if [[ $config != baseline_* ]]; then
    mode=pair
    if [[ $config == optimistic_* ]]; then keep=0; fi
    mkdir -p "$dir/server" "$dir/client"
    "$WIREFOLD" serve --link --listen "0.0.0.0:$sp" --admin 127.0.0.1:0 \
      --data-dir "$dir/server" --tls-self-signed --link-token "$LINK_TOKEN" \
      --config "$TMP/server.toml" >"$dir/server.log" 2>&1 &
    server=$!
    started "$server"
    wait_port "$server" "$sp" || { cat "$dir/server.log" >&2; die "$profile $config: server proxy did not start"; }
    [[ -s $dir/server/self-signed-cert.pem ]] || die "$profile $config: no $dir/server/self-signed-cert.pem"
    inside=(bash "$SELF" __inside pair "$dir/out" "$dir/paths" "$op" "$VERSIONS" "$sp" "$dir/server" "$dir/client" "$cp" "$keep")
  fi
  local t0=$SECONDS
  "$WIREFOLD" lab link --rate "$rate" --delay "$one_way" -- "${inside[@]}" >"$dir/link.log" 2>&1 &
  local link=$!
  started "$link"
  wait "$link" || { cat "$dir/link.log" >&2; die "$profile $config: the measurement failed (log above)"; }
  kill "$origin" ${server:+"$server"} 2>/dev/null || true
  wait "$origin" ${server:+"$server"} 2>/dev/null || true
  # Check every body, then keep the measured GETs (2..N).
  local i=0 k status seconds bytes got want
  while read -r path; do
    i=$((i + 1))
    k=0
    while read -r status seconds bytes; do
      k=$((k + 1))
      want=$(sed -n "${k}p" "$TMP/expected/$i")
      got=$(sha256sum "$dir/out/$i/$k.body" | cut -d' ' -f1)
      [[ $status == 200 ]] || die "$profile $config $path GET $k: status $status"
      [[ $got == "$want" ]] || die "$profile $config $path GET $k: WRONG BODY (sha256 $got, expected version's $want)"
      if ((k > 1)); then
        printf '%s\t%s\t%s\t%d\t%s\t%s\t%s\n' "$profile" "$config" "$path" "$k" "$seconds" "$bytes" \
          "$(sed -n "${k}p" "$TMP/deltas/$i")"
      fi
    done <"$dir/out/$i/times"
    ((k == $(wc -l <"$TMP/expected/$i"))) || die "$profile $config $path: $k GETs answered"
  done <"$dir/paths" >>"$TMP/$profile.rows"
  log "$profile $config: $((SECONDS - t0)) s"
}

run_profile() {
  local profile=$1 rate=$2 one_way=$3 base=$4 d config n=0
  : >"$TMP/$profile.rows"
  for d in "${DELAYS[@]}"; do
    for config in baseline simple optimistic; do
      [[ $config == baseline || $PAIR == 1 ]] || continue
      n=$((n + 1))
      run_config "$profile" "$rate" "$one_way" "${config}_${d}s" "$d" $((base + 10 * n))
    done
  done
}

declare -A RATE=([modem]=28.8kbit [mobile]=1.6mbit) ONE_WAY=([modem]=160ms [mobile]=75ms) BASE=([modem]=18100 [mobile]=18300)
jobs=()
for profile in $PROFILES; do
  [[ -n ${RATE[$profile]:-} ]] || die "unknown profile $profile (modem, mobile)"
  log "$profile: --rate ${RATE[$profile]} --delay ${ONE_WAY[$profile]}"
  run_profile "$profile" "${RATE[$profile]}" "${ONE_WAY[$profile]}" "${BASE[$profile]}" &
  jobs+=($!)
  started "$!"
done
# Fail as soon as either profile fails.
while ((${#jobs[@]} > 0)); do
  wait -n -p finished "${jobs[@]}" || die "a profile failed (see above)"
  for j in "${!jobs[@]}"; do
    if [[ ${jobs[j]} == "$finished" ]]; then unset 'jobs[j]'; fi
  done
done

# ------------------------------------------------------------- report
# seconds 160ms → 0.16; bits 28.8kbit → 28800 (the profiles' own notation).
seconds() { awk -v v="$1" 'BEGIN { n = v + 0; print (v ~ /ms$/) ? n / 1000 : n }'; }
bits() {
  awk -v v="$1" 'BEGIN { n = v + 0; print (v ~ /gbit$/) ? n * 1e9 : (v ~ /mbit$/) ? n * 1e6 : (v ~ /kbit$/) ? n * 1e3 : n }'
}
mkdir -p "$REPO/bench/results"
RESULTS=$REPO/bench/results/optimistic-$(date +%Y%m%d-%H%M%S).tsv
{
  printf 'profile\tconfig\tseries\tget\tseconds\tbytes\tdelta_bytes\tbaseline_seconds\tratio\tfloor\n'
  for profile in $PROFILES; do
    # Pair rows get the baseline time of the same page and delay, their ratio, and
    # the floor: the best ratio a correct pair could reach on the page. It waits for
    # the origin and one round trip, carries zstd's delta at the link's TCP payload
    # rate (1448 of every 1500 bytes), and, holding nothing, also the stale copy (as
    # long as the direct fetch takes without delay), unless sending the page whole
    # after the origin's answer, as the direct fetch does, is faster.
    awk -F'\t' -v OFS='\t' -v one_way="$(seconds "${ONE_WAY[$profile]}")" -v rate="$(bits "${RATE[$profile]}")" '
      function max(a, b) { return a > b ? a : b }
      $2 ~ /^baseline_/ { d = substr($2, 10); base[d, $3, $4] = $5; print $0, "", "", ""; next }
      {
        d = $2; sub(/^[a-z]+_/, "", d); sub(/s$/, "", d); b = base[d "s", $3, $4]
        wait = d + 2 * one_way
        if ($2 ~ /^optimistic_/) wait = max(wait, base["0s", $3, $4])
        floor = wait + $7 / (rate / 8 * 1448 / 1500)
        if ($2 ~ /^optimistic_/ && b < floor) floor = b
        print $0, b, sprintf("%.4f", $5 / b), sprintf("%.4f", floor / b)
      }
    ' "$TMP/$profile.rows"
  done
} >"$RESULTS"

# summary PROFILE CONFIG COLUMN: "mean median max pages" of a results column.
summary() {
  awk -F'\t' -v p="$1" -v c="$2" -v col="$3" '$1 == p && $2 == c { print $col }' "$RESULTS" | sort -g |
    awk '{ v[NR] = $1; s += $1 } END {
      if (NR == 0) { print "0 0 0 0"; exit }
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.3f %.3f %.3f %d\n", s / NR, m, v[NR], NR }'
}

echo
printf '%-8s %-15s %10s %10s %10s %6s %10s\n' profile config mean median max pages floor
json=
for profile in $PROFILES; do
  pjson=
  for d in "${DELAYS[@]}"; do
    read -r mean median max pages < <(summary "$profile" "baseline_${d}s" 5)
    printf '%-8s %-15s %9.3fs %9.3fs %9.3fs %6d\n' "$profile" "baseline_${d}s" "$mean" "$median" "$max" "$pages"
  done
  if [[ $PAIR == 1 ]]; then
    for config in simple_0s simple_5s optimistic_0s optimistic_5s; do
      [[ " ${DELAYS[*]/%/s} " == *" ${config#*_} "* ]] || continue # a delay not run
      read -r mean median max pages < <(summary "$profile" "$config" 9)
      read -r floor _ < <(summary "$profile" "$config" 10)
      printf '%-8s %-15s %10.3f %10.3f %10.3f %6d %10.3f\n' "$profile" "$config" "$mean" "$median" "$max" "$pages" "$floor"
      pjson+="${pjson:+, }\"$config\": {\"mean\": $mean, \"median\": $median, \"max\": $max, \"pages\": $pages, \"floor\": $floor}"
    done
    json+="${json:+, }\"$profile\": {$pjson}"
  fi
done
echo "(baseline: seconds per page; pair configurations: pair time / baseline time per page;"
echo " floor: the mean best ratio a correct pair could reach, docs/optimistic-bench.md)"
log "per-page rows: $RESULTS; total $(($(date +%s) - START_TS)) s"
if [[ $PAIR == 1 ]]; then
  echo "{\"profiles\": {$json}}"
else
  log "no JSON: the proxy pair did not run"
fi
