#!/usr/bin/env bash
# The documentation's checks, run by scripts/test.sh (and alone: `bash scripts/check_docs.sh`):
# the generated reference is current, the site builds with every warning an error, and the
# internal links and anchors resolve. The Python snippets are checked by
# tests/docs/test_snippets.py, with the rest of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

.venv/bin/python -m pip install --quiet --group docs

echo "== docs: the generated reference is current"
.venv/bin/python scripts/gen_reference.py >/dev/null
if ! git diff --exit-code --stat -- docs/reference cronrace/sidecar/schema.json; then
  echo "docs/reference or cronrace/sidecar/schema.json is stale:" \
       "run .venv/bin/python scripts/gen_reference.py and commit the result" >&2
  exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- docs/reference cronrace/sidecar/schema.json)
if [ -n "$untracked" ]; then
  echo "generated but not committed: $untracked" >&2
  exit 1
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== docs: sphinx-build -W (every warning fails, cross-references and anchors included)"
.venv/bin/python -m sphinx -W --keep-going -q -b html docs "$out/html"
echo "== docs: relative links and anchors of the README and the pages"
.venv/bin/python scripts/check_links.py "$out/html"
echo "docs checked in $(( $(date +%s) - start )) s"
