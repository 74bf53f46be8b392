"""A small app that knows nothing about cron: the sidecar calls it over HTTP.

It shows what the receiving side of a cronrace HTTP target should do:

- refuse a request whose ``X-Cronrace-Fence`` is lower than one already seen for the job
  (``409``): it comes from a run that lost its lease to a newer one;
- answer a repeated ``Idempotency-Key`` (``<job>:<tick>``) without doing the work again.

Standard library only, so it runs in a bare ``python:3.12-slim`` container::

    python examples/demo_app.py --port 8000

Endpoints: ``POST /jobs/<name>`` does the "work"; ``GET /calls`` lists what was done
(JSON); ``GET /healthz``; ``GET /redirect`` answers 302 (the sidecar must not follow it).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

StartResponse = Callable[..., Any]


class Ledger:
    """What the app has done, and the highest fence it has seen per job."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.highest_fence: dict[str, int] = {}
        self.done: set[str] = set()
        self.calls: list[dict[str, Any]] = []

    def handle(self, job: str, tick: int, fence: int, key: str) -> tuple[str, str]:
        """Decide one request: return (HTTP status, result)."""
        with self.lock:
            call = {"job": job, "tick": tick, "fence": fence, "key": key, "at": time.time()}
            if fence < self.highest_fence.get(job, 0):
                call["result"] = "stale"
                self.calls.append(call)
                return "409 Conflict", "stale"
            self.highest_fence[job] = fence
            if key in self.done:
                call["result"] = "duplicate"
                self.calls.append(call)
                return "200 OK", "duplicate"
            self.done.add(key)
            call["result"] = "done"
            self.calls.append(call)
            return "200 OK", "done"


def make_app(ledger: Ledger) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI application."""

    def reply(start_response: StartResponse, status: str, data: Any) -> list[bytes]:
        body = json.dumps(data).encode()
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method == "GET" and path == "/healthz":
            return reply(start_response, "200 OK", {"ok": True})
        if method == "GET" and path == "/calls":
            with ledger.lock:
                return reply(start_response, "200 OK", list(ledger.calls))
        if path == "/redirect":
            start_response("302 Found", [("Location", "/jobs/redirected"), ("Content-Length", "0")])
            return [b""]
        if method == "POST" and path.startswith("/jobs/"):
            job = environ.get("HTTP_X_CRONRACE_JOB", "")
            try:
                tick = int(environ.get("HTTP_X_CRONRACE_TICK", ""))
                fence = int(environ.get("HTTP_X_CRONRACE_FENCE", ""))
            except ValueError:
                return reply(start_response, "400 Bad Request", {"error": "no cronrace headers"})
            key = environ.get("HTTP_IDEMPOTENCY_KEY", "")
            status, result = ledger.handle(job, tick, fence, key)
            print(f"{path}: job={job} tick={tick} fence={fence} -> {result}", flush=True)
            return reply(start_response, status, {"result": result, "fence": fence})
        return reply(start_response, "404 Not Found", {"error": f"no route {method} {path}"})

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8000, help="port to bind")
    args = parser.parse_args(argv)
    # As PID 1 in a container, SIGTERM has no default action: exit on it explicitly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = make_server(args.host, args.port, make_app(Ledger()), _Server, _Quiet)
    print(f"demo app listening on http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
