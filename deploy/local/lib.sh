# Shared helpers for deploy/local/*.sh (sourced, not run).

# ensure_cmd CMD PACKAGE...: install the Debian packages when CMD is missing.
ensure_cmd() {
    local cmd=$1
    shift
    if command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    echo ">> installing $* (for $cmd)" >&2
    apt_install "$@"
}

# apt_install PACKAGE...: install Debian packages (apt-get update once per script).
apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    if [ -z "${ETCRON_APT_UPDATED:-}" ]; then
        $sudo apt-get update -q >&2
        ETCRON_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@" >&2
}

ensure_base_deps() {
    ensure_cmd etcd etcd-server
    ensure_cmd etcdctl etcd-client
    ensure_cmd protoc protobuf-compiler
    ensure_cmd curl curl
    # cmake: the TLS library of the worker's HTTP client (aws-lc) may build with it.
    ensure_cmd cmake cmake
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo is required: install Rust from https://rustup.rs" >&2
        exit 1
    fi
}

# ensure_secantus: installs the MongoDB-compatible test server (secantusd-rs) once; the binary
# is cached in ~/.cargo/bin. Production uses a real MongoDB; see README.
SECANTUS_VERSION=0.5.3-beta.196
ensure_secantus() {
    export PATH="$HOME/.cargo/bin:$PATH"
    if command -v secantusd-rs >/dev/null 2>&1; then
        return 0
    fi
    ensure_cmd cmake cmake
    echo ">> installing secantus-mdb $SECANTUS_VERSION (MongoDB-compatible test server; one-time build)" >&2
    cargo install secantus-mdb --version "$SECANTUS_VERSION" --ignore-rust-version --locked >&2
}

# ensure_schemathesis: the API fuzzer that tests the master against its OpenAPI document
# (tests/tests/openapi.rs), pinned, in the virtualenv .venv-schemathesis/ at the repository root
# (not committed). Debian's python3 needs python3-venv for `python3 -m venv`.
SCHEMATHESIS_VERSION=4.32.5
ensure_schemathesis() {
    local venv=.venv-schemathesis
    if [ "$("$venv/bin/st" --version 2>/dev/null)" = "st, version $SCHEMATHESIS_VERSION" ]; then
        return 0
    fi
    ensure_cmd python3 python3
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        echo ">> installing python3-venv (for $venv)" >&2
        apt_install python3-venv
    fi
    echo ">> installing schemathesis $SCHEMATHESIS_VERSION into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" >&2
}

# start_secantus DIR PORT LOG: starts the server in the background and waits until it answers;
# sets SECANTUS_PID.
start_secantus() {
    local dir=$1 port=$2 log=$3 i=0
    mkdir -p "$dir"
    secantusd-rs --host 127.0.0.1 --port "$port" --storage-path "$dir" --cache-size 256M >"$log" 2>&1 &
    SECANTUS_PID=$!
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 300 ]; then
            echo "the MongoDB-compatible server did not start; see $log" >&2
            return 1
        fi
        sleep 0.1
    done
}

# free_port: prints a free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL SECONDS: polls until URL answers 2xx.
wait_http() {
    local url=$1 limit=$2 i=0
    until curl -fsS -o /dev/null "$url" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt $((limit * 10)) ]; then
            echo "timed out waiting for $url" >&2
            return 1
        fi
        sleep 0.1
    done
}
