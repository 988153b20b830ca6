#!/usr/bin/env bash
# bench/inline.sh — page load time with and without inline-download hints
# (`Link: rel=preload` and 103 Early Hints, `[hints] enabled`), Chromium over HTTP/2
# with TLS behind `wirefold lab link`, an origin that thinks before each page.
#
# Usage: bench/inline.sh [PAGE_DIR]     (needs root: `wirefold lab link`; chromium, python3, openssl)
#   PAGE_DIR      an index.html and the files it references (default: a page built from
#                 corpus material: the body of a 26 KB corpus page, 3 corpus stylesheets, 3 corpus
#                 scripts, a font, 3 images)
#   WIREFOLD=PATH a wirefold binary to use (default: cargo build --release --locked)
#   LOADS=N       loads per cell (default 10); THINK="0 200 1000" (ms); RATE=10mbit; DELAY=50ms (one way)
#   HINTS_CONFIG  more `[hints]` lines for the hints arm (e.g. "early_hints = false")
#   CONFIG        more config lines for both arms, sections included (e.g. $'[http2]\nprioritize = false')
#
# Two servers run side by side from one binary and one origin, differing only in
# `hints.enabled`; in each cell, each is first asked for the page from behind the link,
# by the name the browser uses (a manifest belongs to the page's URL, host included).
# Each load is a fresh Chromium profile (cold cache); loads of the two arms alternate.
# Both servers keep a JSON access log; after each cell the bench counts, per load, the
# requests that reached the server before the page's head went out: Chromium acting
# on the 103 (the hints arm), or nothing (the other), with the link's timing.
# The page's own script records `loadEventEnd - startTime` (navigation timing) into
# the title, read back with --dump-dom. The last line is JSON:
# {"chromium": {"0": {"hints": MS, "none": MS}, "200": {…}, "1000": {…}}, "pair": {"push": MS, "none": MS}}
# (medians; "pair" is bench/inline-pair.sh's: the proxy pair with and without push).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
source "$HERE/lib.sh"
source "$HERE/inline-page.sh"
bench_temp inline

[[ $(id -u) == 0 ]] || die "needs root: wirefold lab link creates network namespaces"
for tool in chromium python3 openssl; do command -v "$tool" >/dev/null || die "needs $tool"; done
LOADS=${LOADS:-10}
THINK=${THINK:-"0 200 1000"}
RATE=${RATE:-10mbit}
DELAY=${DELAY:-50ms}

if [[ -z "${WIREFOLD:-}" ]]; then
  (cd "$REPO" && cargo build --release --locked -p wirefold) >&2
  WIREFOLD=${CARGO_TARGET_DIR:-$REPO/target}/release/wirefold
fi
WIREFOLD=$(cd "$(dirname "$WIREFOLD")" && pwd)/$(basename "$WIREFOLD")

PAGE_DIR=${1:-}
if [[ -z "$PAGE_DIR" ]]; then
  PAGE_DIR=$TMP/page
  build_inline_page "$PAGE_DIR" "$REPO/../shared/corpus"
fi
[[ -f "$PAGE_DIR/index.html" ]] || die "$PAGE_DIR has no index.html"

# The origin: PAGE_DIR, the page after THINK ms, with a script that records the load.
ORIGIN_PORT=$(free_port)
write_inline_origin "$TMP/origin.py"
echo 0 > "$TMP/think"
python3 "$TMP/origin.py" "$PAGE_DIR" "$ORIGIN_PORT" "$TMP/think" & PIDS+=($!)
wait_http origin "${PIDS[-1]}" "http://127.0.0.1:$ORIGIN_PORT/index.html"

declare -A PORT
for arm in hints none; do
  PORT[$arm]=$(free_port)
  enabled=true; [[ $arm == none ]] && enabled=false
  printf '[log]\naccess = "%s"\naccess_format = "json"\n[hints]\nenabled = %s\n' \
    "$TMP/$arm-access.jsonl" "$enabled" > "$TMP/$arm.toml"
  [[ $arm == hints ]] && printf '%s\n' "${HINTS_CONFIG:-}" >> "$TMP/$arm.toml"
  printf '%s\n' "${CONFIG:-}" >> "$TMP/$arm.toml"
  "$WIREFOLD" serve --origin "http://127.0.0.1:$ORIGIN_PORT" --listen "0.0.0.0:${PORT[$arm]}" \
    --admin "127.0.0.1:$(free_port)" --data-dir "$TMP/$arm" --config "$TMP/$arm.toml" \
    --tls-self-signed >"$TMP/$arm.log" 2>&1 & PIDS+=($!)
  wait_http "wirefold ($arm)" "${PIDS[-1]}" "https://127.0.0.1:${PORT[$arm]}/index.html"
done
SPKI=$(openssl x509 -in "$TMP/hints/self-signed-cert.pem" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)
SPKI_NONE=$(openssl x509 -in "$TMP/none/self-signed-cert.pem" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)

# One cell: LOADS alternating loads per arm behind the link; prints "arm ms" lines.
cat > "$TMP/loads.sh" <<'SH'
set -u
for port in "$PORT_HINTS" "$PORT_NONE"; do
  curl -sk -o /dev/null -H 'accept: text/html' "https://$WIREFOLD_LINK_HOST:$port/index.html"
done
for i in $(seq "$LOADS"); do
  for arm in hints none; do
    port=$([ "$arm" = hints ] && echo "$PORT_HINTS" || echo "$PORT_NONE")
    profile=$(mktemp -d "$TMP/profile.XXXXXX")
    title=$(timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
      --disable-background-networking --disable-component-update --disable-sync \
      --user-data-dir="$profile" --ignore-certificate-errors-spki-list="$SPKI,$SPKI_NONE" \
      --dump-dom "https://$WIREFOLD_LINK_HOST:$port/index.html" 2>/dev/null \
      | grep -o '<title>LOAD [0-9]*</title>' | grep -o '[0-9]*')
    rm -rf "$profile"
    echo "$arm ${title:-fail}"
  done
done
SH
# Per load (a browser's connection, after the warm-up request): the requests that
# arrived before the page's head went out (the page's arrival plus its origin wait).
cat > "$TMP/early.py" <<'PY'
import json, statistics, sys
def arrival(record):  # seconds into the day, from "…THH:MM:SS.mmmZ"
    h, m, s = record["time"][11:-1].split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)
loads = {}
for line in open(sys.argv[1]):
    record = json.loads(line)
    loads.setdefault((record["client"], record["client_port"]), []).append(record)
early, most = [], 0
for requests in loads.values():
    page = next((r for r in requests if r["target"].endswith("/index.html")), None)
    assets = [r for r in requests if r is not page]
    if page is None or not assets:
        continue  # the warm-up: a page alone
    head_out = arrival(page) + (page["origin_seconds"] or 0)
    early.append(sum(arrival(r) < head_out for r in assets))
    most = max(most, len(assets))
if early:
    print(f"{len(early)} loads; requests before the page's head: median {statistics.median(early)}, "
          f"min {min(early)}, max {max(early)} (of up to {most} subresources)")
else:
    print("no loads logged")
PY
export LOADS TMP SPKI SPKI_NONE PORT_HINTS=${PORT[hints]} PORT_NONE=${PORT[none]}
median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "null"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
json='{"chromium": {'
sep=""
for think in $THINK; do
  echo "$think" > "$TMP/think"
  for arm in hints none; do : > "$TMP/$arm-access.jsonl"; done
  log "think $think ms: $LOADS loads per arm over $RATE, $DELAY each way"
  "$WIREFOLD" lab link --rate "$RATE" --delay "$DELAY" -- sh "$TMP/loads.sh" > "$TMP/cell-$think.txt" 2>"$TMP/link-$think.log" \
    || die "lab link failed: $(tail -3 "$TMP/link-$think.log")"
  fails=$(grep -c ' fail$' "$TMP/cell-$think.txt" || true)
  ((fails == 0)) || log "think $think ms: $fails loads without a load time"
  hints=$(awk '$1=="hints" && $2!="fail" {print $2}' "$TMP/cell-$think.txt" | median)
  none=$(awk '$1=="none" && $2!="fail" {print $2}' "$TMP/cell-$think.txt" | median)
  log "think $think ms: median loadEventEnd hints $hints ms, none $none ms"
  sleep 1 # the access logs reach their files within one batch interval
  for arm in hints none; do
    log "think $think ms, $arm: $(python3 "$TMP/early.py" "$TMP/$arm-access.jsonl")"
  done
  json+="$sep\"$think\": {\"hints\": $hints, \"none\": $none}"
  sep=", "
done
# The proxy pair, with and without push into the client proxy: bench/inline-pair.sh.
pair=$(WIREFOLD=$WIREFOLD BROWSE=0 "$HERE/inline-pair.sh" "$PAGE_DIR" | tail -1) || pair=null
json+="}, \"pair\": ${pair:-null}}"
echo "$json"
