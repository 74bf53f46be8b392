"""The image, built once per test process, and the containers each test starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.container.podman import Built, Podman, Unavailable, build_image, find_podman
from tests.container.sidecars import Sidecars


@pytest.fixture(scope="session")
def podman() -> Podman:
    try:
        return find_podman()
    except Unavailable as exc:
        pytest.skip(f"container image tests: {exc}")


@pytest.fixture(scope="session")
def built(podman: Podman) -> Built:
    """The repository's image on the local base (made once per machine, kept by podman).

    Workers of one run share podman's storage: one builds while the others wait.
    """
    try:
        return build_image(podman)
    except Unavailable as exc:
        pytest.skip(f"container image tests: {exc}")


@pytest.fixture
def sidecars(podman: Podman, built: Built) -> Iterator[Sidecars]:
    """Containers of the image; every one of them removed when the test ends."""
    started = Sidecars(podman, built.image)
    try:
        yield started
    finally:
        started.remove_all()
