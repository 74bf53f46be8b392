"""Refusals that waiting will not fix: a wrong password, a missing grant, a certificate.

libpq reports a wrong password and a server that is down alike, as a failed connection
(``OperationalError``): a caller retrying connection errors would retry a wrong password
until its patience ran out and then blame the network. :meth:`AccessWatch.translate` tells
them apart where they enter the store and turns them into cronrace's
:class:`~cronrace.errors.StoreAccessError` family (the access errors of every store); a
schema that is missing or older than this cronrace is one too
(:class:`~cronrace.errors.StoreSchemaError`), naming the command that fixes it. The watch
remembers each refusal until the same kind of call goes through again: readiness, the log
and the metrics read it (docs/design.md section 8).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors

from cronrace.errors import (
    StoreAccessError,
    StoreAuthError,
    StorePermissionError,
    StoreSchemaError,
    StoreTLSError,
)

MAX_REFUSALS = 64
_AUTH_TEXTS = (
    "password authentication failed",
    "no password supplied",
    "pg_hba.conf rejects",
    "no pg_hba.conf entry",
    "authentication failed",
)
_TLS_TEXTS = (
    "certificate verify failed",
    "root certificate file",
    "ssl error",
    "server does not support ssl",
    "sslmode",
    "certificate",
)
_PERMISSION_OBJECT = re.compile(r"permission denied for (\w+) ([\w.\"]+)")
UPGRADE_HINT = "run `cronrace db upgrade` (or have a DBA run `cronrace db sql`)"


@dataclass(frozen=True, slots=True)
class Refusal:
    """What the server refused, since when, and the error saying so."""

    label: str
    error: StoreAccessError
    since_mono: float


def classify(
    exc: BaseException, schema: str, statement: str
) -> tuple[str, StoreAccessError] | None:
    """The refusal ``exc`` is (label, cronrace's error), or None when it is something else.

    A permission refusal is labelled by the statement that met it (``claim``, ...), so it
    is forgotten when that statement goes through again.
    """
    if not isinstance(exc, psycopg.Error):
        return None
    text = str(exc).strip()
    lower = text.lower()
    sqlstate = exc.sqlstate or ""
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        match = _PERMISSION_OBJECT.search(text)
        what = f"{match.group(1)} {match.group(2)}" if match else "an object"
        message = (
            f"permission denied: the database role may not use {what} "
            f"(PostgreSQL: {text.splitlines()[0]}); grant what the README's "
            "PostgreSQL GRANTs list"
        )
        return statement, StorePermissionError(message, command=statement)
    if isinstance(
        exc, (pg_errors.UndefinedTable, pg_errors.UndefinedFunction, pg_errors.InvalidSchemaName)
    ) and (schema in text or "does not exist" in text):
        message = f"the PostgreSQL schema {schema!r} has no cronrace tables: {UPGRADE_HINT}"
        return "schema", StoreSchemaError(message)
    if sqlstate.startswith("28") or any(t in lower for t in _AUTH_TEXTS):
        message = (
            f"authentication failed: {_first_line(text)} (check the user name and password "
            "in the PostgreSQL URL, and pg_hba.conf)"
        )
        return "connect", StoreAuthError(message)
    if sqlstate == "3D000" or ('database "' in lower and "does not exist" in lower):
        return "connect", StoreAuthError(f"refused: {_first_line(text)}")
    if isinstance(exc, psycopg.OperationalError) and any(t in lower for t in _TLS_TEXTS):
        return "connect", StoreTLSError(
            f"TLS failed: {_first_line(text)} (give the CA that signed the server's "
            "certificate: postgresql://...?sslmode=verify-full&sslrootcert=/path/ca.pem)"
        )
    return None


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), text).strip()


class AccessWatch:
    """Translate refusals into cronrace's errors and remember them until they pass.

    Attributes:
        on_refused: called with ``(label, error, first)`` for every refusal.
        on_allowed: called with ``label`` when a refused kind of call went through again.
    """

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.on_refused: Callable[[str, StoreAccessError, bool], None] | None = None
        self.on_allowed: Callable[[str], None] | None = None
        # Replaced, never mutated: the metrics thread reads it without a lock.
        self._refused: Mapping[str, Refusal] = {}

    def translate(self, exc: BaseException, statement: str) -> BaseException:
        """Return cronrace's error for a refusal (and remember it), else ``exc`` itself."""
        refused = classify(exc, self.schema, statement)
        if refused is None:
            return exc
        label, error = refused
        error.__cause__ = exc
        first = label not in self._refused
        if first and len(self._refused) < MAX_REFUSALS:
            self._refused = {**self._refused, label: Refusal(label, error, time.monotonic())}
        if self.on_refused is not None:
            self.on_refused(label, error, first)
        return error

    def refuse(self, label: str, error: StoreAccessError) -> None:
        """Remember a refusal found without an exception (an older schema)."""
        first = label not in self._refused
        if first:
            self._refused = {**self._refused, label: Refusal(label, error, time.monotonic())}
        if self.on_refused is not None:
            self.on_refused(label, error, first)

    def went_through(self, statement: str) -> None:
        """``statement`` succeeded: forget its refusals, and the connection's."""
        if not self._refused:
            return
        cleared = [label for label in self._refused if label in ("connect", statement)]
        if not cleared:
            return
        self._refused = {k: v for k, v in self._refused.items() if k not in cleared}
        for label in cleared:
            if self.on_allowed is not None:
                self.on_allowed(label)

    def schema_fixed(self) -> None:
        """The schema check passed: forget a schema refusal."""
        if "schema" in self._refused:
            self._refused = {k: v for k, v in self._refused.items() if k != "schema"}
            if self.on_allowed is not None:
                self.on_allowed("schema")

    @property
    def refusals(self) -> list[Refusal]:
        """What the server refuses now, oldest first."""
        return sorted(self._refused.values(), key=lambda refusal: refusal.since_mono)

    def problem(self) -> str | None:
        """One line naming what the server refuses, or None when it refuses nothing."""
        refusals = self.refusals
        if not refusals:
            return None
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        return f"PostgreSQL refuses {refusals[0].label}: {refusals[0].error}{more}"
