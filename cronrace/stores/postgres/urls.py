"""PostgreSQL URLs: libpq's own, plus the options cronrace reads itself.

``postgresql://[user[:password]@][host][:port][/dbname][?option=value...]`` and the
``postgres://`` spelling. Every libpq option passes through untouched (``sslmode``,
``sslrootcert``, ``options=-c statement_timeout=5s``, ``application_name``, several
``host=`` lists ...); cronrace takes out its own before libpq sees the URL:

- ``schema``: the schema holding cronrace's tables (default ``cronrace``), a plain
  lower-case identifier so that it is never quoted wrongly;
- ``poll_ms``: how often a node looks for control notices (manual triggers, stored
  schedule changes) where ``LISTEN`` does not reach it (behind a transaction-mode
  pooler); default 500;
- ``listen``: ``on`` (default: ``LISTEN`` for notices where it is proved to work,
  stores/postgres/listen.py) or ``off`` (always poll).

Messages never contain a password: :func:`redact` replaces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "cronrace"
DEFAULT_POLL_MS = 500
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_OWN_OPTIONS = ("schema", "poll_ms", "listen")


@dataclass(frozen=True, slots=True)
class PostgresTarget:
    """A parsed PostgreSQL URL.

    Attributes:
        conninfo: the URL as libpq takes it (cronrace's own options removed).
        schema: the schema of cronrace's tables.
        poll_ms: how often control notices are looked for where LISTEN does not work.
        listen: whether to LISTEN for notices (where it is proved to work).
        redacted: the URL without its password, for messages.
    """

    conninfo: str
    schema: str
    poll_ms: int
    redacted: str
    listen: bool = True


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server (by its scheme)."""
    return url.partition("://")[0].lower() in SCHEMES


def validate_schema_name(name: str) -> str:
    """Return ``name`` if it can name cronrace's schema.

    Raises:
        ValueError: it is not a lower-case identifier of at most 63 characters.
    """
    if not _SCHEMA_NAME.match(name):
        raise ValueError(
            f"schema {name!r} is not a lower-case identifier "
            "(letters, digits and '_', at most 63, not starting with a digit)"
        )
    return name


def parse_postgres_url(url: str, schema: str | None = None) -> PostgresTarget:
    """Parse ``url``; ``schema`` (a setting) applies when the URL names none.

    Raises:
        ValueError: not a PostgreSQL URL, or one of cronrace's options is wrong (the
            message never contains a password).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"not a PostgreSQL URL: {redact(url)!r} (postgresql://...)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {name: value for name, value in query if name in _OWN_OPTIONS}
    rest = [(name, value) for name, value in query if name not in _OWN_OPTIONS]
    chosen = validate_schema_name(own.get("schema") or schema or DEFAULT_SCHEMA)
    poll_raw = own.get("poll_ms", str(DEFAULT_POLL_MS))
    if not poll_raw.isdigit() or not 10 <= int(poll_raw) <= 60_000:
        raise ValueError(f"poll_ms={poll_raw!r} in {redact(url)!r}: a number from 10 to 60000")
    listen_raw = own.get("listen", "on").lower()
    if listen_raw not in ("on", "off"):
        raise ValueError(f"listen={listen_raw!r} in {redact(url)!r}: on or off")
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(rest, quote_via=quote), "")
    )
    return PostgresTarget(conninfo, chosen, int(poll_raw), redact(url), listen_raw == "on")


def redact(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` option) replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':***' if sep else ''}@{hosts}"
    query = [
        (name, "***" if name == "password" else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(
        (parts.scheme, netloc, parts.path, urlencode(query, safe="*/", quote_via=quote), "")
    )
