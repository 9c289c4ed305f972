#!/usr/bin/env bash
# Runs every kmirror test from a fresh machine: installs prerequisites, builds the plugins
# into WebAssembly components, then runs the whole workspace's tests with cargo-nextest
# (each test in its own process, several at a time: .config/nextest.toml) and the doctests.
# Arguments go to `cargo nextest run` (e.g. `-p kmirror --test e2e_faults`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo xtask plugins
cargo nextest run --workspace "$@"
if [ $# -eq 0 ]; then
    cargo test --workspace --doc
fi
