#!/usr/bin/env bash
# The whole test suite, from a fresh clone: venv, install, lint, types, tests.
# Used by the README's quick start and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
# The test dependency group (PEP 735) needs pip >= 25.1: the line above upgrades it.
.venv/bin/python -m pip install --quiet -e . --group test

# Real-Redis tests need redis-server. Install Debian's package when we can (root, apt).
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "redis-server not found: installing Debian's redis-server package"
    # Keep the package from starting a service (port 6379 may be taken, and our tests start
    # their own servers on free ports anyway): policy-rc.d answering 101 forbids it.
    cleanup_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      cleanup_policy=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server) >/dev/null
    if [ -n "$cleanup_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
    command -v redis-server >/dev/null 2>&1 || { echo "installing redis-server failed" >&2; exit 1; }
  elif [ -n "${CI:-}" ]; then
    echo "CI=true but redis-server is missing and cannot be installed" >&2
    exit 1
  else
    echo "warning: redis-server not found; tests marked 'redis' will be skipped" >&2
  fi
fi

# PostgreSQL-store tests need initdb and postgres (they start their own servers, as
# unprivileged users, on free ports). Install Debian's package when we can; its service
# must not start (policy-rc.d again): the tests never use the machine's own.
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v postgres >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL not found: installing Debian's postgresql package"
    cleanup_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      cleanup_policy=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql) >/dev/null
    if [ -n "$cleanup_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
    ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { echo "installing postgresql failed" >&2; exit 1; }
  elif [ -n "${CI:-}" ]; then
    echo "CI=true but PostgreSQL is missing and cannot be installed" >&2
    exit 1
  else
    echo "warning: PostgreSQL not found; tests marked 'postgres' will be skipped" >&2
  fi
fi

# Optional tools: headless Chromium (the status page's browser test) and promtool (the
# alert rules). About 20 s to install once as root; without them those tests skip and say why.
# CRONRACE_TEST_SKIP_APT=1 leaves them out.
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
# PgBouncer (transaction mode) in front of the PostgreSQL tests' server: its fleet test.
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$missing pgbouncer"
if [ -n "$missing" ] && [ -z "${CRONRACE_TEST_SKIP_APT:-}" ] && [ "$(id -u)" = "0" ] \
   && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's$missing for the browser and alert-rule tests"
  cleanup_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # prometheus must not start a service on :9090
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    cleanup_policy=1
  fi
  # shellcheck disable=SC2086
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
     --no-install-recommends $missing) >/dev/null 2>&1 \
    || echo "warning: installing$missing failed; their tests will be skipped" >&2
  if [ -n "$cleanup_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# The container image's tests (tests/container, -m container) build the Dockerfile and run it
# with podman (runc: the default crun refuses this sandbox's cgroups and rlimits) on a base
# made with debootstrap. About 20 s to install once as root, and a minute to make the base on
# the first run (kept by podman after that); without them those tests skip and say why.
# CRONRACE_TEST_SKIP_APT=1 leaves them out.
container_missing=""
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || container_missing="$container_missing $tool"
done
if [ -n "$container_missing" ] && [ -z "${CRONRACE_TEST_SKIP_APT:-}" ] && [ "$(id -u)" = "0" ] \
   && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's$container_missing for the container image tests"
  cleanup_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # no service of theirs starts
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    cleanup_policy=1
  fi
  # shellcheck disable=SC2086
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
     --no-install-recommends $container_missing) >/dev/null 2>&1 \
    || echo "warning: installing$container_missing failed; the container image tests will be skipped" >&2
  if [ -n "$cleanup_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

echo "== ruff"
.venv/bin/ruff check cronrace tests benchmarks examples
.venv/bin/ruff format --check cronrace tests benchmarks examples
echo "== mypy (strict)"
.venv/bin/mypy
echo "== packaging"
bash scripts/check_package.sh
echo "== docs"
bash scripts/check_docs.sh
echo "== the other Pythons: unit tests and a real-Redis fleet on 3.12 and 3.13"
bash scripts/test_pythons.sh
echo "== pytest"
# Workers: most tests wait on the wall clock rather than the CPU, so more workers than cores
# pay off (PYTEST_WORKERS=0 runs everything in this process, e.g. for a debugger). Work
# stealing: the slowest tests (fault scenarios, 10-36 s) do not end up queued behind
# each other on one worker while the others sit idle at the end.
.venv/bin/python -m pytest -p no:cacheprovider -n "${PYTEST_WORKERS:-4}" --dist worksteal \
  --cov --cov-report=term --cov-fail-under="${COV_FLOOR:-89}" "$@"
