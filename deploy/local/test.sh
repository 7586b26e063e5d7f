#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, builds the workspace and runs
# every test: unit tests, and integration tests that start real etcd, masters and workers.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/local/lib.sh

ensure_base_deps
# faketime: tests run a worker with a shifted clock (DST, skew).
ensure_cmd faketime faketime
# openssl: the etcd TLS test makes its own CA and certificates.
ensure_cmd openssl openssl
# Browser tests: Debian's Chromium driven by playwright-core from npm (no browser download).
ensure_cmd chromium chromium
ensure_cmd node nodejs
ensure_cmd npm npm
npm ci --prefix web/tests --no-audit --no-fund >&2
# API tests: schemathesis (PyPI, pinned) checks the master against its OpenAPI document.
ensure_schemathesis
# The harness starts a genuine mongod (a one-node replica set) per test cluster, so tests can
# stop and restart it; with ETCRON_MONGODB_URI set, tests that need no outage use that server.
ensure_mongod
# The test runner, pinned.
ensure_nextest
export CARGO_TERM_COLOR=never
# A one-shot build gains nothing from incremental artefacts, which would add gigabytes on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo ">> disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free where the build goes"

echo ">> rustfmt / clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo ">> building binaries"
cargo build --workspace --bins --examples --locked

echo ">> running tests"
# cargo-nextest: every test in a process of its own; integration tests several at once, as many
# as the test group in .config/nextest.toml allows; no retries; JUnit in
# target/nextest/default/junit.xml.
cargo nextest run --workspace --locked --no-fail-fast

echo ">> chaos suite"
# Faults at seeded random times against real processes; fails on a duplicate, an unaccounted
# tick or a lost record. ETCRON_CHAOS_SEED / ETCRON_CHAOS_SECONDS change the run.
cargo run --quiet --locked -p etcron-tests --bin etcron-chaos -- --seed "${ETCRON_CHAOS_SEED:-1}" --seconds "${ETCRON_CHAOS_SECONDS:-120}"
echo ">> chaos suite, production profile"
# Each etcd member in a network namespace of its own, a 3-member MongoDB replica set; member
# partitions, primary failovers and a rolling restart on top (docs/testing.md).
cargo run --quiet --locked -p etcron-tests --bin etcron-chaos -- --profile production --seed "${ETCRON_CHAOS_SEED:-1}" --seconds "${ETCRON_CHAOS_SECONDS:-120}"
