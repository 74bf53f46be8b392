"""Monitoring for an agent inside an application: its metrics, probes and status page.

The sidecar and ``cronrace run`` serve ``/metrics``, ``/healthz``, ``/readyz`` and the
status page on a listener of their own (:class:`~cronrace.web.probes.MetricsServer`). An
agent that lives in an application has two ways to serve the same endpoints:

- :func:`monitoring_app` returns an ASGI application to mount in the program's own web
  app (FastAPI, Starlette, any ASGI server)::

      agent = Agent()
      app = FastAPI(lifespan=lifespan)
      app.mount("/cronrace", monitoring_app(agent))  # /cronrace/metrics, /cronrace/healthz ...

- :func:`serve_monitoring` starts the sidecar's own listener in a thread, on
  ``127.0.0.1:9464`` unless told otherwise, for a program that serves no HTTP::

      with serve_monitoring(agent):
          agent.run_sync()

Both must be set up before the agent starts (they register the agent services that
seed the metrics and let the status page read the store in the agent's event loop), and
both make the agent's observer a :class:`~cronrace.web.metrics.PrometheusObserver` when
it was the default one. The status page is read-only unless ``actions=True``.

A mounted app answers from the application's own event loop and threads: its
``/healthz`` cannot answer while that loop is blocked, so it says "alive" or nothing. The
listener of :func:`serve_monitoring` answers from its own thread and can say "not alive"
while the loop is stuck; prefer it for a liveness probe that must tell the two apart.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from cronrace.errors import ConfigError
from cronrace.runtime.observer import Observer
from cronrace.settings import parse_address
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer, probes_app

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication, WSGIEnvironment

    from cronrace.agent.core import Agent

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The largest request body the app reads (the status page's forms are far smaller).
MAX_BODY_BYTES = 64 * 1024
#: Where :func:`serve_monitoring` listens unless told: this host only, as the sidecar.
DEFAULT_ADDRESS = "127.0.0.1:9464"


def monitoring_app(agent: Agent, *, status_page: bool = True, actions: bool = False) -> ASGIApp:
    """Return an ASGI app serving ``agent``'s metrics, probes and status page.

    Paths, relative to where it is mounted: ``/metrics`` (Prometheus), ``/healthz``
    (200 while the agent's event loop turns), ``/readyz`` (200 while the agent can
    claim), ``/`` and ``/status.json`` (the status page), ``/actions`` (its buttons).

    Args:
        agent: the agent to watch; not started yet.
        status_page: serve the status page at ``/`` (else 404 there).
        actions: show pause, resume and trigger buttons on the status page; anyone
            who can reach the app can press them.

    Raises:
        RuntimeError: the agent is running already.
        ConfigError: the agent's observer is neither the default nor a
            :class:`~cronrace.web.metrics.PrometheusObserver`.
    """
    return WSGIOverASGI(_wsgi_app(agent, status_page=status_page, actions=actions))


def serve_monitoring(
    agent: Agent,
    address: str = DEFAULT_ADDRESS,
    *,
    status_page: bool = True,
    actions: bool = False,
) -> MetricsServer:
    """Serve ``agent``'s metrics, probes and status page on a listener of their own.

    The server runs in a daemon thread until :meth:`MetricsServer.stop`, or the end of a
    ``with`` block (``with serve_monitoring(agent): ...``).

    Args:
        agent: the agent to watch; not started yet.
        address: ``host:port`` to bind (``[::1]:9464`` for IPv6; port 0 picks a free
            one, see ``.port``). The default keeps it on this host.
        status_page: serve the status page at ``/``.
        actions: show pause, resume and trigger buttons on the status page.

    Raises:
        ConfigError: the address is not ``host:port``, cannot be bound, or the agent's
            observer is not a Prometheus one.
        RuntimeError: the agent is running already.
    """
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise ConfigError(f"monitoring address {address!r}: {exc}") from None
    observer = _prometheus_observer(agent)
    server = MetricsServer.for_agent(
        agent, observer, host, port, status_page=status_page, actions=actions
    )
    try:
        server.start()
    except OSError as exc:
        raise ConfigError(
            f"monitoring address {address!r}: cannot listen: {exc.strerror or exc}"
        ) from None
    return server


def _prometheus_observer(agent: Agent) -> PrometheusObserver:
    """The agent's observer, made a Prometheus one where it was the default."""
    if agent.readiness.running:
        raise RuntimeError(
            f"agent {agent.node_id!r} is running already: set up its monitoring before "
            "starting it (the status page and the metrics register services it starts)"
        )
    observer = agent.observer
    if type(observer) is Observer:
        observer = agent.observer = PrometheusObserver()
        observer.describe(agent.node_id, agent.settings.namespace)
    if not isinstance(observer, PrometheusObserver):
        raise ConfigError(
            f"agent {agent.node_id!r}: its observer is a {type(observer).__name__}; "
            "monitoring needs a cronrace.web.metrics.PrometheusObserver (or none)"
        )
    return observer


def _wsgi_app(agent: Agent, *, status_page: bool, actions: bool) -> WSGIApplication:
    observer = _prometheus_observer(agent)
    observer.watch_schedule(agent)
    agent.add_service(lambda: observer.seed_last_success(agent))
    page = None
    if status_page:
        from cronrace.web.statuspage import StatusPage  # imported only when served

        page = StatusPage(agent, actions=actions).handle
    return probes_app(observer.registry, agent, page)


class WSGIOverASGI:
    """Serve a WSGI app (the probes and the status page) to an ASGI server.

    Each request runs the WSGI app in a worker thread, as the sidecar's threaded server
    does: the status page reads the store by handing work to the agent's event loop and
    waiting for it, which a call made in that loop itself could not do.

    Args:
        app: the WSGI application.
    """

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":  # served on its own: nothing to start or stop
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1003})
            return
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, [(b"content-type", b"text/plain")], b"too large\n")
            return
        environ = _environ(scope, body)
        status, headers, content = await anyio.to_thread.run_sync(_call, self.app, environ)
        if scope["method"] == "HEAD":
            content = b""
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        await _respond(send, int(status.split(" ", 1)[0]), raw, content)


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None when it is larger than :data:`MAX_BODY_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _environ(scope: Scope, body: bytes) -> WSGIEnvironment:
    """The WSGI environ of an ASGI HTTP request (PEP 3333), paths relative to the mount."""
    root = scope.get("root_path", "")
    path = scope["path"]
    # Starlette's Mount keeps the whole path and names the mount in root_path; other
    # servers strip it already. The WSGI app sees the path below the mount either way.
    if root and path.startswith(root):
        path = path[len(root) :]
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root,
        "PATH_INFO": path or "/",
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": str(client[0]),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value
        elif name != "CONTENT_LENGTH":
            key = f"HTTP_{name}"
            environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _call(
    app: WSGIApplication, environ: WSGIEnvironment
) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run a WSGI app to completion; return its status, headers and whole body."""
    answer: list[tuple[str, list[tuple[str, str]]]] = []
    written: list[bytes] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        answer[:] = [(status, headers)]
        return written.append

    result: Iterable[bytes] = app(environ, start_response)
    try:
        written.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = answer[0]
    return status, headers, b"".join(written)
