#!/usr/bin/env bash
# Starts a local etcron: etcd, one master and two workers on loopback, data under ./.etcron/,
# with a demo job. Installs what is missing first. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/local/lib.sh

ensure_base_deps
if [ -z "${ETCRON_MONGODB_URI:-}" ]; then
    ensure_mongod
    ensure_pymongo
fi
# The dev profile builds in about a third of the time of an optimised build and shares its
# artefacts with test.sh; ETCRON_PROFILE=release builds the optimised binaries instead.
PROFILE=${ETCRON_PROFILE:-dev}
BIN=target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
echo ">> building the binaries (profile $PROFILE)"
cargo build --profile "$PROFILE" --locked -p etcron-master -p etcron-worker -p etcron-ctl

DATA=${ETCRON_DATA:-$PWD/.etcron}
ETCD_PORT=${ETCRON_ETCD_PORT:-2379}
ETCD_PEER_PORT=${ETCRON_ETCD_PEER_PORT:-2380}
LISTEN=${ETCRON_LISTEN:-127.0.0.1:8070}
mkdir -p "$DATA/logs"
export ETCRON_ETCD_ENDPOINTS="127.0.0.1:$ETCD_PORT"
PIDS=()
cleanup() {
    trap - EXIT INT TERM
    echo ">> stopping"
    # In reverse start order: workers drain and flush their records first, etcd stops last.
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${PIDS[$i]}" 2>/dev/null || true
        wait "${PIDS[$i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT INT TERM

etcd --name local --data-dir "$DATA/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn \
    --auto-compaction-mode=periodic --auto-compaction-retention=5m --quota-backend-bytes=2147483648 \
    --snapshot-count=10000 \
    >"$DATA/logs/etcd.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$ETCD_PORT/health" 20

if [ -z "${ETCRON_MONGODB_URI:-}" ]; then
    MONGO_PORT=${ETCRON_MONGODB_PORT:-27017}
    start_mongod "$DATA/mongodb" "$MONGO_PORT" "$DATA/logs/mongodb.log"
    PIDS+=("$MONGOD_PID")
    export ETCRON_MONGODB_URI="mongodb://127.0.0.1:$MONGO_PORT/?replicaSet=rs0"
fi

"$BIN/etcron-master" --listen "$LISTEN" >"$DATA/logs/master.log" 2>&1 &
PIDS+=($!)
for i in 1 2; do
    # --ui-url: the links in webhook notifications open this console.
    "$BIN/etcron-worker" --worker-id "local-$i" --labels "slot=$i" --data-dir "$DATA/worker-$i" \
        --ui-url "http://$LISTEN" >"$DATA/logs/worker-$i.log" 2>&1 &
    PIDS+=($!)
done
wait_http "http://$LISTEN/healthz" 20

curl -fsS -X PUT "http://$LISTEN/api/jobs/hello" -H 'content-type: application/json' \
    -d '{"schedule":"*/10 * * * * *","description":"demo: prints a greeting every 10 seconds","task":{"kind":"shell","command":"echo hello from $ETCRON_WORKER_ID at $ETCRON_SCHEDULED_AT"}}' >/dev/null

cat <<MSG

etcron is running.
  console:    http://$LISTEN/
  API:        http://$LISTEN/api/jobs  (workers: /api/workers; records: /api/executions?job=hello)
  etcronctl:  $PWD/$BIN/etcronctl; in another terminal:
                export PATH="$PWD/$BIN:\$PATH" ETCRON_SERVER=http://$LISTEN
                etcronctl jobs ls; etcronctl executions search --job hello
  etcd:       ETCDCTL_API=3 etcdctl --endpoints 127.0.0.1:$ETCD_PORT get --prefix /etcron/jobs/ --keys-only
  MongoDB:    $ETCRON_MONGODB_URI
  logs:       $DATA/logs/
A demo job "hello" runs every 10 seconds. README.md starts from here; docs/ has the rest.
MSG
if [ "$(id -u)" = 0 ]; then
    cat <<MSG
Started as root, so the workers run as root. Shell tasks that name no task.user run as a uid of
their team (70000-70999, one per team), never as root: they cannot write root's files nor read
each other's. To run them as one account instead, give the workers --task-user NAME (root
included, as a deliberate choice); started as an ordinary user, the workers run every task as
that user. \`etcronctl workers ls\` shows both: TASKS RUN AS and WORKER RUNS AS.
MSG
fi
echo "Press Ctrl-C to stop."
wait
