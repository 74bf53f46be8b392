"""The agent's HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz`` and the status page.

:class:`MetricsServer` serves a metrics registry with the standard library's WSGI server
in a daemon thread, next to two probes:

- ``/healthz``: 200 while the agent's event loop turns in time, else 503 naming how long
  it has been blocked (a liveness probe: only a restart helps a stuck loop). The server
  answers from its own thread, so it can say so while the loop is blocked;
- ``/readyz``: 200 when Redis answered the last heartbeat, the scripts are loaded and
  Redis refuses none of the agent's commands, else 503 naming the reason (a readiness
  probe: a not-ready agent claims nothing, but it is alive).

The address defaults to ``127.0.0.1:9464``: metrics are not published beyond the host
unless the operator binds them wider.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, Protocol, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from cronrace.agent.core import Agent
    from cronrace.web.metrics import PrometheusObserver

log = logging.getLogger("cronrace.web.metrics")


class Probes(Protocol):
    """What the probes ask (an :class:`~cronrace.Agent` answers); called from a thread."""

    def liveness_problem(self) -> str | None:
        """Why the agent is not alive, or None."""

    def readiness_problem(self) -> str | None:
        """Why the agent is not ready, or None."""


def probes_app(
    registry: CollectorRegistry,
    probes: Probes,
    page: WSGIApplication | None = None,
) -> WSGIApplication:
    """Return the WSGI app serving ``/metrics``, ``/healthz``, ``/readyz`` (and ``page``).

    Args:
        registry: the metrics to expose.
        probes: answers ``/healthz`` and ``/readyz`` (the agent).
        page: answers every other path (the status page), else 404.
    """
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            dead = probes.liveness_problem()
            if dead is None:
                return _text(start_response, "200 OK", "ok\n")
            return _text(start_response, "503 Service Unavailable", f"not alive: {dead}\n")
        if path == "/readyz":
            why = probes.readiness_problem()
            if why is None:
                return _text(start_response, "200 OK", "ready\n")
            return _text(start_response, "503 Service Unavailable", f"not ready: {why}\n")
        if path == "/metrics":
            return cast("Iterable[bytes]", metrics(environ, start_response))
        if page is not None and path in ("/", "/status.json", "/actions"):
            return page(environ, start_response)
        return _text(start_response, "404 Not Found", "try /metrics, /healthz or /readyz\n")

    return app


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))],
    )
    return [data]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper must not keep the process alive


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds are not news: log them at debug level."""
        log.debug("metrics request: " + format, *args)


class MetricsServer:
    """Serve :func:`probes_app` on ``host:port`` from a daemon thread.

    Args:
        host: the address to bind (default deployments keep ``127.0.0.1``).
        port: the port; 0 picks a free one (see :attr:`port` after :meth:`start`).
        registry: the metrics to expose.
        probes: answers ``/healthz`` and ``/readyz`` (the agent).
        page: the status page's WSGI app, served at ``/`` (see :meth:`for_agent`).
    """

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        probes: Probes,
        page: WSGIApplication | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._app = probes_app(registry, probes, page)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_agent(
        cls,
        agent: Agent,
        observer: PrometheusObserver,
        host: str,
        port: int,
        *,
        status_page: bool = True,
        actions: bool = False,
    ) -> MetricsServer:
        """Serve an agent's metrics, probes and (unless disabled) its status page.

        Registers the agent services this needs: the start-up seeding of each job's last
        success, and the status page's bridge into the agent's event loop.
        """
        observer.watch_schedule(agent)
        agent.add_service(lambda: observer.seed_last_success(agent))
        page = None
        if status_page:
            from cronrace.web.statuspage import StatusPage  # imported only when served

            page = StatusPage(agent, actions=actions).handle
        return cls(host, port, observer.registry, agent, page)

    def start(self) -> None:
        """Bind and serve in the background.

        Raises:
            OSError: the address cannot be bound (in use, not local, not permitted).
        """
        server_class = _ThreadingServer6 if ":" in self.host else _ThreadingServer
        self._server = make_server(
            self.host, self.port, self._app, server_class, handler_class=_QuietHandler
        )
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="cronrace-metrics",
            daemon=True,
        )
        self._thread.start()
        log.info("serving /metrics, /healthz, /readyz and /", extra={"address": self.url})

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
