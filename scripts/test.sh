#!/usr/bin/env bash
# Runs the whole test suite. Installs the reference tools the interop tests drive
# (curl, gzip, brotli, zstd, xdelta3, headless chromium for tests/chromium.rs, nghttp
# for the push test in crates/proxy/tests/hints.rs, ping
# and ip for the path emulator's checks in crates/testbed/tests/emulator.rs,
# dpkg-shlibdeps and strip for the package test, crates/cli/tests/package.rs, and
# redis-server, redis-cli and nginx for the fleet's tests, crates/store/tests/shared.rs
# and crates/cli/tests/fleet.rs, nasm to build rav1e's assembly (feature `avif`) and
# avifdec (libavif-bin) to decode its rungs in crates/fidelity's tests)
# when they are missing, on Debian; then clippy (warnings are errors) and rustfmt
# (installing those components with rustup when missing), then the tests, with every
# optional feature (Redis, minify, AVIF) on.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in curl gzip brotli zstd xdelta3 chromium nghttp ping ip dpkg-shlibdeps strip redis-server redis-cli nginx nasm avifdec; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
# Tools whose Debian package has another name.
for i in "${!missing[@]}"; do
    case "${missing[$i]}" in
        nghttp) missing[$i]=nghttp2-client ;;
        ping) missing[$i]=iputils-ping ;;
        ip) missing[$i]=iproute2 ;;
        dpkg-shlibdeps) missing[$i]=dpkg-dev ;;
        strip) missing[$i]=binutils ;;
        redis-cli) missing[$i]=redis-tools ;;
        avifdec) missing[$i]=libavif-bin ;;
    esac
done
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -d ../shared/corpus ]; then
    echo "the shared corpus is expected at $(cd .. && pwd)/shared/corpus" >&2
    exit 1
fi
# A clean build's target/ takes about 11 GB: on a fuller disk the linker fails mid-build
# with errors that do not say why (a bus error, an I/O failure).
free_gb=$(df --output=avail -B1G . | tail -1 | tr -d ' ')
if [ -n "$free_gb" ] && [ "$free_gb" -lt 12 ]; then
    echo "warning: ${free_gb} GB free on this disk; a clean build needs about 11 GB for target/" >&2
fi
# Lints and formatting first (the lints are the [workspace.lints] table in Cargo.toml).
if command -v rustup >/dev/null 2>&1; then
    installed=$(rustup component list --installed)
    if ! grep -q '^clippy' <<<"$installed" || ! grep -q '^rustfmt' <<<"$installed"; then
        rustup component add clippy rustfmt
    fi
fi
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# The default build leaves the optional parts out: it must build clean without them.
cargo clippy -p wirefold-store -p wirefold --locked -- -D warnings
cargo fmt --all --check
exec cargo test --workspace --all-features --locked
