#!/bin/sh
# AVIF (ravif over rav1e) against WebP (libwebp) for image variant ladders (issue 14):
# bytes at equal SSIM/PSNR and encode CPU per megapixel, on at most 8 real images
# (Debian wallpapers: photographs and illustrations) downscaled to <= 1600 px wide.
# Results: docs/fidelity.md, "Why these crates".
#
#   bench/avif-vs-webp.sh [OUT.csv]    (about 11 minutes on the 2-core machine)
#
# The crate bench/avif-vs-webp has its own workspace (CI never builds it); it is
# built once, release, -j1, into CARGO_TARGET_DIR (default /work/target-avif, outside
# the checkout). Needs nasm (rav1e's assembly) and avifdec (libavif-bin, to decode
# the AVIF files for SSIM); installed with apt-get when missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-avif}
out=${1:-$CARGO_TARGET_DIR/avif-vs-webp.csv}
photos=$root/target/fidelity-photos
images=$root/target/fidelity-images

need=""
command -v nasm >/dev/null || need="$need nasm"
command -v avifdec >/dev/null || need="$need libavif-bin"
if [ -n "$need" ]; then
    apt-get update -qq && apt-get install -y -qq $need
fi

if ! ls "$photos"/*.jpg >/dev/null 2>&1; then
    mkdir -p "$photos"
    work=$(mktemp -d)
    (cd "$work" && apt-get download lomiri-wallpapers-20.04 ukui-wallpapers >/dev/null)
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
    find "$work/root" -type f -name '*.jpg' -exec cp {} "$photos/" \;
    rm -rf "$work"
fi
if ! ls "$images"/*.png >/dev/null 2>&1; then
    sh "$root/scripts/fetch-fidelity-images.sh" "$images"
fi

# Five photographs (JPEG, 3640-6028 px wide) and three illustrations (PNG): the
# Ubuntu "warty" wallpaper and two of sway's flat-colour ones.
set -- \
    "$photos/Kleiber_by_Lukas_Baubkus.jpg" \
    "$photos/Fossa_by_Jasper_Roks.jpg" \
    "$photos/Painting-Colors_by__herobrine7gamer.jpg" \
    "$photos/2004default.jpg" \
    "$photos/string.jpg" \
    "$images/warty-final-ubuntu.png" \
    "$images/Sway_Wallpaper_Blue_1366x768.png" \
    "$images/Sway_Wallpaper_Blue_768x1024_Portrait.png"

(cd "$here/avif-vs-webp" && cargo build --release --locked -j1)
echo "load before: $(uptime)" >&2
"$CARGO_TARGET_DIR/release/avif-vs-webp" --max-width 1600 --speeds 10,8,6 "$@" > "$out"
echo "load after: $(uptime)" >&2
python3 "$here/avif-vs-webp/summarize.py" "$out"
