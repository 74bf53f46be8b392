"""What a node serves over HTTP: Prometheus metrics, probes, the status page.

The public ways to serve them from an agent inside an application, defined in
:mod:`cronrace.web.monitoring`: :func:`monitoring_app` (an ASGI app to mount) and
:func:`serve_monitoring` (a listener of its own).
"""

from cronrace.web.monitoring import monitoring_app, serve_monitoring

__all__ = ["monitoring_app", "serve_monitoring"]
