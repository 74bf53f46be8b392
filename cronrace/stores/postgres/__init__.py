"""The PostgreSQL store (docs/design.md section 14): the only package that imports psycopg.

``store`` holds :class:`PostgresStore`, the protocol's calls; ``runs`` leases and records;
``operator`` the operator side; ``tables`` stored schedules and the fleet's definitions;
``schema`` and ``ddl`` the versioned migrations (``cronrace db upgrade``, ``cronrace db
sql``); ``database`` the pool; ``errors`` and ``access`` the translation of psycopg's
exceptions. Every statement and function is a
file under ``sql/``, each opening with a header naming its inputs and replies.

``urls`` imports no driver: a URL is checked without the ``postgres`` extra installed, and
:class:`PostgresStore` is imported on first use (PEP 562), so that a missing extra is
reported when a store is opened, as one line naming what to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronrace.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        from cronrace.stores.postgres.store import PostgresStore

        return PostgresStore
    raise AttributeError(name)
