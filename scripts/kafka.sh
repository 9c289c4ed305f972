#!/usr/bin/env bash
# Apache Kafka and MirrorMaker 2 for the tests and benches, as jars from Maven Central.
#
#   scripts/kafka.sh fetch   # resolves tests/kafka/pom.xml into the cache (idempotent)
#   scripts/kafka.sh lib     # prints the directory holding the jars
#
# The cache is $KMIRROR_CACHE (default ~/.cache/kmirror): the Maven repository in m2/, the
# jars in kafka-<version>/lib/ (the version is the pom's <kafka.version>), the layout the
# test harness (tests/e2e/support/kafka.rs) expects. Brokers and MirrorMaker 2 are started
# by the tests themselves, never left running.
set -euo pipefail
cd "$(dirname "$0")/.."

pom=tests/kafka/pom.xml
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
cache="${KMIRROR_CACHE:-$HOME/.cache/kmirror}"
lib="$cache/kafka-$version/lib"
# Pinned so a newer plugin never changes what is resolved.
dependency_plugin="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

case "${1:-}" in
fetch)
    if [ -f "$lib/.complete" ]; then
        exit 0
    fi
    rm -rf "$lib"
    mkdir -p "$lib"
    mvn -B -q -f "$pom" -Dmaven.repo.local="$cache/m2" \
        "$dependency_plugin:copy-dependencies" \
        -DincludeScope=runtime -DoutputDirectory="$lib"
    for jar in "kafka_2.13-$version" "connect-mirror-$version" "connect-mirror-client-$version" \
        "kafka-tools-$version" log4j-core log4j-slf4j-impl; do
        if ! ls "$lib" | grep -q "^$jar"; then
            echo "error: $jar is missing from $lib after resolving $pom" >&2
            exit 1
        fi
    done
    touch "$lib/.complete"
    ;;
lib)
    echo "$lib"
    ;;
*)
    echo "usage: scripts/kafka.sh fetch|lib" >&2
    exit 2
    ;;
esac
