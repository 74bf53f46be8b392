"""Refusals that waiting will not fix: authentication, ACL permissions, TLS certificates.

redis-py reports a wrong password, and a certificate that does not verify, as a
``ConnectionError``, the same class as a server that is merely down, so a caller that
retries connection errors would retry them until its patience ran out and then blame the
network. :meth:`AccessWatch.translate` tells them apart where they enter (the clients in
``client.py`` and ``clusterclient.py`` call it for every command and pipeline, through
:func:`raise_translated` and :func:`pipeline_replies`) and turns them into cronrace's own
:class:`~cronrace.errors.RedisAccessError` family. The watch also remembers what Redis
refused, by command, until that command goes through again: the agent's readiness, its
log and its metrics read it, so a permission missing anywhere is seen (docs/design.md
section 8).
"""

from __future__ import annotations

import hashlib
import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    OutOfMemoryError,
    RedisError,
    ResponseError,
)

from cronrace.errors import (
    RedisAccessError,
    RedisAuthError,
    RedisOutOfMemoryError,
    RedisPermissionError,
    RedisTLSError,
)
from cronrace.stores.redis.scripts import script_sources

log = logging.getLogger("cronrace.stores.redis")

#: Commands whose ACL name includes the subcommand (``script|load``).
_CONTAINER_COMMANDS = frozenset({"script", "client", "config", "acl", "object", "xinfo", "cluster"})
#: At most this many refusals are remembered separately (they are bounded by the jobs and
#: commands anyway; this only guards against a surprise).
MAX_REFUSALS = 64
_RUN_COMMAND = re.compile(r"run the '([^']+)' command")
# TLS errors that a retry may cure: the peer went away during the handshake.
_TRANSIENT_SSL = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
_AUTH_MISSING = ("HELLO must be called", "NOAUTH", "Authentication required")


@dataclass(frozen=True, slots=True)
class Refusal:
    """What Redis refused, since when, and the error saying so."""

    label: str
    error: RedisAccessError
    since_mono: float


def command_name(args: Sequence[Any]) -> str:
    """Return the ACL name of a command (``xread``, ``script|load``) from its arguments."""
    if not args:
        return "?"
    name = _text(args[0]).lower()
    if name in _CONTAINER_COMMANDS and len(args) > 1:
        return f"{name}|{_text(args[1]).lower()}"
    return name


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _first_key(args: Sequence[Any]) -> str | None:
    name = _text(args[0]).lower() if args else ""
    if name in ("xread", "xreadgroup"):
        upper = [_text(a).upper() for a in args]
        if "STREAMS" in upper and upper.index("STREAMS") + 1 < len(args):
            return _text(args[upper.index("STREAMS") + 1])
        return None
    if name in ("evalsha", "eval"):
        return _text(args[3]) if len(args) > 3 and _text(args[2]) != "0" else None
    return _text(args[1]) if len(args) > 1 else None


def _key_shape(key: str) -> str:
    """A key up to its hash tag: the claim keys of one job (one per tick) are one shape."""
    if "{" in key and "}" in key[key.index("{") :]:
        return key[: key.index("}", key.index("{")) + 1]
    return key


def _causes(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class AccessWatch:
    """Translate refusals into cronrace's errors and remember them until they pass.

    Args:
        tls: whether the connection uses TLS (an unreadable file is then a TLS problem).

    Attributes:
        scripts: script SHA -> script name, to name the script a refusal happened in.
        on_refused: called with ``(label, error, first)`` for every refusal.
        on_allowed: called with ``label`` when a refused command went through again.
    """

    def __init__(self, *, tls: bool = False) -> None:
        self.tls = tls
        # Redis names a script by the SHA1 of its source: name them back for the log.
        self.scripts: dict[str, str] = {
            hashlib.sha1(source.encode()).hexdigest(): f"{name}.lua"  # noqa: S324 - Redis's id
            for name, source in script_sources().items()
        }
        self.on_refused: Callable[[str, RedisAccessError, bool], None] | None = None
        self.on_allowed: Callable[[str], None] | None = None
        # Replaced, never mutated: the metrics thread reads it without a lock.
        self._refused: Mapping[str, Refusal] = {}

    # -- translating -----------------------------------------------------------------

    def translate(self, exc: BaseException, args: Sequence[Any]) -> BaseException:
        """Return cronrace's error for a refusal (and remember it), else ``exc`` itself."""
        refused = self._classify(exc, args)
        if refused is None:
            return exc
        label, error = refused
        error.__cause__ = exc
        self._remember(label, error)
        return error

    def _classify(
        self, exc: BaseException, args: Sequence[Any]
    ) -> tuple[str, RedisAccessError] | None:
        text = str(exc)
        if isinstance(exc, AuthenticationError) or text.startswith("NOAUTH"):
            if any(marker in text for marker in _AUTH_MISSING):
                message = (
                    "authentication required: Redis wants a user name and password and the "
                    "URL gives none (redis://USER:PASSWORD@HOST:PORT/DB)"
                )
            else:
                message = (
                    f"authentication failed: {text.rstrip('.')} "
                    "(check the user name and password in the Redis URL)"
                )
            return "connect", RedisAuthError(message)
        if isinstance(exc, OutOfMemoryError) or (
            isinstance(exc, ResponseError) and text.startswith("OOM ")
        ):
            return self._memory_refusal(text, args)
        if isinstance(exc, ResponseError) and (
            "user executing the script can't" in text
            or (isinstance(exc, NoPermissionError) and " script: " in text)
        ):
            return self._script_refusal(text, args)
        if isinstance(exc, NoPermissionError):
            return self._permission_refusal(text, args)
        if isinstance(exc, RedisError):
            return self._tls_refusal(exc)
        return None

    def _memory_refusal(self, text: str, args: Sequence[Any]) -> tuple[str, RedisAccessError]:
        name = command_name(args)
        if name == "evalsha" and len(args) > 1:
            sha = _text(args[1])
            name = f"evalsha {self.scripts.get(sha, f'script {sha[:12]}')}"
        message = (
            f"Redis is out of memory and refuses writes (OOM {text.rstrip('.')}): it reached "
            "maxmemory under the noeviction policy; free memory or raise maxmemory "
            "(claims, decisions and records wait until it takes writes again)"
        )
        return name, RedisOutOfMemoryError(message, command=name)

    def _script_refusal(self, text: str, args: Sequence[Any]) -> tuple[str, RedisAccessError]:
        sha = _text(args[1]) if len(args) > 1 else ""
        script = self.scripts.get(sha, f"script {sha[:12]}")
        match = _RUN_COMMAND.search(text)
        if match is not None:
            what = repr(match.group(1).lower())
        else:
            what = "a key" if "access at least one of the keys" in text else "a command"
        message = (
            f"permission denied: the ACL user may not use {what} that {script} needs "
            f"(Redis: {text.split(' script:')[0].rstrip('.')}); "
            "grant the commands and key pattern the README's ACL line lists"
        )
        return f"evalsha {script}", RedisPermissionError(message, command="evalsha")

    def _permission_refusal(self, text: str, args: Sequence[Any]) -> tuple[str, RedisAccessError]:
        name = command_name(args)
        match = _RUN_COMMAND.search(text)
        if match is not None:
            denied = match.group(1).lower()
            message = f"permission denied: the ACL user may not run {denied!r}; grant +{denied}"
            return denied, RedisPermissionError(message, command=denied)
        key = _first_key(args)
        shape = _key_shape(key) if key else "?"
        message = (
            f"permission denied: the ACL user may not touch key {shape!r} with {name!r} "
            f"(Redis: {text.rstrip('.')}); grant a key pattern that covers it"
        )
        return f"{name} on {shape}", RedisPermissionError(message, command=name)

    def _tls_refusal(self, exc: RedisError) -> tuple[str, RedisAccessError] | None:
        for cause in _causes(exc):
            if isinstance(cause, ssl.SSLCertVerificationError):
                reason = cause.verify_message or str(cause)
                message = (
                    f"TLS certificate not trusted: {reason} "
                    "(give the CA that signed the server's certificate: "
                    "rediss://HOST:PORT/DB?ssl_ca_certs=/path/ca.pem)"
                )
                return "connect", RedisTLSError(message)
            if isinstance(cause, ssl.SSLError) and not isinstance(cause, _TRANSIENT_SSL):
                return "connect", RedisTLSError(f"TLS handshake failed: {cause}")
            if self.tls and isinstance(cause, (FileNotFoundError, PermissionError)):
                return "connect", RedisTLSError(f"TLS file cannot be read: {cause}")
        return None

    # -- remembering -----------------------------------------------------------------

    def _remember(self, label: str, error: RedisAccessError) -> None:
        first = label not in self._refused
        if first and len(self._refused) < MAX_REFUSALS:
            self._refused = {**self._refused, label: Refusal(label, error, time.monotonic())}
        if self.on_refused is not None:
            self.on_refused(label, error, first)

    def went_through(self, commands: Iterable[Sequence[Any]]) -> None:
        """Forget the refusals of commands that just succeeded (and of the connection)."""
        if not self._refused:
            return
        passed = {"connect"}
        for args in commands:
            name = command_name(args)
            passed.add(name)
            key = _first_key(args)
            if key is not None:
                passed.add(f"{name} on {_key_shape(key)}")
            if name == "evalsha" and len(args) > 1:
                sha = _text(args[1])
                passed.add(f"evalsha {self.scripts.get(sha, f'script {sha[:12]}')}")
        cleared = [label for label in self._refused if label in passed]
        if not cleared:
            return
        self._refused = {k: v for k, v in self._refused.items() if k not in cleared}
        for label in cleared:
            if self.on_allowed is not None:
                self.on_allowed(label)

    @property
    def refusals(self) -> list[Refusal]:
        """What Redis refuses now, oldest first."""
        return sorted(self._refused.values(), key=lambda refusal: refusal.since_mono)

    def problem(self) -> str | None:
        """One line naming what Redis refuses, or None when it refuses nothing."""
        refusals = self.refusals
        if not refusals:
            return None
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        return f"Redis refuses {refusals[0].label}: {refusals[0].error}{more}"


# -- the clients' side: every command and pipeline --------------------------------------


def raise_translated(access: AccessWatch, exc: RedisError, args: Sequence[Any]) -> None:
    """Raise cronrace's error for a refusal of the command ``args``, else ``exc`` itself."""
    translated = access.translate(exc, args)
    if translated is exc:
        raise exc
    raise translated from exc


def pipeline_replies(
    access: AccessWatch, commands: Sequence[Sequence[Any]], replies: list[Any], raise_first: bool
) -> list[Any]:
    """Translate the refusals among a pipeline's replies; raise the first error if asked."""
    out: list[Any] = []
    went_through = []
    for args, reply in zip(commands, replies, strict=False):
        if isinstance(reply, RedisError):
            out.append(access.translate(reply, args))
        else:
            out.append(reply)
            went_through.append(args)
    out.extend(replies[len(out) :])
    access.went_through(went_through)
    if raise_first:
        for reply in out:
            if isinstance(reply, BaseException):
                raise reply
    return out
