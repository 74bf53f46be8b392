# syntax=docker/dockerfile:1
# cronrace as a sidecar container.
#
#   docker build -t cronrace:dev .
#   docker run --rm -e CRONRACE_REDIS_URL=redis://redis:6379/0 \
#     -v "$PWD/cronrace.toml:/etc/cronrace/cronrace.toml:ro" cronrace:dev
#
# A Redis URL is required: from CRONRACE_REDIS_URL or the mounted file's redis_url. The
# default config (examples/sidecar.toml) names none, so without one the container exits 1
# with one line; replicas on the embedded store (redis_url = "memory://", only when
# written out) would each run every job.
#
# The entrypoint is the `cronrace` command, so the same image runs operator commands:
#   docker run --rm cronrace:dev validate /etc/cronrace/cronrace.toml
#   docker exec <container> cronrace status

ARG PYTHON_IMAGE=python:3.12-slim

# -- build: wheels for cronrace and every dependency ------------------------------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cronrace ./cronrace
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# -- runtime: no compiler, no sources, no root -------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CRONRACE_CONFIG=/etc/cronrace/cronrace.toml
RUN groupadd --system --gid 10001 cronrace \
 && useradd --system --uid 10001 --gid cronrace --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin cronrace
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels cronrace
# A documented example; mount your own file over it (or a ConfigMap on /etc/cronrace).
COPY examples/sidecar.toml /etc/cronrace/cronrace.toml
USER 10001:10001
# /metrics, /healthz, /readyz (bind 0.0.0.0:9464 in the config to reach them from outside)
EXPOSE 9464
# Liveness only: /healthz answers while the process serves requests. Readiness (/readyz,
# Redis reachable) is for orchestrators that can tell the two apart.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]
# SIGTERM: stop claiming, let runs finish within shutdown_grace_s, release leases, exit 0.
# As PID 1, `cronrace run` is its own init (cronrace/pid1.py): it forwards signals to the
# agent and reaps orphaned processes, so no tini is needed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cronrace"]
CMD ["run", "--config", "/etc/cronrace/cronrace.toml"]
