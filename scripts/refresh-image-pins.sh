#!/usr/bin/env bash
# Refresh what the container image is pinned to:
#   1. docker/requirements.lock and docker/build-requirements.lock: every Python package of
#      the image (with the postgres extra: the image serves both stores), with its hashes,
#      resolved from pyproject.toml once for every supported Python (3.11+, markers where
#      they differ: redis-py needs async-timeout below 3.11.3, Debian bookworm's 3.11.2),
#      so that any PYTHON_IMAGE the Dockerfile is given installs from them; uv, from PyPI;
#   2. the base image's digest (--digest): python:3.12-slim as the registry serves it now,
#      written into the Dockerfile's PYTHON_IMAGE. This needs registry access and
#      `docker buildx` (or `crane`); run it where you build images, and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."

UV="${UV:-uvx --from uv uv}"
$UV pip compile pyproject.toml --extra postgres --universal --python-version 3.11 \
  --generate-hashes --no-header --quiet -o docker/requirements.lock
$UV pip compile docker/build-requirements.in --universal --python-version 3.11 \
  --generate-hashes --no-header --quiet -o docker/build-requirements.lock
echo "refreshed docker/requirements.lock and docker/build-requirements.lock"

if [ "${1:-}" = "--digest" ]; then
  tag="python:3.12-slim"
  if command -v docker >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1; then
    digest="$(docker buildx imagetools inspect "$tag" --format '{{json .Manifest.Digest}}' | tr -d '"')"
  elif command -v crane >/dev/null 2>&1; then
    digest="$(crane digest "$tag")"
  else
    echo "need docker buildx or crane to resolve $tag" >&2
    exit 1
  fi
  case "$digest" in
    sha256:[0-9a-f]*) ;;
    *) echo "unexpected digest for $tag: '$digest'" >&2; exit 1 ;;
  esac
  sed -i -E "s|^ARG PYTHON_IMAGE=.*|ARG PYTHON_IMAGE=$tag@$digest|" Dockerfile
  echo "pinned $tag to $digest in Dockerfile"
fi
