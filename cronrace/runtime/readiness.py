"""Whether an agent is ready (``/readyz``) and alive (``/healthz``), and why not.

Ready means the store answered the last heartbeat, claims and decisions, and refuses none
of the calls this agent sends: a refusal (ACL, password) is not an outage and does not
pass by itself, so it keeps the agent not ready until the call goes through again. Each
part reports for itself (``source``): a store that answers the heartbeat while the claims
time out (a table locked, a statement_timeout) keeps the agent not ready, rather than
flapping with every beat, until the claims go through or stop failing for
:data:`FAILURE_HOLD_S`.
Alive means the event loop answers (:class:`~cronrace.runtime.watchdog.LoopWatchdog`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from cronrace.errors import StoreAccessError
from cronrace.runtime.observer import Observer
from cronrace.runtime.watchdog import LoopWatchdog

log = logging.getLogger("cronrace.agent.core")

#: How long (s) a failure one part reported keeps the agent not ready although another
#: part got through since (each part clears its own failures when it gets through).
FAILURE_HOLD_S = 2.0


class SetReady(Protocol):
    """How a part of the agent reports whether the store answered it (and why not)."""

    def __call__(self, reachable: bool, *, why: str | None = None, source: str = ...) -> None:
        """Report that ``source``'s last call got through (or not: ``why``)."""


class Readiness:
    """One agent's readiness, fed by its heartbeat, its tick loop and the store's access watch.

    Args:
        node_id: named in the log lines.
        observer: told when readiness flips and when the store refuses a call.
        watchdog: the event-loop watchdog (liveness).
        refusal: what the store refuses right now, or None (the store's access watch).
        server: the store's kind as log lines name it (``Redis``, ``PostgreSQL``).
    """

    def __init__(
        self,
        node_id: str,
        observer: Observer,
        watchdog: LoopWatchdog,
        refusal: Callable[[], str | None],
        server: str = "Redis",
    ) -> None:
        self.node_id = node_id
        self.observer = observer
        self.watchdog = watchdog
        self.server = server
        self._refusal = refusal
        self._ready = False
        #: source -> (when it last failed, monotonic; why)
        self._failing: dict[str, tuple[float, str]] = {"heartbeat": (0.0, "not started")}
        self._not_ready_why = "not started"
        #: Whether the agent runs: refusals met by an operator call are the caller's to
        #: report, not this agent's to log.
        self.running = False

    @property
    def ready(self) -> bool:
        """Whether the store answered last and refuses nothing this agent sends."""
        return self._ready

    def problem(self) -> str | None:
        """Why the agent is not ready (one line), or None. Safe from any thread."""
        lag = self.watchdog.problem()
        if lag is not None:
            return lag
        return None if self._ready else self._not_ready_why

    def set_reachable(
        self, reachable: bool, *, why: str | None = None, source: str = "heartbeat"
    ) -> None:
        """The store answered ``source``'s last call (or did not: ``why``)."""
        now = time.monotonic()
        if reachable:
            self._failing.pop(source, None)
        else:
            self._failing[source] = (now, why or f"{self.server} unreachable")
        self.publish()

    def _unreachable_why(self) -> str | None:
        """Why the store counts as unreachable now (the newest failure), or None."""
        now = time.monotonic()
        self._failing = {
            source: (since, why)
            for source, (since, why) in self._failing.items()
            if source == "heartbeat" or now - since < FAILURE_HOLD_S
        }
        if not self._failing:
            return None
        return max(self._failing.values())[1]

    def publish(self) -> None:
        """Ready = reachable and nothing refused; log and report when that changes."""
        why = self._refusal() or self._unreachable_why()
        ready = why is None
        if why is not None:
            self._not_ready_why = why
        if ready != self._ready:
            self._ready = ready
            self.observer.ready(ready)
            log.log(
                logging.INFO if ready else logging.ERROR,
                "ready" if ready else f"not ready: {why}",
                extra={"node": self.node_id},
            )

    def stopped(self) -> None:
        """The agent stopped: not ready, and reported so."""
        self.running = False
        self._ready = False
        self._not_ready_why = "stopped"
        self.observer.ready(False)

    def refused(self, label: str, error: StoreAccessError, first: bool) -> None:
        """The store refused a call (its access watch calls this)."""
        self.observer.redis_refused(error.command, error.cause)
        if first and self.running:
            log.error(
                f"{self.server} refused a call ({error.cause}); this is not an outage, and"
                f" {error.ends_when}",
                extra={
                    "node": self.node_id,
                    "refused": label,
                    "command": error.command,
                    "cause": error.cause,
                    "error": str(error),
                },
            )
            self.publish()

    def allowed(self, label: str) -> None:
        """A call the store refused went through again."""
        log.info(f"{self.server} allows it again", extra={"node": self.node_id, "refused": label})
        self.publish()
