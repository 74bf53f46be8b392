"""The layering of docs/design.md section 7, as a test: no import runs up or sideways, no cycle.

Every import counts, wherever it is written: at the top, inside a function, or under
``if TYPE_CHECKING`` (a cycle hidden there is still a cycle a reader has to untangle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import cronrace

PACKAGE = Path(cronrace.__file__).parent

#: docs/design.md section 7, top line first. A module imports its own part and anything on a
#: lower line; the parts of one line are siblings and never import each other. The root
#: ``__init__`` and ``__main__`` are the public API above all of them.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("sidecar",),
    ("web", "testing"),
    ("agent",),
    ("tick", "operate"),
    ("specs",),
    ("settings",),
    ("fleet",),
    ("runtime", "stores"),
    ("protocol",),
    ("model",),
    ("timing",),
    ("errors",),
)
LEVEL = {part: level for level, line in enumerate(LAYERS) for part in line}
API = {"cronrace", "cronrace.__main__"}

#: Third-party packages a backend's driver brings, and the one store package that may
#: import each.
DRIVERS = {"redis": "cronrace.stores.redis", "fakeredis": "cronrace.stores.redis"}
DRIVERS |= {"psycopg": "cronrace.stores.postgres", "psycopg_pool": "cronrace.stores.postgres"}
BACKENDS = ("cronrace.stores.redis", "cronrace.stores.postgres")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str) -> Iterator[str]:
    """Every module ``module`` imports, at any depth of its code, resolved to a module of
    ours where ``from package import submodule`` names one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    yield f"{target}.{alias.name}"


def ours(name: str) -> bool:
    return name == "cronrace" or name.startswith("cronrace.")


def part_of(module: str) -> str:
    """The layer part a module of ours belongs to: its package, or its root module."""
    return module.split(".")[1] if module.count(".") >= 1 else module


GRAPH = {
    module: sorted({name for name in imports_of(module) if ours(name) and name != module})
    for module in MODULES
}


def test_the_table_names_every_part_of_the_package() -> None:
    parts = {part_of(module) for module in MODULES if module not in API}
    assert parts == set(LEVEL), "a part of the package is missing from LAYERS, or is extra"


def test_no_import_runs_up_or_sideways() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        if module in API:
            continue
        here = part_of(module)
        for target in targets:
            if target in API:
                wrong.append(f"{module} -> {target} (the public API imports everything)")
                continue
            there = part_of(target)
            if there != here and LEVEL[there] <= LEVEL[here]:
                how = "sideways" if LEVEL[there] == LEVEL[here] else "up"
                wrong.append(f"{module} -> {target} ({how}: {here} -> {there})")
    assert wrong == []


def find_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or a module
    importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_type_checking_imports_included() -> None:
    assert find_cycles(GRAPH) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    """The check above would fail on a cycle: shown on a small graph that has two."""
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert find_cycles(graph) == [["d", "e"], ["a", "b", "c"]] or find_cycles(graph) == [
        ["a", "b", "c"],
        ["d", "e"],
    ]


def test_a_type_checking_import_is_seen(tmp_path: Path) -> None:
    """Imports under ``if TYPE_CHECKING`` count: the walk finds the one in lifecycle.py."""
    assert "cronrace.fleet.heartbeat" in GRAPH["cronrace.agent.lifecycle"]


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_driver_is_imported_only_by_its_store_package(driver: str) -> None:
    home = DRIVERS[driver]
    leaks = sorted(
        module
        for module in MODULES
        if not (module == home or module.startswith(home + "."))
        and any(name.split(".")[0] == driver for name in imports_of(module))
    )
    assert leaks == []


def test_the_redis_store_itself_is_seen_importing_redis() -> None:
    """The walk above would find an import: the Redis store's own modules show it does."""
    assert "redis.exceptions" in set(imports_of("cronrace.stores.redis.errors"))


def test_nothing_above_the_stores_names_a_backend() -> None:
    """Above ``stores/`` a backend is chosen by a URL's scheme (``stores/urls.py``)."""
    leaks = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if part_of(module) != "stores"
        for target in targets
        if any(target == b or target.startswith(b + ".") for b in BACKENDS)
    )
    assert leaks == []
