"""How long the models run: bounded in the suite, longer with ``--hypothesis-profile=deep``.

The profiles themselves are registered in tests/conftest.py (hypothesis loads the profile
named on the command line before test modules are imported).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

DEEP = "deep"


def deep() -> bool:
    return settings.get_current_profile_name() == DEEP


def model_settings(
    *,
    examples: int,
    steps: int,
    real_redis: bool = False,
    deep_examples: int | None = None,
    deep_steps: int | None = None,
) -> settings:
    """The suite's bounded run, or the deep profile's (a real server gets a tenth of it).

    ``deep_examples`` and ``deep_steps`` cap the deep profile for a machine whose steps
    are slow (the scheduler model runs whole agents).
    """
    checks = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
    # The explain phase traces every line of a failing example again: minutes on a model
    # whose steps call Lua through fakeredis. The shrunk steps are what we read anyway.
    phases = [p for p in Phase if p is not Phase.explain]
    if deep():
        base = settings()
        scale = 10 if real_redis else 1
        return settings(
            base,
            max_examples=deep_examples or max(examples, base.max_examples // scale),
            stateful_step_count=deep_steps or base.stateful_step_count,
            deadline=None,
            suppress_health_check=checks,
            phases=phases,
        )
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=checks,
        phases=phases,
    )
