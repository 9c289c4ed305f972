#!/usr/bin/env bash
# Every benchmark, side by side on this machine (installs what it needs: the test
# prerequisites and confluent-kafka for the user-script baseline).
#   scripts/bench.sh            all of them
#   scripts/bench.sh mirror     one of: mirror, scale, discovery, checkpoints, translation, plugins, languages, transforms, latency, mm2
# `mm2` (kmirror beside MirrorMaker 2, on Apache Kafka only) is not in the default set: at its
# default size (RECORDS=1000000 per record size, REPS=3) it takes about 75 minutes here
# (PARTS=copy or PARTS=live runs half of it).
# The benches that need brokers (mirror, scale, checkpoints, transforms, latency) run on two
# Apache Kafka clusters (a JVM as Kafka's own scripts start it: G1, 1 GiB heap), then again
# on Tansu; each prints which broker measured it. BENCH_BROKERS="kafka" (or "tansu") runs
# them on one only.
# Knobs: RECORDS (per record size, default 300000), REPS (default 3), SIZES (default 200,1024).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
python3 -c "import confluent_kafka" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check "confluent-kafka==2.16.1"
cargo xtask plugins >/dev/null
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
    benches=(mirror scale discovery checkpoints translation plugins languages transforms latency)
fi
export KMIRROR_KAFKA_JVM_OPTS="${KMIRROR_KAFKA_JVM_OPTS:--Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35}"
for b in "${benches[@]}"; do
    case "$b" in
    mm2)
        echo "== cargo bench -p kmirror --bench vs_mm2 (broker: kafka)"
        KMIRROR_TEST_BROKER=kafka cargo bench --quiet -p kmirror --bench vs_mm2
        ;;
    mirror | scale | checkpoints | transforms | latency)
        for broker in ${BENCH_BROKERS:-kafka tansu}; do
            echo "== cargo bench -p kmirror --bench $b (broker: $broker)"
            KMIRROR_TEST_BROKER="$broker" cargo bench --quiet -p kmirror --bench "$b"
        done
        ;;
    *)
        echo "== cargo bench -p kmirror --bench $b"
        cargo bench --quiet -p kmirror --bench "$b"
        ;;
    esac
done
