#!/usr/bin/env bash
# The packaging gate, run by scripts/test.sh: build the sdist and the wheel (the wheel from
# the sdist, as an installer would), check their metadata as PyPI will (twine check
# --strict), and check what each holds (scripts/check_package.py): no virtualenv, benchmark
# results or caches in the sdist; the licence and the typing marker in the wheel.
# Offline and about two seconds: the build backend (hatchling) comes from the test group,
# so the build needs no isolated environment.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-.venv/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

if ! "$PY" -m build --no-isolation --outdir "$out/dist" . >"$out/build.log" 2>&1; then
  cat "$out/build.log" >&2
  echo "packaging: python -m build failed (above)" >&2
  exit 1
fi
"$PY" -m twine check --strict "$out"/dist/*
"$PY" scripts/check_package.py "$out/dist"
