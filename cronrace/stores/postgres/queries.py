"""The SQL files of the PostgreSQL store, read once and bound to a schema.

``sql/migrations/NNNN_*.sql`` create and change the tables (applied once each, in order);
``sql/functions/*.sql`` hold the PL/pgSQL functions (replaced at every upgrade);
``sql/statements/*.sql`` one statement each, as the store sends it. Every file opens with
a header naming its inputs and replies. ``@schema@`` in a file stands for the schema's
quoted name; a schema name is a plain identifier (checked in ``urls.py``), so quoting it
is all the escaping it needs.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from cronrace.stores.postgres.urls import validate_schema_name

SQL_DIR = Path(__file__).parent / "sql"
#: The functions, in the order they are created (each may call those before it).
FUNCTION_FILES = ("lib", "records", "fleet", "control", "decide", "runs")


@functools.cache
def read_sql(relative: str) -> str:
    """The text of ``sql/<relative>``."""
    return (SQL_DIR / relative).read_text(encoding="utf-8")


def strip_header(text: str) -> str:
    """The file without its leading comment lines (what is sent to the server)."""
    lines = text.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines)


def bind_schema(text: str, schema: str) -> str:
    """``text`` with ``@schema@`` replaced by the quoted schema name."""
    return text.replace("@schema@", f'"{validate_schema_name(schema)}"')


def migrations() -> list[tuple[int, str, str]]:
    """Every migration as ``(version, file name, text)``, oldest first."""
    out = []
    for path in sorted((SQL_DIR / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql")):
        out.append((int(path.name[:4]), path.name, read_sql(f"migrations/{path.name}")))
    return out


def latest_version() -> int:
    """The version the newest migration brings the schema to."""
    return migrations()[-1][0]


def functions_text() -> str:
    """Every function file, in creation order."""
    return "\n".join(read_sql(f"functions/{name}.sql") for name in FUNCTION_FILES)


@functools.cache
def functions_digest() -> str:
    """A digest of the functions' source: an upgrade that changed them is seen."""
    return hashlib.sha256(functions_text().encode()).hexdigest()[:16]


class Statements:
    """The statements of ``sql/statements/``, bound to one schema, by file name."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema_name(schema)
        self._bound: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        text = self._bound.get(name)
        if text is None:
            text = bind_schema(strip_header(read_sql(f"statements/{name}.sql")), self.schema)
            self._bound[name] = text
        return text
