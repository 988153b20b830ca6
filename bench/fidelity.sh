#!/usr/bin/env bash
# bench/fidelity.sh — adaptive fidelity against Seshan, Stemm & Katz (1998), Figures
# 14–15: a server whose egress is the bottleneck serves more requests when it may send
# smaller variants, and clients on slow links get their pages in time.
#
# Usage: bench/fidelity.sh        (needs root: `wirefold lab link` creates namespaces)
#   WIREFOLD=PATH  LOADGEN=PATH   binaries (default: release builds of the repository)
#   STEPS=1,2,4,8,16,32,64,128    clients in each step of the server runs
#   SIDES="server client"         which experiments to run
#   STEP_SECONDS=15               length of a step
#   MEAN_OFF=1                    mean idle seconds of a client between pages
#   FRACTIONS="60 90"             shares of the site's bytes that are negotiable (%)
#   EGRESS=1.5mbit                the server's egress link (both directions)
#   CLIENT_LOADS=6                page loads per link kind and arm on the client side
#
# The site: PAGES pages (Zipf popularity), each a small HTML page with images and one
# opaque (non-negotiable) object sized so that images are exactly FRACTION% of the
# page's bytes. The images are JPEGs cut from photographs (the wallpapers of Debian's
# lomiri-wallpapers-20.04 and ukui-wallpapers) at heavy-tailed sizes.
#
# Server side: `wirefold serve --root` on the host; `wirefold-loadgen surge` (Surge-like
# on/off clients added in steps) behind `wirefold lab link` at EGRESS, so the link
# is the server's egress. Arms: with negotiation (fidelity on, the egress controller at
# `egress_limit_bps` = EGRESS) and without (fidelity off); the same binary and site.
# The controller's smoothed egress is sampled every second from /metrics; after the
# first two steps (settling) `within_watermarks` says whether the median sample lies
# between the watermarks (50% and 90% of the limit).
#
# Client side: pages loaded one after another (page, then its objects, on one
# connection, as curl fetches a list, each naming the page as its Referer) behind a
# 3G-like link (1.6 Mbit/s, 150 ms round trip) and a 56k-like one (56 kbit/s,
# 200 ms), with the Client Hints a browser sends after `Accept-CH` (ECT, RTT,
# Downlink), with and without negotiation; the share of loads within the 3 s target
# time and the median load time.
#
# The last line is JSON: {"server": {"60": {"with": RPS, "without": RPS, "errors": N,
# "within_watermarks": BOOL}, "90": {…}}, "client": {"3g": {"with": {"on_time":
# SHARE, "median_s": S}, "without": {…}}, "56k": {…}}}; SVG plots of both sides are
# written to $OUT (default docs/fidelity-figures).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
source "$HERE/lib.sh"
source "$HERE/nginx-lib.sh"
bench_temp fidelity

[[ $(id -u) == 0 ]] || die "needs root: wirefold lab link creates network namespaces"
STEPS=${STEPS:-1,2,4,8,16,32,64,128}
SIDES=${SIDES:-"server client"}
STEP_SECONDS=${STEP_SECONDS:-15}
MEAN_OFF=${MEAN_OFF:-1}
FRACTIONS=${FRACTIONS:-"60 90"}
EGRESS=${EGRESS:-1.5mbit}
EGRESS_BPS=${EGRESS_BPS:-1500000}
PAGES=${PAGES:-12}
CLIENT_LOADS=${CLIENT_LOADS:-6}
OUT=${OUT:-$REPO/docs/fidelity-figures}
ACCEPT_IMAGES="image/avif,image/webp,image/apng,image/*,*/*;q=0.8"

command -v convert >/dev/null && convert -version 2>/dev/null | grep -q ImageMagick || apt_install imagemagick
command -v python3 >/dev/null || apt_install python3
find_wirefold
find_loadgen

# ---------------------------------------------------------------- the site
# Photographs (JPEG wallpapers of two Debian packages), fetched once.
IMAGES=$REPO/target/fidelity-photos
if ! ls "$IMAGES"/*.jpg >/dev/null 2>&1; then
    log "fetching photographs (Debian's lomiri-wallpapers-20.04, ukui-wallpapers) into $IMAGES"
    mkdir -p "$IMAGES" "$TMP/debs"
    (cd "$TMP/debs" && apt-get download lomiri-wallpapers-20.04 ukui-wallpapers >/dev/null 2>&1) \
        || die "apt-get download of the wallpaper packages failed (apt-get update first?)"
    for deb in "$TMP"/debs/*.deb; do dpkg-deb -x "$deb" "$TMP/debs/root"; done
    find "$TMP/debs/root" -type f -iname '*.jpg' -size +100k -exec cp {} "$IMAGES/" \;
fi
mapfile -t SOURCES < <(ls "$IMAGES"/*.jpg | sort)
((${#SOURCES[@]} > 0)) || die "no source images in $IMAGES"

# make_site DIR FRACTION: the pages, their images and opaque objects, and site.json.
make_site() {
    local dir=$1 fraction=$2
    mkdir -p "$dir"
    python3 - "$dir" "$fraction" "$PAGES" "${SOURCES[@]}" <<'PY'
import json, os, random, subprocess, sys
dir, fraction, pages, sources = sys.argv[1], int(sys.argv[2]) / 100, int(sys.argv[3]), sys.argv[4:]
rng = random.Random(1998)
site = []
for p in range(pages):
    objects, image_bytes = [], 0
    # 1 to 6 images a page; widths heavy tailed (Pareto, shape 1.3) from 320 px.
    for i in range(1 + min(5, int(rng.paretovariate(1.5)) - 1)):
        width = min(1600, int(320 * rng.paretovariate(1.3)))
        height = int(width * rng.choice([0.5, 0.66, 0.75, 1.0]))
        source = rng.choice(sources)
        name = f"img/p{p}-{i}.jpg"
        os.makedirs(os.path.join(dir, "img"), exist_ok=True)
        # A crop of the wallpaper at a random place, scaled to the size wanted.
        gravity = rng.choice(["center", "north", "south", "east", "west"])
        subprocess.run(["convert", source, "-gravity", gravity, "-resize", f"{width}x{height}^",
                        "-extent", f"{width}x{height}", "-strip", "-quality", "85",
                        os.path.join(dir, name)], check=True)
        image_bytes += os.path.getsize(os.path.join(dir, name))
        objects.append("/" + name)
    html = "<!doctype html><title>page %d</title>\n%s\n" % (
        p, "\n".join(f'<img src="{o}" alt="">' for o in objects))
    html = html.encode()
    # The opaque object makes the page's negotiable share exactly `fraction`.
    opaque = max(0, round(image_bytes * (1 - fraction) / fraction) - len(html))
    name = f"bin/p{p}.bin"
    os.makedirs(os.path.join(dir, "bin"), exist_ok=True)
    with open(os.path.join(dir, name), "wb") as f:
        f.write(rng.randbytes(opaque))
    objects.append("/" + name)
    with open(os.path.join(dir, f"p{p}.html"), "wb") as f:
        f.write(html)
    site.append({"path": f"/p{p}.html", "objects": objects})
with open(os.path.join(dir, "site.json"), "w") as f:
    json.dump({"pages": site}, f)
total = sum(os.path.getsize(os.path.join(dir, o.lstrip("/"))) for page in site for o in page["objects"])
print(f"{pages} pages, {total / 1e6:.1f} MB of objects", file=sys.stderr)
PY
}

# start_server NAME ENABLED ROOT: wirefold serve --root on all addresses (the link's
# host side reaches it); its port in PORT, admin port in ADMIN.
start_server() {
    local name=$1 enabled=$2 root=$3
    PORT=$(free_port)
    ADMIN=$(free_port)
    cat >"$TMP/$name.toml" <<TOML
[fidelity]
enabled = $enabled
cpu_share = 1.0
queue = 1024
egress_limit_bps = $EGRESS_BPS
TOML
    "$WIREFOLD" serve --root "$root" --listen "0.0.0.0:$PORT" --admin "127.0.0.1:$ADMIN" \
        --data-dir "$TMP/$name-data" --config "$TMP/$name.toml" >"$TMP/$name.out" 2>"$TMP/$name.log" &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    wait_http "$name" "$LAST_PID" "http://127.0.0.1:$PORT/p0.html"
}

# start_arm NAME ARM ROOT: the server of an arm (`with`: fidelity on, its variants
# made before the run; `without`: off); its pid in server_pid.
start_arm() {
    local enabled=true
    [[ $2 == without ]] && enabled=false
    start_server "$1" "$enabled" "$3"
    server_pid=$LAST_PID
    if [[ $2 == with ]]; then warm "$3"; fi
}

metric_value() { # ADMIN NAME: a gauge or counter summed over its labels
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2 } END { print s + 0 }'
}

# warm ROOT: every image asked for once, then until its variants exist (a Save-Data
# request gets a variant, `TCN: choice`), at most 5 minutes.
warm() {
    local root=$1 pending deadline=$((SECONDS + 300))
    mapfile -t pending < <(cd "$root" && ls img/*.jpg)
    while ((${#pending[@]})) && ((SECONDS < deadline)); do
        local left=()
        for image in "${pending[@]}"; do
            curl -s -o /dev/null -D - -H "Accept: $ACCEPT_IMAGES" -H "Save-Data: on" \
                "http://127.0.0.1:$PORT/$image" | grep -qi '^tcn: *choice' || left+=("$image")
        done
        pending=("${left[@]+"${left[@]}"}")
        ((${#pending[@]})) && sleep 1
    done
    ((${#pending[@]} == 0)) || log "warning: ${#pending[@]} images still without variants after 5 min"
}

# ---------------------------------------------------------------- server side
SERVER_JSON=()
for fraction in $FRACTIONS; do
    [[ " $SIDES " == *" server "* ]] || break
    root="$TMP/site-$fraction"
    log "site with $fraction% of bytes negotiable"
    make_site "$root" "$fraction"
    declare -A RPS=()
    errors=0
    within=null
    for arm in with without; do
        start_arm "$arm-$fraction" "$arm" "$root"
        log "$fraction% negotiable, $arm negotiation: steps $STEPS of ${STEP_SECONDS}s behind $EGRESS"
        (
            while kill -0 "$server_pid" 2>/dev/null; do
                echo "$(date +%s) $(metric_value "$ADMIN" wirefold_fidelity_egress_bytes_per_second) $(metric_value "$ADMIN" wirefold_fidelity_max_fraction)"
                sleep 1
            done
        ) >"$TMP/egress-$arm-$fraction.txt" &
        sampler=$!
        PIDS+=("$sampler")
        "$WIREFOLD" lab link --rate "$EGRESS" --delay 20ms -- \
            sh -c "exec '$LOADGEN' surge --addr \"\$WIREFOLD_LINK_HOST:$PORT\" --site '$root/site.json' \
                --steps '$STEPS' --step-seconds '$STEP_SECONDS' --mean-off '$MEAN_OFF' \
                -H 'Accept: $ACCEPT_IMAGES' -H 'Accept-Encoding: gzip, deflate, br, zstd'" \
            >"$TMP/surge-$arm-$fraction.txt" 2>"$TMP/link-$arm-$fraction.log" \
            || die "the surge run failed: $(tail -3 "$TMP/link-$arm-$fraction.log") $(tail -3 "$TMP/surge-$arm-$fraction.txt")"
        kill "$sampler" 2>/dev/null || true
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        sed '$d' "$TMP/surge-$arm-$fraction.txt" >&2
        report=$(tail -1 "$TMP/surge-$arm-$fraction.txt")
        echo "$report" >"$TMP/report-$arm-$fraction.json"
        RPS[$arm]=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["peak_requests_per_second"])' "$report")
        errors=$((errors + $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["errors"])' "$report")))
        if [[ $arm == with ]]; then
            # Settled: after the first two steps.
            skip=$((2 * ${STEP_SECONDS%.*}))
            within=$(awk -v skip="$skip" -v limit="$EGRESS_BPS" 'NR == 1 { t0 = $1 } $1 - t0 >= skip { print $2 * 8 / limit }' \
                "$TMP/egress-$arm-$fraction.txt" | median | awk '{ print ($1 >= 0.5 && $1 <= 0.9) ? "true" : "false" }')
        fi
    done
    SERVER_JSON+=("\"$fraction\": {\"with\": ${RPS[with]}, \"without\": ${RPS[without]}, \"errors\": $errors, \"within_watermarks\": $within}")
    unset RPS
done

# ---------------------------------------------------------------- client side
root="$TMP/site-${FRACTIONS##* }"
[[ -d $root ]] || make_site "$root" "${FRACTIONS##* }"
[[ " $SIDES " == *" client "* ]] && log "client side: pages over 3G-like and 56k-like links"
declare -A LINKS=([3g]="1.6mbit 75ms 1.6 150 3g" [56k]="56kbit 100ms 0.056 200 slow-2g")
CLIENT_JSON=()
for kind in 3g 56k; do
    [[ " $SIDES " == *" client "* ]] || break
    read -r rate delay downlink rtt ect <<<"${LINKS[$kind]}"
    parts=()
    for arm in with without; do
        start_arm "client-$arm-$kind" "$arm" "$root"
        # The pages in popularity order, each with its objects, fetched like a list.
        python3 - "$root/site.json" "$CLIENT_LOADS" >"$TMP/loads.txt" <<'PY'
import json, sys
pages = json.load(open(sys.argv[1]))["pages"][: int(sys.argv[2])]
for page in pages:
    print(" ".join([page["path"]] + page["objects"]))
PY
        cat >"$TMP/loads.sh" <<SH
# Unmeasured first: each page, and HEAD requests naming it as Referer for its
# objects, so the server knows what each page weighs (as after earlier visitors).
while read -r paths; do
    page="http://\$WIREFOLD_LINK_HOST:$PORT\${paths%% *}"
    curl -s -o /dev/null "\$page"
    for p in \${paths#* }; do
        curl -s -o /dev/null -I -e "\$page" -H 'Accept: $ACCEPT_IMAGES' "http://\$WIREFOLD_LINK_HOST:$PORT\$p"
    done
done <"$TMP/loads.txt"
while read -r paths; do
    urls=""
    # Each URL with its own -o: curl writes the rest of a list's bodies to stdout.
    for p in \$paths; do urls="\$urls -o /dev/null http://\$WIREFOLD_LINK_HOST:$PORT\$p"; done
    # The page as every request's Referer, as a browser names it for subresources.
    page="http://\$WIREFOLD_LINK_HOST:$PORT\${paths%% *}"
    curl -s --max-time 300 -w '%{time_total}\n' -e "\$page" \
        -H 'Accept: $ACCEPT_IMAGES' -H 'ECT: $ect' -H 'RTT: $rtt' -H 'Downlink: $downlink' \$urls \
        | awk '{ s += \$1 } END { print s }'
done <"$TMP/loads.txt"
SH
        "$WIREFOLD" lab link --rate "$rate" --delay "$delay" -- sh "$TMP/loads.sh" \
            >"$TMP/client-$arm-$kind.txt" 2>"$TMP/client-link-$arm-$kind.log" \
            || die "client loads failed: $(tail -3 "$TMP/client-link-$arm-$kind.log")"
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        on_time=$(awk '{ n++; if ($1 <= 3) k++ } END { printf "%.2f", n ? k / n : 0 }' "$TMP/client-$arm-$kind.txt")
        med=$(median <"$TMP/client-$arm-$kind.txt")
        log "$kind $arm: load times $(tr '\n' ' ' <"$TMP/client-$arm-$kind.txt")"
        parts+=("\"$arm\": {\"on_time\": $on_time, \"median_s\": $med}")
    done
    CLIENT_JSON+=("\"$kind\": {${parts[0]}, ${parts[1]}}")
done

# ---------------------------------------------------------------- plots
python3 "$HERE/fidelity-plot.py" "$TMP" "$OUT" "$FRACTIONS"
log "plots in $OUT"

server=$(IFS=,; echo "${SERVER_JSON[*]}")
client=$(IFS=,; echo "${CLIENT_JSON[*]}")
echo "{\"server\": {${server//,\"/, \"}}, \"client\": {${client//,\"/, \"}}}"
