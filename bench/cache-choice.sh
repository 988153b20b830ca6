#!/bin/sh
# Get/insert throughput (2 threads) and hit ratio of moka, quick_cache and the former
# empty-when-full map on a skewed key stream with a 10% scan; see bench/cache-choice/.
set -eu
cd "$(dirname "$0")/.."
exec cargo run --release --locked --quiet --manifest-path bench/cache-choice/Cargo.toml \
    --target-dir target/cache-choice
