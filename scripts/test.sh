#!/usr/bin/env bash
# Runs every kmirror test from a fresh machine: installs prerequisites (scripts/setup.sh:
# Apache Kafka and MirrorMaker 2 among them), builds the user guide (docs/, mdBook) and checks
# its links, builds the plugins into WebAssembly
# components, then runs the whole workspace's tests with cargo-nextest (each test in its own
# process, several at a time: .config/nextest.toml) — the end-to-end tests on two real
# Apache Kafka clusters each — then the Tansu compatibility subset (the same end-to-end
# tests on Tansu, a Kafka-protocol broker that is not Kafka: docs/testing.md) and the
# doctests. Arguments go to `cargo nextest run` (e.g. `-p kmirror --test e2e_faults`);
# KMIRROR_TEST_BROKER=tansu runs the end-to-end tests on Tansu instead.
# `scripts/test.sh --scale` runs only the many-topics test, taken on to 20,000 source topics
# on two brokers per cluster (8-10 minutes alone on two cores: not part of every run,
# docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--scale" ]; then
    shift
    scripts/setup.sh
    cargo xtask plugins
    KMIRROR_TWENTY_THOUSAND_TOPICS=1 exec cargo nextest run -p kmirror --test e2e_many_topics "$@"
fi

scripts/setup.sh
# The user guide builds and its links resolve (seconds; before the long runs).
scripts/docs.sh
cargo xtask plugins
# A failing test ends with its own message, not a backtrace: CI shows a run's last lines.
export RUST_BACKTRACE=0
cargo nextest run --workspace "$@"
if [ $# -eq 0 ]; then
    # Three kills under load on Tansu, not ten: each restart waits on its group joins
    # (docs/testing.md).
    KMIRROR_TEST_BROKER=tansu KMIRROR_EOS_KILLS=3 \
        cargo nextest run --profile tansu -p kmirror -E "$(cat tests/tansu-subset)"
    cargo test --workspace --doc
fi
