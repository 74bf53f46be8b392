"""The public API is ``from cronrace import ...``: exactly these names, sorted, nothing private."""

from __future__ import annotations

import types

import cronrace

#: The public names, as the README documents them. Adding one is a decision; removing one
#: breaks users: either change shows up here first.
PUBLIC = (
    "Agent",
    "AgentSettings",
    "Catchup",
    "ConfigError",
    "CronraceDeprecationWarning",
    "CronraceError",
    "Job",
    "JobDefinitionError",
    "JobOptions",
    "JobStatus",
    "NodeInfo",
    "OperatorClient",
    "Outcome",
    "Overlap",
    "RedisAmbiguousError",
    "RedisDataError",
    "RedisUnavailableError",
    "RunContext",
    "RunRecord",
    "Schedule",
    "ScheduleError",
    "StoreAmbiguousError",
    "StoreDataError",
    "StoreError",
    "StoreUnavailableError",
    "TargetError",
    "UnknownJobError",
)


def test_all_is_exactly_the_public_names_and_sorted() -> None:
    assert list(cronrace.__all__) == sorted(cronrace.__all__)
    assert tuple(cronrace.__all__) == PUBLIC


#: Names kept for the code written before the PostgreSQL store: the same classes as the
#: store-neutral names (``except RedisUnavailableError`` still catches what is raised).
ALIASES = {
    "RedisAmbiguousError": "StoreAmbiguousError",
    "RedisDataError": "StoreDataError",
    "RedisUnavailableError": "StoreUnavailableError",
}


def test_every_public_name_is_importable_from_the_root() -> None:
    for name in PUBLIC:
        value = getattr(cronrace, name)
        assert getattr(value, "__name__", name) == ALIASES.get(name, name), name
        if name in ALIASES:
            assert value is getattr(cronrace, ALIASES[name]), name
    namespace: dict[str, object] = {}
    exec("from cronrace import *", namespace)  # noqa: S102 - the star import users may write
    assert set(PUBLIC) <= set(namespace)


def test_nothing_private_is_exported_and_nothing_public_is_unlisted() -> None:
    assert not [name for name in cronrace.__all__ if name.startswith("_")]
    unlisted = [
        name
        for name, value in vars(cronrace).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)  # subpackages, once imported
        and name not in PUBLIC
        and name not in {"annotations", "importlib", "TYPE_CHECKING", "Any"}
    ]
    assert unlisted == []
