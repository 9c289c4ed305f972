#!/usr/bin/env bash
# Runs every kmirror test from a fresh machine: installs prerequisites, builds the plugins
# into WebAssembly components, then runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo xtask plugins
cargo test --workspace --no-fail-fast "$@"
