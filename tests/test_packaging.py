"""The packaging gate's checks (scripts/check_package.py) catch what they are there for.

scripts/check_package.sh runs them on the real sdist and wheel in the test command; here
each check meets a small archive that breaks it, so that a gate that passes everything
fails here.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD_SDIST = [
    "cronrace-0.1.0/LICENSE",
    "cronrace-0.1.0/README.md",
    "cronrace-0.1.0/PKG-INFO",
    "cronrace-0.1.0/pyproject.toml",
    "cronrace-0.1.0/cronrace/py.typed",
    "cronrace-0.1.0/cronrace/__init__.py",
    "cronrace-0.1.0/benchmarks/fleet.py",
]
GOOD_WHEEL = [
    "cronrace/__init__.py",
    "cronrace/py.typed",
    "cronrace-0.1.0.dist-info/METADATA",
    "cronrace-0.1.0.dist-info/licenses/LICENSE",
]
METADATA = "Metadata-Version: 2.4\nName: cronrace\nLicense-Expression: Apache-2.0\n\n"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_package", ROOT / "scripts" / "check_package.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_package = _checker()


def test_a_clean_sdist_and_wheel_pass() -> None:
    assert check_package.sdist_problems(GOOD_SDIST) == []
    assert check_package.wheel_problems(GOOD_WHEEL, METADATA) == []


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("cronrace-0.1.0/.venv/bin/python", "a virtualenv"),
        ("cronrace-0.1.0/.venv-3.12/pyvenv.cfg", "a virtualenv"),
        ("cronrace-0.1.0/env/pyvenv.cfg", "a virtualenv"),
        ("cronrace-0.1.0/x/lib/python3.11/site-packages/redis/__init__.py", "site-packages"),
        ("cronrace-0.1.0/benchmarks/results/fleet.json", "a benchmark result"),
        ("cronrace-0.1.0/cronrace/__pycache__/errors.cpython-311.pyc", "a cache"),
        ("cronrace-0.1.0/.mypy_cache/3.11/cronrace.json", "a cache"),
        ("cronrace-0.1.0/.pytest_cache/v/cache/nodeids", "a cache"),
        ("cronrace-0.1.0/.ruff_cache/CACHEDIR.TAG", "a cache"),
        ("cronrace-0.1.0/.coverage", "coverage data"),
    ],
)
def test_the_sdist_refuses_what_a_checkout_accumulates(extra: str, problem: str) -> None:
    [line] = check_package.sdist_problems([*GOOD_SDIST, extra])
    assert line.startswith(f"sdist: {extra.split('/', 1)[1]}: ")
    assert problem in line


def test_the_sdist_needs_its_licence() -> None:
    names = [n for n in GOOD_SDIST if not n.endswith("/LICENSE")]
    assert check_package.sdist_problems(names) == ["sdist: LICENSE: missing"]


def test_the_wheel_needs_its_licence_and_the_typing_marker() -> None:
    names = [n for n in GOOD_WHEEL if not n.endswith(("LICENSE", "py.typed"))]
    assert check_package.wheel_problems(names, METADATA) == [
        "wheel: no licence (<name>.dist-info/licenses/LICENSE)",
        "wheel: no cronrace/py.typed (Typing :: Typed)",
    ]


def test_the_wheel_holds_the_package_alone() -> None:
    [line] = check_package.wheel_problems([*GOOD_WHEEL, "tests/conftest.py"], METADATA)
    assert line == "wheel: tests/conftest.py: outside the package"


def test_a_licence_classifier_beside_the_expression_is_refused() -> None:
    metadata = METADATA.replace(
        "\n\n", "\nClassifier: License :: OSI Approved :: Apache Software License\n\n"
    )
    [line] = check_package.wheel_problems(GOOD_WHEEL, metadata)
    assert "beside the expression" in line


def test_check_reads_real_archives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with tarfile.open(tmp_path / "cronrace-0.1.0.tar.gz", "w:gz") as sdist:
        for name in [*GOOD_SDIST, "cronrace-0.1.0/benchmarks/results/a.json"]:
            sdist.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    with zipfile.ZipFile(tmp_path / "cronrace-0.1.0-py3-none-any.whl", "w") as wheel:
        for name in GOOD_WHEEL:
            wheel.writestr(name, METADATA if name.endswith("METADATA") else "")
    assert check_package.main([str(tmp_path)]) == 1
    assert capsys.readouterr().err == "sdist: benchmarks/results/a.json: a benchmark result\n"
