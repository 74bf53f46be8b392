# syntax=docker/dockerfile:1
# cronrace as a sidecar container.
#
#   docker build -t cronrace:dev .
#   docker run --rm -e CRONRACE_STORE_URL=redis://redis:6379/0 \
#     -v "$PWD/cronrace.toml:/etc/cronrace/cronrace.toml:ro" cronrace:dev
#
# The image bakes no config: without a file mounted on /etc/cronrace/cronrace.toml, `run`
# exits with one line saying what to mount. The entrypoint is the `cronrace` command, so the
# same image runs operator commands:
#   docker run --rm -v "$PWD/cronrace.toml:/etc/cronrace/cronrace.toml:ro" cronrace:dev validate /etc/cronrace/cronrace.toml
#   docker exec <container> cronrace status
#
# Reproducible: every Python package is installed from docker/requirements.lock with
# --require-hashes (the build backend from docker/build-requirements.lock). The base image
# is a tag until pinned by digest: see "Container and Kubernetes" in the README for the
# one command that pins it (it needs registry access, which the machine this was written
# on had not) and the one that refreshes the lock files.

ARG PYTHON_IMAGE=python:3.12-slim

# -- build: the cronrace wheel, with a hash-checked build backend -------------------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY docker/build-requirements.lock ./docker/
RUN pip install --require-hashes --no-deps -r docker/build-requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY cronrace ./cronrace
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# -- runtime: no compiler, no sources, no root --------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    CRONRACE_CONFIG=/etc/cronrace/cronrace.toml
RUN groupadd --system --gid 10001 cronrace \
 && useradd --system --uid 10001 --gid cronrace --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin cronrace
COPY docker/requirements.lock /tmp/requirements.lock
# Every dependency from the lock, checked against its hashes (all are wheels: no compiler
# needed), then cronrace itself without resolving anything.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --require-hashes --no-deps -r /tmp/requirements.lock \
 && pip install --no-index --no-deps /wheels/cronrace-*.whl \
 && rm /tmp/requirements.lock
COPY docker/healthcheck.py /usr/local/lib/cronrace-healthcheck.py
USER 10001:10001
# /metrics, /healthz, /readyz and the status page (bind 0.0.0.0:9464 in the config to reach
# them from outside the container; 127.0.0.1 is the default)
EXPOSE 9464
# Liveness only, on the address the config (or CRONRACE_METRICS_ADDRESS) really binds;
# passes with metrics_address = "off". Readiness (/readyz) is for orchestrators that can
# tell the two apart.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "/usr/local/lib/cronrace-healthcheck.py"]
# SIGTERM: stop claiming, let runs finish within shutdown_grace_s, release leases, exit 0.
# As PID 1, `cronrace run` is its own init (cronrace/sidecar/pid1.py): it forwards signals to the
# agent and reaps orphaned processes, so no tini is needed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cronrace"]
CMD ["run", "--config", "/etc/cronrace/cronrace.toml"]
