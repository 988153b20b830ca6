#!/usr/bin/env bash
# Builds wirefold and runs the demo: a sample site served through the accelerator.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null 2>&1 || { sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"; $sudo apt-get update -qq; $sudo apt-get install -y -qq curl >/dev/null; }
cargo build --release --locked -p wirefold
exec ./target/release/wirefold demo "$@"
