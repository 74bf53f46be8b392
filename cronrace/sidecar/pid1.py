"""A minimal init for when ``cronrace run`` is PID 1 (a container's entrypoint).

PID 1 inherits every orphan of its PID namespace and must reap it, or zombies pile up: a
command target whose program leaves children behind leaves some at every tick, until the
process table is full. The agent cannot simply reap them itself: ``waitpid(-1)`` in the
agent would race asyncio's child watcher for the exit statuses of the agent's own
subprocesses, and command targets would lose their exit codes.

So, as tini and dumb-init do, PID 1 forks. The child runs the agent, in a process group of
its own. PID 1 only forwards signals to it (SIGTERM from ``docker stop`` or the kubelet, a
terminal's Ctrl-C), reaps every child that reaches it, and when the agent exits, exits with
the agent's status (128 + N when a signal N killed it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

__all__ = ["FORWARDED_SIGNALS", "exit_code", "supervise_if_pid1"]

#: What PID 1 passes on to the agent. SIGCHLD is its own; SIGKILL and SIGSTOP cannot be
#: caught; SIGTSTP, SIGTTIN and SIGTTOU concern terminals the agent does not read.
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


def exit_code(wait_status: int) -> int:
    """Return the shell's exit code for a ``waitpid`` status: 128 + N for signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def supervise_if_pid1() -> None:
    """Return at once unless this process is PID 1; as PID 1, return only in the agent.

    Call it before any thread starts (forking a threaded process is unsafe). As PID 1 this
    forks: the child returns and runs the agent; PID 1 never returns, it supervises the
    child and exits with its status.
    """
    if os.getpid() != 1:
        return
    # Blocked across the fork: a signal landing before PID 1's handlers exist stays pending
    # and is forwarded once they do (a fork does not pass pending signals to the child).
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        # A group of its own: a terminal's Ctrl-C then reaches PID 1 only, which forwards
        # it once (a second SIGINT would cancel the runs at once).
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
        return
    # os._exit: PID 1 printed nothing and owns nothing; atexit work belongs to the agent.
    os._exit(_supervise(child))


def _supervise(child: int) -> int:
    """Forward signals to ``child`` and reap every process until it exits; its exit code."""

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    while True:
        # Orphans of the namespace land here too; each is reaped as it exits. A signal
        # interrupts the wait, runs forward(), and the wait resumes (PEP 475).
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return exit_code(status)
