#!/bin/sh
# Real images for adaptive fidelity's measurements (docs/fidelity.md), from Debian
# packages rather than the repository: wallpapers (a large photographic PNG, and
# illustrations at screen sizes). `cargo run -p wirefold-fidelity --example ladder`
# also measures each as a JPEG at quality 90, the form photographs take on the web.
#   scripts/fetch-fidelity-images.sh [DIR]    (default target/fidelity-images)
set -eu
dir=${1:-target/fidelity-images}
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download lomiri-wallpapers sway-backgrounds >/dev/null 2>&1)
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/root"
done
find "$work/root" -type f -name '*.png' -size +1k | while read -r png; do
    cp "$png" "$dir/"
done
ls -l "$dir"
