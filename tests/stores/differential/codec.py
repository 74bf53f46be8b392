"""What a backend implements to run the differential tests, and how results are compared.

A backend writes a reference state into its own storage and reads its storage back into a
reference state (:class:`StateCodec`): the tests then feed the same state and request to
the reference and to the store, and require the same reply and the same resulting state
(:func:`differences` names every field that differs).

The store's clock is real: the reference runs at the instant read from the store just
before the call (``Window.start``), the store at some instant of the call, before
``Window.end``. So a value the call computes from its clock is compared within the window,
and only such a value (the strategies keep every drawn value clear of it):

- an expiry (``expires_ms``, ``hold_until_ms``) set at ``now + ttl``: the store's may be
  up to the window's milliseconds later; the reference's lies a whole number of seconds
  from the window's start (a drawn expiry never does);
- ``hold_ms`` (how long a hold has still to run): the store's may be that much shorter;
- a fence floored at the clock (the reference's lies within 16 µs of the window's start:
  ``now_us`` or ``now_us + k``; a drawn counter is far from the clock): the store's may be
  up to the window's microseconds later. A fence from a counter above the clock is exact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cronrace.protocol import JobState

#: A fence floored at the clock lies this close above the clock's reading (µs).
FLOORED_SPAN_US = 16


class StateCodec(Protocol):
    """A backend's spelling of one job's reference state in its own storage."""

    async def load(self, job: str, state: JobState, now_ms: int) -> None:
        """Write ``state`` as ``job``'s data (nothing of ``job`` exists yet).

        ``now_ms`` is the store's clock as the state's times were placed: what has run out
        by then (a claim, the lease, the hold) is not written; a run whose lease ran out
        stays (``state.run``).
        """
        ...

    async def read(self, job: str) -> JobState:
        """Read ``job``'s data back as a reference state (what has run out is absent)."""
        ...


@dataclass(frozen=True, slots=True)
class Window:
    """When a call ran on the store's clock: at or after ``start``, before ``end``."""

    start_ms: int
    start_us: int
    end_ms: int
    end_us: int

    @classmethod
    def of(cls, start_us: int, end_us: int) -> Window:
        return cls(start_us // 1000, start_us, end_us // 1000 + 1, end_us + 1)


def visible(state: JobState, now_ms: int) -> JobState:
    """``state`` as a store shows it at ``now_ms``: what has run out is gone, triggers in
    (posted, id) order."""
    lease = state.lease if state.lease is not None and state.lease.expires_ms > now_ms else None
    return replace(
        state,
        lease=lease,
        hold_until_ms=state.hold_until_ms if state.hold_until_ms > now_ms else 0,
        hold_fence=state.hold_fence if state.hold_until_ms > now_ms else 0,
        claims=tuple((k, c) for k, c in state.claims if c.expires_ms > now_ms),
        triggers=tuple(sorted(state.triggers, key=lambda t: (t[1], t[0]))),
    )


def _close(name: str, want: Any, got: Any, window: Window) -> bool:
    """Whether ``got`` is ``want`` computed a little later on the store's clock."""
    if want == got:
        return True
    if not (isinstance(want, int) and isinstance(got, int)) or isinstance(want, bool):
        return False
    if name in ("expires_ms", "hold_until_ms"):
        computed = (want - window.start_ms) % 1000 == 0
        return computed and 0 <= got - want <= window.end_ms - window.start_ms
    if name == "hold_ms":
        return want > 0 and 0 <= want - got <= window.end_ms - window.start_ms
    if name in ("fence", "fences", "hold_fence"):
        # A fence floored at the clock (a wipe hold's fence is the one before it).
        floored = window.start_us - 1 <= want <= window.start_us + FLOORED_SPAN_US
        return floored and want <= got <= window.end_us + FLOORED_SPAN_US
    return False


def differences(want: Any, got: Any, window: Window, path: str = "", name: str = "") -> list[str]:
    """Every field where ``got`` (the store's) differs from ``want`` (the reference's)."""
    if dataclasses.is_dataclass(want) and type(want) is type(got):
        out: list[str] = []
        for field in dataclasses.fields(want):
            out += differences(
                getattr(want, field.name),
                getattr(got, field.name),
                window,
                f"{path}.{field.name}",
                field.name,
            )
        return out
    if name == "claims" and isinstance(want, tuple) and isinstance(got, tuple):
        return _keyed(dict(want), dict(got), window, path)
    if isinstance(want, tuple) and isinstance(got, tuple) and name != "triggers":
        if len(want) != len(got):
            return [f"{path}: {len(want)} items expected, {len(got)} found: {want!r} != {got!r}"]
        out = []
        for index, (w, g) in enumerate(zip(want, got, strict=True)):
            out += differences(w, g, window, f"{path}[{index}]", name)
        return out
    if _close(name, want, got, window):
        return []
    return [f"{path}: expected {want!r}, found {got!r}"]


def _keyed(want: dict[Any, Any], got: dict[Any, Any], window: Window, path: str) -> list[str]:
    out = []
    for key in sorted(set(want) | set(got), key=str):
        where = f"{path}[{key!r}]"
        if key not in got:
            out.append(f"{where}: expected {want[key]!r}, found none")
        elif key not in want:
            out.append(f"{where}: expected none, found {got[key]!r}")
        else:
            out += differences(want[key], got[key], window, where, "claim")
    return out


def assert_same(
    want: tuple[Any, JobState], got: tuple[Any, JobState], window: Window, *, context: str
) -> None:
    """Fail, naming every field, unless the store's reply and state are the reference's."""
    found = differences(want[0], got[0], window, "reply")
    found += differences(visible(want[1], window.start_ms), got[1], window, "state")
    if found:
        lines = "\n  ".join(found)
        raise AssertionError(f"the store differs from the reference ({context}):\n  {lines}")
