"""examples/testing: the pytest example of ``cronrace.testing`` passes as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.examples.apps import EXAMPLES, ROOT


def test_the_testing_example_passes_under_pytest() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRONRACE_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist",
         str(EXAMPLES / "testing")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
