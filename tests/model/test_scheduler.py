"""The scheduler model (tests/model/scheduler.py): real agents on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from tests.model.profiles import model_settings
from tests.model.scheduler import GroupedRacersModel, RacersModel, SchedulerModel

pytestmark = pytest.mark.model


def test_scheduler_model() -> None:
    settings = model_settings(examples=15, steps=12, deep_examples=200, deep_steps=50)
    run_state_machine_as_test(SchedulerModel, settings=settings)


def test_scheduler_model_with_k_racers() -> None:
    settings = model_settings(examples=8, steps=12, deep_examples=150, deep_steps=40)
    run_state_machine_as_test(RacersModel, settings=settings)


def test_scheduler_model_with_k_racers_in_one_group() -> None:
    settings = model_settings(examples=6, steps=12, deep_examples=100, deep_steps=40)
    run_state_machine_as_test(GroupedRacersModel, settings=settings)
