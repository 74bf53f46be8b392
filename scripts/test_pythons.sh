#!/usr/bin/env bash
# The other supported Pythons, run by scripts/test.sh before the full suite (which runs on
# .venv's interpreter, 3.11 by default): on 3.12 and 3.13, the unit tests and one real-Redis
# fleet test, each interpreter in a virtualenv of its own (.venv-3.12, .venv-3.13). The two
# run at once, three workers each: these tests wait on real time far more than they use the
# CPU (95 s of wall time for 23 s of CPU in one process), so six workers on two cores cut the
# wall time without crowding the machine. Output is shown only when one fails; an
# interpreter that is not installed is skipped with one line.
# CRONRACE_PYTHONS="3.12 3.13" chooses the versions (an empty value skips them all);
# PYTHONS_WORKERS the workers of each.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS="${CRONRACE_PYTHONS-3.12 3.13}"
#: One fleet of real agents on a real redis-server: five nodes racing for each tick, no
#: duplicate and no missed tick, fences rising (tests/fleet/test_fleet.py).
FLEET_TEST="tests/fleet/test_fleet.py::test_five_agents_on_a_real_server_fire_each_tick_exactly_once"

find_python() {  # PATH first, then pyenv's versions (the newest patch release)
  local version="$1" found
  if found="$(command -v "python$version" 2>/dev/null)" && "$found" -c '' 2>/dev/null; then
    echo "$found"
    return 0
  fi
  found="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version" \
    2>/dev/null | sort -V | tail -n 1)"
  [ -n "$found" ] && [ -x "$found" ] && echo "$found"
}

prepare() {  # create .venv-X.Y once; install the project and its test group (quick when current)
  local version="$1" python="$2" venv=".venv-$1"
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install --quiet -e . --group test
}

run_one() {
  local version="$1" venv=".venv-$1"
  "$venv/bin/python" -m pytest -p no:cacheprovider -q --no-header \
    -n "${PYTHONS_WORKERS:-3}" --dist worksteal tests/unit "$FLEET_TEST"
}

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
pids=()
names=()
for version in $VERSIONS; do
  if ! python="$(find_python "$version")"; then
    echo "python $version: not installed; skipped"
    continue
  fi
  (
    start=$SECONDS
    prepare "$version" "$python" && run_one "$version"
    status=$?
    echo "python $version: exit $status in $((SECONDS - start)) s"
    exit $status
  ) >"$logs/$version.log" 2>&1 &
  pids+=("$!")
  names+=("$version")
done

failed=0
for i in "${!pids[@]}"; do
  version="${names[$i]}"
  if wait "${pids[$i]}"; then
    tail -n 2 "$logs/$version.log" | head -n 1 | sed "s/^/python $version: /"
    tail -n 1 "$logs/$version.log"
  else
    failed=1
    echo "python $version: FAILED" >&2
    cat "$logs/$version.log" >&2
  fi
done
exit $failed
