#!/usr/bin/env bash
# bench/inline-pair.sh — page load through the proxy pair with and without push over
# the link (`[link] push`), headless Chromium using the client proxy as its HTTP
# proxy, behind `wirefold lab link` (issue 13, "Proxy pair"; docs/benchmarks.md).
#
# Usage: bench/inline-pair.sh [PAGE_DIR]   (needs root: `wirefold lab link`; chromium, python3, curl)
#   PAGE_DIR      an index.html and the files it references (default: bench/inline.sh's
#                 page, built from corpus material by bench/inline-page.sh)
#   WIREFOLD=PATH a wirefold binary to use (default: cargo build --release --locked)
#   LOADS=N       loads per arm (default 10); RATE=1600kbit; DELAY=75ms (one way: 150 ms RTT)
#   BROWSE=0      skip the wasted-bandwidth browse
#
# Two server proxies run side by side from one binary, differing only in `link.push`,
# both in front of one origin (bench/inline-page.sh's: pages no-cache, assets
# max-age=3600), each asked for the page once first (its cache and the page's manifest
# are warm, as for a page others have visited). Behind the link, each load starts a
# fresh client proxy (it holds nothing: a first visit), lets it make its link with one
# request, then loads the page in a fresh Chromium profile through it; loads of the
# two arms alternate. The page's own script records `loadEventEnd - startTime`.
#
# Then the browse (the paper's wasted-bandwidth figure): four corpus pages sharing
# stylesheets, scripts and a font, visited in turn through one client proxy on the
# pushing server, once announcing what it holds (`announce_held`, the default) and
# once not; the client proxy's metrics give the pushed bytes and those it already held.
#
# The last line is JSON: {"push": MS, "none": MS} (median loadEventEnd per arm);
# bench/inline.sh puts it in its "pair" field.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
source "$HERE/lib.sh"
source "$HERE/inline-page.sh"
bench_temp inline-pair

[[ $(id -u) == 0 ]] || die "needs root: wirefold lab link creates network namespaces"
for tool in chromium python3 curl; do command -v "$tool" >/dev/null || die "needs $tool"; done
LOADS=${LOADS:-10}
RATE=${RATE:-1600kbit}
DELAY=${DELAY:-75ms}
CORPUS=$REPO/../shared/corpus

if [[ -z "${WIREFOLD:-}" ]]; then
  (cd "$REPO" && cargo build --release --locked -p wirefold) >&2
  WIREFOLD=${CARGO_TARGET_DIR:-$REPO/target}/release/wirefold
fi
WIREFOLD=$(cd "$(dirname "$WIREFOLD")" && pwd)/$(basename "$WIREFOLD")

PAGE_DIR=${1:-}
if [[ -z "$PAGE_DIR" ]]; then
  PAGE_DIR=$TMP/page
  build_inline_page "$PAGE_DIR" "$CORPUS"
fi
[[ -f "$PAGE_DIR/index.html" ]] || die "$PAGE_DIR has no index.html"
# The browse's pages sit beside the page (same origin, same assets).
SITE=$TMP/site
mkdir -p "$SITE"
cp -r "$PAGE_DIR"/. "$SITE"/
if [[ ${BROWSE:-1} == 1 ]]; then
  # They use the default page's assets (PAGE_DIR may have others).
  build_inline_page "$TMP/default-page" "$CORPUS"
  for f in standard.css shared.css javaguide.css aria.js aria-old.js resolveReferences.js font.woff2 image1.jpg image2.jpg image3.jpg; do
    [[ -f "$SITE/$f" ]] || cp "$TMP/default-page/$f" "$SITE/$f"
  done
  # Four corpus pages: all share two stylesheets, a script and the font; each adds
  # its own stylesheet or script and image (as a site's pages do).
  own=("javaguide.css image1.jpg" "aria-old.js image2.jpg" "resolveReferences.js image3.jpg" "javaguide.css image2.jpg")
  rfcs=(rfc9110 rfc9111 rfc9112 rfc9113)
  for i in 0 1 2 3; do
    extra=""
    for f in ${own[$i]}; do
      case $f in
        *.css) extra+="<link rel=stylesheet href=$f>" ;;
        *.js) extra+="<script src=$f></script>" ;;
        *.jpg) extra+="<img src=$f width=300>" ;;
      esac
    done
    cat > "$SITE/p$((i + 1)).html" <<HTML
<!doctype html><html><head><meta charset=utf-8><title>page</title>
<link rel=stylesheet href=standard.css><link rel=stylesheet href=shared.css>
<link rel=preload as=font href=font.woff2 crossorigin><script src=aria.js></script>
$extra
</head>
$(inline_page_body "$CORPUS/siblings/httpwg__httpwg.github.io/${rfcs[$i]}.html")
</html>
HTML
  done
fi

ORIGIN_PORT=$(free_port)
write_inline_origin "$TMP/origin.py"
echo 0 > "$TMP/think"
python3 "$TMP/origin.py" "$SITE" "$ORIGIN_PORT" "$TMP/think" & PIDS+=($!)
wait_http origin "${PIDS[-1]}" "http://127.0.0.1:$ORIGIN_PORT/index.html"

LINK_TOKEN=bench-$RANDOM$RANDOM
declare -A PORT
for arm in push none; do
  PORT[$arm]=$(free_port)
  push=true; [[ $arm == none ]] && push=false
  # The origin is on this host's loopback.
  printf '[link]\ndestinations = "any"\npush = %s\n' "$push" > "$TMP/$arm.toml"
  "$WIREFOLD" serve --link --link-token "$LINK_TOKEN" --listen "0.0.0.0:${PORT[$arm]}" \
    --admin "127.0.0.1:$(free_port)" --data-dir "$TMP/$arm" --config "$TMP/$arm.toml" \
    --tls-self-signed >"$TMP/$arm.log" 2>&1 & PIDS+=($!)
  for _ in $(seq 100); do [[ -s $TMP/$arm/self-signed-cert.pem ]] && break; sleep 0.1; done
  [[ -s $TMP/$arm/self-signed-cert.pem ]] || die "server proxy ($arm) did not start; see $TMP/$arm.log"
done

# Inside the link: one client proxy (fresh data dir) per load or browse, warmed with
# one request over the link, then Chromium through it. Prints "arm ms" per load, and
# for the browse the client proxy's push counters.
cat > "$TMP/inside.sh" <<'SH'
set -u
# start_client ARM DATA CONFIG: a client proxy on port $CP to ARM's server proxy.
start_client() {
  port=$([ "$1" = push ] && echo "$PORT_PUSH" || echo "$PORT_NONE")
  "$WIREFOLD" client --upstream "https://localhost:$port" --upstream-connect "$WIREFOLD_LINK_HOST:$port" \
    --upstream-ca "$TMP/$1/self-signed-cert.pem" --link-token "$LINK_TOKEN" --listen "127.0.0.1:$CP" \
    --admin "127.0.0.1:$CA" --data-dir "$2" --config "$3" >>"$TMP/client.log" 2>&1 &
  client=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$CA/metrics" && break; sleep 0.1; done
  # The link is made (TCP, TLS) before the measured load, as a running pair's is.
  curl -s -o /dev/null -x "http://127.0.0.1:$CP" --noproxy '' "http://127.0.0.1:$ORIGIN_PORT/warm-up"
}
stop_client() { kill "$client"; wait "$client" 2>/dev/null; }
# chromium_load URL: the page's load time, or "fail".
chromium_load() {
  profile=$(mktemp -d "$TMP/profile.XXXXXX")
  title=$(timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --proxy-server="http://127.0.0.1:$CP" --proxy-bypass-list='<-loopback>' \
    --dump-dom "$1" 2>/dev/null | grep -o '<title>LOAD [0-9]*</title>' | grep -o '[0-9]*')
  rm -rf "$profile"
  echo "${title:-fail}"
}
printf '' > "$TMP/client-default.toml"
for i in $(seq "$LOADS"); do
  for arm in push none; do
    data=$(mktemp -d "$TMP/client.XXXXXX")
    start_client "$arm" "$data" "$TMP/client-default.toml"
    echo "$arm $(chromium_load "http://127.0.0.1:$ORIGIN_PORT/index.html")"
    stop_client
    rm -rf "$data"
  done
done
if [ "$BROWSE" = 1 ]; then
  printf 'announce_held = false\n' > "$TMP/client-silent.toml"
  for announce in held silent; do
    config=$TMP/client-default.toml; [ "$announce" = silent ] && config=$TMP/client-silent.toml
    data=$(mktemp -d "$TMP/client.XXXXXX")
    start_client push "$data" "$config"
    for page in p1 p2 p3 p4; do
      echo "browse-$announce $page $(chromium_load "http://127.0.0.1:$ORIGIN_PORT/$page.html")"
    done
    curl -s "http://127.0.0.1:$CA/metrics" | grep -E '^wirefold_client_(push|link_bytes|requests)' \
      | sed "s/^/browse-$announce metric /"
    stop_client
    rm -rf "$data"
  done
fi
SH

# Each server proxy learns the site (cache, pages' manifests) before the measured
# loads: every file once through a client proxy beside it, without the link.
for arm in push none; do
  port=${PORT[$arm]}
  cp_warm=$(free_port)
  "$WIREFOLD" client --upstream "https://localhost:$port" --upstream-connect "127.0.0.1:$port" \
    --upstream-ca "$TMP/$arm/self-signed-cert.pem" --link-token "$LINK_TOKEN" \
    --listen "127.0.0.1:$cp_warm" --admin "127.0.0.1:$(free_port)" --data-dir "$TMP/warm-$arm" \
    >"$TMP/warm-$arm.log" 2>&1 & warm=$!
  wait_http "warm-up client proxy ($arm)" "$warm" "http://127.0.0.1:$cp_warm/"
  for file in "$SITE"/*; do
    curl -s -o /dev/null -x "http://127.0.0.1:$cp_warm" --noproxy '' -H 'Accept: text/html' \
      "http://127.0.0.1:$ORIGIN_PORT/$(basename "$file")"
  done
  kill "$warm"; wait "$warm" 2>/dev/null || true
done

export WIREFOLD TMP LOADS LINK_TOKEN ORIGIN_PORT BROWSE=${BROWSE:-1} PORT_PUSH=${PORT[push]} PORT_NONE=${PORT[none]}
export CP=$(free_port) CA=$(free_port)
log "$LOADS loads per arm over $RATE, $DELAY each way$([[ $BROWSE == 1 ]] && echo "; then the browse")"
"$WIREFOLD" lab link --rate "$RATE" --delay "$DELAY" -- bash "$TMP/inside.sh" > "$TMP/results.txt" 2>"$TMP/link.log" \
  || die "lab link failed: $(tail -3 "$TMP/link.log")"

fails=$(grep -cE '^(push|none) fail$' "$TMP/results.txt" || true)
((fails == 0)) || log "$fails loads without a load time"
median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "null"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
push=$(awk '$1=="push" && $2!="fail" {print $2}' "$TMP/results.txt" | median)
none=$(awk '$1=="none" && $2!="fail" {print $2}' "$TMP/results.txt" | median)
log "loads (ms): push $(awk '$1=="push" {printf "%s ", $2}' "$TMP/results.txt")"
log "loads (ms): none $(awk '$1=="none" {printf "%s ", $2}' "$TMP/results.txt")"
log "median loadEventEnd: push $push ms, none $none ms"
for announce in held silent; do
  grep -q "^browse-$announce metric" "$TMP/results.txt" || continue
  value() { awk -v m="$1" '$3==m {print $4}' <(grep "^browse-$announce metric" "$TMP/results.txt") | head -1; }
  log "browse ($announce): loads (ms) $(awk -v a="browse-$announce" '$1==a && $2 ~ /^p[0-9]/ {printf "%s=%s ", $2, $3}' "$TMP/results.txt")"
  log "browse ($announce): pushed $(value wirefold_client_push_bytes_total) bytes whole, of which already held $(value wirefold_client_push_bytes_already_held_total); link bytes received $(value wirefold_client_link_bytes_received_total)"
  grep "^browse-$announce metric wirefold_client_pushes_total" "$TMP/results.txt" | sed 's/^browse-[a-z]* metric /  /' >&2 || true
done
echo "{\"push\": $push, \"none\": $none}"
