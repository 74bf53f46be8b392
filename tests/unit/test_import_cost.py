"""A fast start: ``import cronrace`` and ``cronrace --help`` load only what they use.

Each check runs a fresh interpreter (this process has imported everything already) and
reads its ``sys.modules``: a module of handlers does not pay for the sidecar, the metrics,
the HTTP client, the terminal tables, the CLI or the settings stack, and the help of the
command does not pay for the agent, the store's driver or the sidecar.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import cronrace

#: Top-level packages and cronrace subpackages a handler module never needs.
NOT_FOR_HANDLERS = (
    "httpx",
    "prometheus_client",
    "pydantic_settings",
    "redis",
    "rich",
    "typer",
    "cronrace.agent",
    "cronrace.cli",
    "cronrace.settings",
    "cronrace.sidecar",
    "cronrace.stores",
    "cronrace.web",
)

#: What `cronrace --help` (and every operator command's declaration) must not load.
NOT_FOR_HELP = (
    "httpx",
    "prometheus_client",
    "pydantic_settings",
    "redis",
    "rich",
    "cronrace.agent",
    "cronrace.settings",
    "cronrace.sidecar",
    "cronrace.stores",
    "cronrace.web",
)


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` of a new interpreter once ``code`` has run."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in modules if any(name == r or name.startswith(r + ".") for r in roots)
    )


def test_import_cronrace_loads_no_stack_a_handler_never_needs() -> None:
    modules = modules_after("import cronrace")
    assert "cronrace.model.job" in modules  # the check sees what was imported
    assert loaded(modules, NOT_FOR_HANDLERS) == []


def test_a_handler_module_importing_its_names_stays_light() -> None:
    modules = modules_after(
        "from cronrace import Catchup, Job, JobDefinitionError, Outcome, RunContext, Schedule"
    )
    assert loaded(modules, NOT_FOR_HANDLERS) == []


#: What the agent itself never needs to be imported: the store's driver comes with its URL.
NOT_FOR_THE_AGENT = (
    "httpx",
    "prometheus_client",
    "redis",
    "rich",
    "typer",
    "cronrace.cli",
    "cronrace.sidecar",
    "cronrace.stores.redis",
    "cronrace.web",
)


def test_importing_the_agent_loads_no_sidecar_metrics_http_or_driver() -> None:
    modules = modules_after("from cronrace import Agent")
    assert "cronrace.agent.core" in modules
    assert loaded(modules, NOT_FOR_THE_AGENT) == []


def test_the_help_of_the_command_loads_no_agent_store_or_sidecar() -> None:
    modules = modules_after(
        "from typer.testing import CliRunner\n"
        "from cronrace.cli.main import app\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "assert CliRunner().invoke(app, ['schedules', '--help']).exit_code == 0"
    )
    assert "typer" in modules
    assert loaded(modules, NOT_FOR_HELP) == []


def test_every_public_name_imports_from_the_package() -> None:
    """``from cronrace import *`` in a new interpreter: each name, lazy or not, is there."""
    modules = modules_after(
        "from cronrace import *\n"
        "import cronrace\n"
        "missing = [n for n in cronrace.__all__ if globals().get(n) is not getattr(cronrace, n)]\n"
        "assert not missing, missing"
    )
    assert "cronrace.agent.core" in modules  # Agent was imported on first use


def test_a_name_imported_on_first_use_is_the_defining_module_s_object() -> None:
    from cronrace.agent.core import Agent
    from cronrace.operate.client import OperatorClient
    from cronrace.settings import AgentSettings

    assert cronrace.Agent is Agent
    assert cronrace.OperatorClient is OperatorClient
    assert cronrace.AgentSettings is AgentSettings
    assert set(cronrace.__all__) <= set(dir(cronrace))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Agnet'"):
        _ = cronrace.Agnet  # type: ignore[attr-defined]
