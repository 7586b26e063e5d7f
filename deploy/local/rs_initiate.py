"""Makes the mongod on 127.0.0.1:PORT the one-node replica set rs0 (once) and waits until it is
primary. Used by up.sh; the test harness does the same in Rust (tests/src/lib.rs)."""

import sys
import time

import pymongo
from pymongo.errors import OperationFailure, PyMongoError

port = int(sys.argv[1])
client = pymongo.MongoClient(port=port, directConnection=True, serverSelectionTimeoutMS=1000)
deadline = time.monotonic() + 30
config = {"_id": "rs0", "members": [{"_id": 0, "host": f"127.0.0.1:{port}"}]}
initiated = False
last_error = "no answer"
while time.monotonic() < deadline:
    try:
        if not initiated:
            try:
                client.admin.command("replSetInitiate", config)
            except OperationFailure as e:
                if e.code != 23:  # AlreadyInitialized: a restart on the same data
                    raise
            initiated = True
        if client.admin.command("hello").get("isWritablePrimary"):
            sys.exit(0)
    except PyMongoError as e:
        last_error = e  # not listening yet, or electing itself
    time.sleep(0.1)
print(f"mongod on port {port} did not become primary within 30 s: {last_error}", file=sys.stderr)
sys.exit(1)
