#!/usr/bin/env bash
# Every benchmark, side by side on this machine (installs what it needs: the test
# prerequisites and confluent-kafka for the user-script baseline).
#   scripts/bench.sh            all of them
#   scripts/bench.sh mirror     one of: mirror, scale, discovery, checkpoints, translation, plugins, languages, transforms, latency
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
for b in "${benches[@]}"; do
    echo "== cargo bench -p kmirror --bench $b"
    cargo bench --quiet -p kmirror --bench "$b"
done
