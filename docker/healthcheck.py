"""The container's HEALTHCHECK: ``/healthz`` on the address the sidecar really serves.

It follows ``metrics_address`` as ``cronrace run`` resolves it: ``CRONRACE_METRICS_ADDRESS``,
else ``[agent] metrics_address`` in ``$CRONRACE_CONFIG``, else ``127.0.0.1:9464``. With
``off`` there is nothing to ask: the check passes while the process runs (Docker restarts a
container whose main process exits anyway). A wildcard bind (``0.0.0.0``, ``::``) is asked
on loopback.

Standard library only, and not importing cronrace: it runs every 15 seconds and must cost
next to nothing. Exit 0 healthy, 1 unhealthy (Docker's convention), with one line saying why.
"""

from __future__ import annotations

import os
import sys
import tomllib
import urllib.error
import urllib.request

DEFAULT_ADDRESS = "127.0.0.1:9464"
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - mapped away


def metrics_address(environ: dict[str, str]) -> str:
    """The ``metrics_address`` the sidecar resolves, from the environment or its file."""
    if environ.get("CRONRACE_METRICS_ADDRESS"):
        return environ["CRONRACE_METRICS_ADDRESS"]
    path = environ.get("CRONRACE_CONFIG")
    if path:
        try:
            with open(path, "rb") as file:
                agent = tomllib.load(file).get("agent", {})
        except (OSError, tomllib.TOMLDecodeError):
            return DEFAULT_ADDRESS  # `cronrace run` says what is wrong with the file
        if isinstance(agent, dict) and isinstance(agent.get("metrics_address"), str):
            return str(agent["metrics_address"])
    return DEFAULT_ADDRESS


def healthz_url(address: str) -> str | None:
    """``http://host:port/healthz`` for an address, or None when metrics are off."""
    if address.strip().lower() in ("", "off"):
        return None
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    host = WILDCARDS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def main() -> int:
    url = healthz_url(metrics_address(dict(os.environ)))
    if url is None:
        print("healthy: metrics_address is off, nothing to ask")
        return 0
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - http only
            print(f"healthy: {url} answered {answer.status}")
            return 0
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {url}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
