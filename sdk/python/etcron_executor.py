"""etcron executor: run handler jobs from Python, with the standard library only.

The reference client of etcron's executor protocol (docs/sdk.md, "Executors in other
languages"). It needs a worker's executor address and the executor token, never etcd or
MongoDB:

    from etcron_executor import Executor

    ex = Executor("http://worker:8090", token, "reports-1", capacity=4)

    @ex.handler("nightly-report")
    def nightly_report(ctx):
        start = (ctx.checkpoint or {}).get("page", 0)
        for page in range(start, 10):
            if ctx.cancelled.is_set():
                raise RuntimeError("cancelled")
            ctx.output(f"page {page}\\n")
            ctx.save_checkpoint({"page": page + 1})
            ctx.progress(10 * (page + 1), f"page {page} done")
        return {"pages": 10}

    ex.run()   # until stop() or SIGINT

A handler returns a JSON value (the record's `result`) or raises (the run fails with the
exception's text). `ctx.cancelled` is set on a kill, the timeout or the executor's lost
session; the handler then has the worker's kill grace to return.
"""

import json
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Executor", "Context", "ProtocolError"]

PREFIX = "/executor/v1/sessions"


class ProtocolError(Exception):
    """The worker refused a request: `status` and its `{"error": …}` document."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"HTTP {status}: {error.get('field') or ''} {error.get('message') or body}".strip())


class Context:
    """One run of a handler: who it is, its values, and how it reports."""

    def __init__(self, client, session, offer):
        self._client = client
        self._path = f"{PREFIX}/{session}/runs/{urllib.parse.quote(offer['run'])}"
        self.run = offer["run"]
        self.handler = offer["handler"]
        self.execution_id = offer["execution_id"]
        self.job = offer["job"]
        self.scheduled_ms = offer.get("scheduled_ms")
        self.attempt = offer["attempt"]
        self.fencing_token = offer["fencing_token"]
        self.env = offer.get("env") or {}
        self.checkpoint = offer.get("checkpoint")
        self.traceparent = offer.get("traceparent")  # the run's W3C trace context
        self.cancelled = threading.Event()

    def output(self, text):
        """Appends text to the run's output (kept with its record, followable live)."""
        self._client.call("POST", self._path + "/output", text.encode(), "text/plain; charset=utf-8")

    def progress(self, percent=None, message=None):
        """Reports progress (0-100) and what is being done."""
        self._client.call("POST", self._path + "/progress", {"percent": percent, "message": message})

    def save_checkpoint(self, value):
        """Stores `value` as the tick's checkpoint; returns once etcd holds it. A failover rerun
        resumes from it (`ctx.checkpoint`). Raises ProtocolError 409 when the run is no longer
        this executor's: stop."""
        self._client.call("POST", self._path + "/progress", {"checkpoint": value})


class _Client:
    def __init__(self, url, token, timeout):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, body=None, content_type="application/json", timeout=None):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                text = response.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                body = json.loads(text)
            except ValueError:
                body = text.decode(errors="replace")
            raise ProtocolError(e.code, body) from None


class Executor:
    """Connects to a worker's executor protocol as executor `executor_id` and runs the
    registered handlers' runs in threads, at most `capacity` at once."""

    def __init__(self, url, token, executor_id, capacity=4, timeout=10.0):
        self._client = _Client(url, token, timeout)
        self.id = executor_id
        self.capacity = capacity
        self._handlers = {}
        self._running = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.session = None

    def handler(self, name):
        """Decorator: registers `fn(ctx)` as handler `name`."""

        def register(fn):
            self._handlers[name] = fn
            return fn

        return register

    def stop(self):
        """Leaves after the current poll: running handlers finish, the session is closed."""
        self._stop.set()

    def run(self, install_signals=True):
        """Opens a session and serves runs until stop() (or SIGINT/SIGTERM). A session the
        worker ended (this executor was silent too long: lost) is opened anew."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        while not self._stop.is_set():
            try:
                self._open()
                self._serve()
            except ProtocolError as e:
                if e.status != 404:
                    raise
                self.session = None  # lost: its runs were failed over; start anew
            except (urllib.error.URLError, OSError):
                time.sleep(1.0)  # the worker is unreachable: try again
        self._leave()

    def _open(self):
        if self.session is None:
            body = {"id": self.id, "handlers": sorted(self._handlers), "capacity": self.capacity}
            answer = self._client.call("POST", PREFIX, body)
            self.session = answer["session"]
            self._poll_within = answer["poll_within_ms"] / 1000.0

    def _serve(self):
        wait_ms = int(self._poll_within * 1000 / 2)
        while not self._stop.is_set():
            answer = self._client.call(
                "POST", f"{PREFIX}/{self.session}/poll", {"wait_ms": wait_ms}, timeout=self._poll_within + 10
            )
            for run in answer.get("cancel", []):
                with self._lock:
                    ctx = self._running.get(run)
                if ctx is not None:
                    ctx.cancelled.set()
            for offer in answer.get("runs", []):
                ctx = Context(self._client, self.session, offer)
                with self._lock:
                    self._running[ctx.run] = ctx
                threading.Thread(target=self._execute, args=(ctx,), daemon=True).start()

    def _execute(self, ctx):
        fn = self._handlers.get(ctx.handler)
        try:
            if fn is None:
                raise LookupError(f"no handler {ctx.handler!r} on this executor")
            result = fn(ctx)
            outcome = {"ok": True, "result": result}
        except Exception as e:  # the run's failure, reported as its error
            outcome = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            self._client.call("POST", f"{PREFIX}/{self.session}/runs/{urllib.parse.quote(ctx.run)}/done", outcome)
        except (ProtocolError, urllib.error.URLError, OSError):
            pass  # the run ended without us (killed past its grace, or the session was lost)
        finally:
            with self._lock:
                self._running.pop(ctx.run, None)

    def _leave(self):
        if self.session is not None:
            try:
                self._client.call("DELETE", f"{PREFIX}/{self.session}")
            except (ProtocolError, urllib.error.URLError, OSError):
                pass
            self.session = None


if __name__ == "__main__":
    # A demonstration handler: `python3 etcron_executor.py URL TOKEN ID HANDLER` runs HANDLER as
    # steps of a second each, resuming from its checkpoint (ETCRON_STEPS steps, 5 by default).
    import os
    import sys

    url, token, executor_id, name = sys.argv[1:5]
    executor = Executor(url, token, executor_id)

    @executor.handler(name)
    def steps(ctx):
        total = int(ctx.env.get("STEPS", os.environ.get("ETCRON_STEPS", "5")))
        first = (ctx.checkpoint or {}).get("next_step", 0)
        ctx.output(f"traceparent {ctx.traceparent}\n")
        if first:
            ctx.output(f"resuming at step {first}\n")
        for n in range(first, total):
            if ctx.cancelled.wait(float(os.environ.get("ETCRON_STEP_SECONDS", "1"))):
                raise RuntimeError(f"cancelled at step {n}")
            ctx.output(f"{ctx.execution_id} step {n} token {ctx.fencing_token} pid {os.getpid()}\n")
            ctx.save_checkpoint({"next_step": n + 1})
            ctx.progress(100.0 * (n + 1) / total, f"step {n} of {total} done")
        return {"steps": total, "resumed_at": first}

    executor.run()
