"""Check the sdist and the wheel that ``python -m build`` made (scripts/check_package.sh).

The sdist must hold what building and testing need and nothing a checkout accumulates:
no virtualenv, no benchmark results, no caches. The wheel must hold the licence, the
typing marker and the package alone, with metadata PyPI accepts. Prints one line per
problem and exits 1 if there is any; else one line per archive saying what it holds.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from collections.abc import Iterable
from email.parser import HeaderParser
from pathlib import Path

#: Path parts that mark a cache or a build left in a checkout.
CACHES = frozenset(
    {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "htmlcov"}
)
#: Files every sdist must carry, relative to its top directory.
SDIST_NEEDS = ("LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "cronrace/py.typed")


def sdist_problems(names: Iterable[str]) -> list[str]:
    """What is wrong with an sdist holding ``names`` (``<top>/<path>`` each)."""
    problems = []
    inside = set()
    for name in names:
        path = name.split("/", 1)[1] if "/" in name else ""
        if not path:
            continue
        inside.add(path.rstrip("/"))
        parts = path.rstrip("/").split("/")
        if any(part.startswith((".venv", "venv")) for part in parts) or parts[-1] == "pyvenv.cfg":
            problems.append(f"sdist: {path}: a virtualenv")
        elif "site-packages" in parts:
            problems.append(f"sdist: {path}: installed packages (site-packages)")
        elif path.startswith(("benchmarks/results/", "benchmarks/out/")):
            problems.append(f"sdist: {path}: a benchmark result")
        elif CACHES.intersection(parts) or parts[-1].endswith((".pyc", ".pyo")):
            problems.append(f"sdist: {path}: a cache")
        elif parts[-1] == ".coverage" or parts[-1].startswith(".coverage."):
            problems.append(f"sdist: {path}: coverage data")
    problems += [f"sdist: {need}: missing" for need in SDIST_NEEDS if need not in inside]
    return problems


def wheel_problems(names: Iterable[str], metadata: str) -> list[str]:
    """What is wrong with a wheel holding ``names`` whose METADATA reads ``metadata``."""
    problems = []
    names = list(names)
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("wheel: no licence (<name>.dist-info/licenses/LICENSE)")
    if "cronrace/py.typed" not in names:
        problems.append("wheel: no cronrace/py.typed (Typing :: Typed)")
    for name in names:
        top = name.split("/", 1)[0]
        if top != "cronrace" and not top.endswith(".dist-info"):
            problems.append(f"wheel: {name}: outside the package")
        elif CACHES.intersection(name.split("/")) or name.endswith((".pyc", ".pyo")):
            problems.append(f"wheel: {name}: a cache")
    headers = HeaderParser().parsestr(metadata)
    if not headers.get("License-Expression"):
        problems.append("wheel: METADATA has no License-Expression")
    for classifier in headers.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            # PEP 639: the expression replaces these, and PyPI refuses an upload with both.
            problems.append(f"wheel: METADATA: classifier {classifier!r} beside the expression")
    return problems


def check(directory: Path) -> list[str]:
    """Check the one sdist and the one wheel in ``directory``; print what they hold."""
    sdists = sorted(directory.glob("*.tar.gz"))
    wheels = sorted(directory.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        return [f"{directory}: expected one sdist and one wheel, found {sdists + wheels}"]
    with tarfile.open(sdists[0]) as sdist:
        sdist_names = sdist.getnames()
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel_names = wheel.namelist()
        [metadata] = [n for n in wheel_names if n.endswith(".dist-info/METADATA")]
        metadata_text = wheel.read(metadata).decode()
    problems = sdist_problems(sdist_names) + wheel_problems(wheel_names, metadata_text)
    if not problems:
        for archive, count in ((sdists[0], len(sdist_names)), (wheels[0], len(wheel_names))):
            print(f"{archive.name}: {count} entries, {archive.stat().st_size // 1024} KiB")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_package.py DIRECTORY (holding one sdist and one wheel)")
        return 2
    problems = check(Path(argv[0]))
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
