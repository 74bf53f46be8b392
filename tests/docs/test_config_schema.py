"""The JSON Schema of the sidecar's file, shipped in the package, matches what checks the file.

scripts/check_docs.sh regenerates it and fails when the committed one differs; these tests
pin what it must say whatever the generator does: every field of the models that check the
file, each with a description, and every key the example files use.
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from cronrace.settings import SidecarSettings
from cronrace.specs.jobspec import JobSpec
from cronrace.specs.targets import CommandSpec, HttpSpec, StreamSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [
    ROOT / "examples" / "sidecar.toml",
    ROOT / "examples" / "compose" / "cronrace.toml",
    ROOT / "examples" / "kubernetes" / "cronrace.toml",
]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    text = resources.files("cronrace.sidecar").joinpath("schema.json").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def test_the_agent_table_has_every_sidecar_setting(schema: dict[str, Any]) -> None:
    agent = schema["properties"]["agent"]["properties"]
    assert set(agent) == set(SidecarSettings.model_fields) | {"redis_url"}
    assert all(prop.get("description") for prop in agent.values())


def test_a_job_has_every_option_and_one_target_of_three(schema: dict[str, Any]) -> None:
    job = schema["$defs"]["Job"]
    assert set(job["properties"]) == set(JobSpec.model_fields)
    assert job["oneOf"] == [{"required": [kind]} for kind in ("http", "command", "stream")]
    for model in (HttpSpec, CommandSpec, StreamSpec):
        target = schema["$defs"][model.__name__]
        assert set(target["properties"]) == set(model.model_fields)
        assert all(prop.get("description") for prop in target["properties"].values())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_example_files_use_only_what_the_schema_names(
    schema: dict[str, Any], path: Path
) -> None:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert set(data) <= set(schema["properties"])
    assert set(data.get("agent", {})) <= set(schema["properties"]["agent"]["properties"])
    for job in data["jobs"]:
        assert set(job) <= set(schema["$defs"]["Job"]["properties"])
        (kind,) = [key for key in ("http", "command", "stream") if key in job]
        target = schema["$defs"][
            {"http": "HttpSpec", "command": "CommandSpec"}.get(kind, "StreamSpec")
        ]
        assert set(job[kind]) <= set(target["properties"])
