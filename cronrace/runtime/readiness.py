"""Whether an agent is ready (``/readyz``) and alive (``/healthz``), and why not.

Ready means Redis answered the last heartbeat (or the last claims) and refuses none of
the commands this agent sends: a refusal (ACL, password) is not an outage and does not
pass by itself, so it keeps the agent not ready until the command goes through again.
Alive means the event loop answers (:class:`~cronrace.runtime.watchdog.LoopWatchdog`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cronrace.errors import RedisAccessError
from cronrace.runtime.observer import Observer
from cronrace.runtime.watchdog import LoopWatchdog

log = logging.getLogger("cronrace.agent.core")


class Readiness:
    """One agent's readiness, fed by its heartbeat, its tick loop and the store's access watch.

    Args:
        node_id: named in the log lines.
        observer: told when readiness flips and when Redis refuses a command.
        watchdog: the event-loop watchdog (liveness).
        refusal: what Redis refuses right now, or None (the store's access watch).
    """

    def __init__(
        self,
        node_id: str,
        observer: Observer,
        watchdog: LoopWatchdog,
        refusal: Callable[[], str | None],
    ) -> None:
        self.node_id = node_id
        self.observer = observer
        self.watchdog = watchdog
        self._refusal = refusal
        self._ready = False
        self._reachable = False
        self._unreachable_why = "Redis unreachable"
        self._not_ready_why = "not started"
        #: Whether the agent runs: refusals met by an operator call are the caller's to
        #: report, not this agent's to log.
        self.running = False

    @property
    def ready(self) -> bool:
        """Whether Redis answered last and refuses nothing this agent sends."""
        return self._ready

    def problem(self) -> str | None:
        """Why the agent is not ready (one line), or None. Safe from any thread."""
        lag = self.watchdog.problem()
        if lag is not None:
            return lag
        return None if self._ready else self._not_ready_why

    def set_reachable(self, reachable: bool, *, why: str = "Redis unreachable") -> None:
        """Redis answered (or did not: ``why``)."""
        self._reachable = reachable
        if not reachable:
            self._unreachable_why = why
        self.publish()

    def publish(self) -> None:
        """Ready = reachable and nothing refused; log and report when that changes."""
        why = self._refusal() or (None if self._reachable else self._unreachable_why)
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

    def refused(self, label: str, error: RedisAccessError, first: bool) -> None:
        """Redis refused a command (the store's access watch calls this)."""
        self.observer.redis_refused(error.command, error.cause)
        if first and self.running:
            log.error(
                "Redis refused a command; this is not an outage and will not pass by itself",
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
        """A command Redis refused went through again."""
        log.info("Redis allows it again", extra={"node": self.node_id, "refused": label})
        self.publish()
