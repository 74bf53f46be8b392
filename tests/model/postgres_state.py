"""The protocol model on PostgreSQL: what it does to the rows from outside the protocol.

:class:`PostgresProtocolModel` implements the hooks of
:class:`~tests.model.protocol.ProtocolModel` (the rules, checks and invariants are all
there, shared with Redis) on one namespace of a real server, in a schema of the test's
own whose ``now_us()`` (the store's only clock) is replaced by a clock the model moves:

- **time passes**: the clock's offset grows (the real clock still runs under it, as
  Redis's TIME does under the Redis model, so fences still rise between calls). Every
  expiry the store computed (claims, leases, the wipe hold) is an instant on that clock,
  so what the model says has expired has, to every SQL function; then the store's own
  ``prune()`` runs, as a fleet's heartbeats run it, and deletes what it may.
- **a wipe**: every row of the namespace, in every table, is deleted.
- **a failover to a lagging replica**: the namespace's rows are put back as a snapshot
  taken some steps earlier saw them (every table, identity values kept). Expiries are
  instants in the rows: what has expired since is expired on the replica too.
- **garbage**: a job's row (or a claim, or a run record) edited into nonsense within what
  the schema allows: ``text`` a value no code writes and the store must refuse (a
  negative fence, tick or watermark, a lease without a tick, a record that is a JSON
  string), ``number`` a small positive number where a fence or tick belongs (an old value,
  as ``7`` under a Redis key). Redis's other kinds (a hash, a list, a set, a sorted set,
  a stream under a key of another type) have no PostgreSQL meaning: a column has one
  type, and the schema refuses the rest. They are not drawn here.
- **a restart that keeps the data**: nothing to do. On Redis it empties the script cache;
  PostgreSQL keeps its functions in the schema, and its committed rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from hypothesis import strategies as st
from hypothesis.stateful import rule

from cronrace.stores import postgres as postgres_package
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.ddl import upgrade_sql
from cronrace.stores.postgres.queries import bind_schema
from tests.model.protocol import JOBS, KEY_KINDS, NAMESPACE, ProtocolModel

FUNCTIONS_DIR = Path(postgres_package.__file__).parent / "sql" / "functions"

#: Garbage kinds that mean something in a row (see the module doc).
GARBAGE_KINDS = ("text", "number")

#: now_us() = the real clock plus an offset the model moves.
MODEL_CLOCK_SQL = """
CREATE TABLE IF NOT EXISTS @schema@.model_clock (offset_us bigint NOT NULL);
INSERT INTO @schema@.model_clock SELECT 0 WHERE NOT EXISTS (SELECT FROM @schema@.model_clock);
CREATE OR REPLACE FUNCTION @schema@.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + offset_us
  FROM @schema@.model_clock
$$;
"""

#: Far beyond any example: garbage that would otherwise expire stays, as a Redis key
#: written without a TTL does.
FOREVER_US = 10 * 365 * 24 * 3600 * 1_000_000

_GARBAGE_SQL = {
    ("lease", "text"): "lease_owner = 'garbage ☠', lease_fence = -1, lease_tick = NULL, "
    "lease_started_ms = -1, lease_expires_us = @schema@.now_us() + %(forever)s",
    ("lease", "number"): "lease_owner = NULL, lease_fence = 7, lease_tick = 7, "
    "lease_started_ms = 7, lease_expires_us = @schema@.now_us() + %(forever)s",
    ("fence", "text"): "fence = -1",
    ("fence", "number"): "fence = 7",
    ("last", "text"): "watermark = -1",
    ("last", "number"): "watermark = 7",
    ("pending", "text"): "pending_tick = -1, pending_trigger = 'garbage ☠'",
    ("pending", "number"): "pending_tick = 7, pending_trigger = NULL",
    ("state", "text"): "paused = false, run_fence = -1, run_tick = -1, "
    "run_owner = 'garbage ☠', abandoned = -1",
    # Not run_fence = 7: a plausible old fence there is a run no store can tell from one
    # that was granted (it is reported abandoned); garbage is what can be told.
    ("state", "number"): "paused = false, run_tick = 7, skipped_overlap = 7, missed = 7",
}


def create_model_schema(url: str, schema: str) -> None:
    """cronrace's schema under ``schema``, its clock replaced by the model's."""
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(upgrade_sql(schema).encode())
        conn.execute(bind_schema(MODEL_CLOCK_SQL, schema).encode())


#: Bugs put in on purpose (tests/model/mutations.py has Redis's): name -> (the functions
#: file, the text replaced, its replacement).
SQL_MUTATIONS = {
    "renew-unfenced": (
        "lease.sql",
        "IF v_live AND j.lease_fence = p_fence THEN",
        "IF v_live THEN",
    ),
}


def mutate_model_schema(url: str, schema: str, name: str) -> None:
    """Replace one function of the model's schema by a mutated copy (``SQL_MUTATIONS``)."""
    filename, old, new = SQL_MUTATIONS[name]
    text = (FUNCTIONS_DIR / filename).read_text()
    assert text.count(old) == 1, f"mutation {name}: {old!r} is not in {filename} once"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(bind_schema(text.replace(old, new), schema).encode())


def drop_model_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(bind_schema("DROP SCHEMA IF EXISTS @schema@ CASCADE", schema).encode())


class PostgresProtocolModel(ProtocolModel):
    """The model on PostgreSQL; a subclass sets ``url`` and ``schema`` (made by
    :func:`create_model_schema`). One namespace, emptied for every example."""

    url: str
    schema: str

    def open_backend(self) -> None:
        self.raw = psycopg.connect(self.url, autocommit=True)
        self.stores: list[PostgresStore] = []
        self.tables = [
            str(name)
            for (name,) in self._sql(
                "SELECT table_name FROM information_schema.columns "
                "WHERE table_schema = %(schema)s AND column_name = 'ns' ORDER BY table_name",
                schema=self.schema,
            )
        ]

    def close_backend(self) -> None:
        for store in self.stores:
            self.run_async(store.aclose())
        self.raw.close()

    def _sql(self, text: str, **params: Any) -> list[tuple[Any, ...]]:
        cursor = self.raw.execute(
            bind_schema(text, self.schema).encode(), {"ns": NAMESPACE, **params}
        )
        return list(cursor.fetchall()) if cursor.description else []

    def reset_server(self) -> None:
        with self.raw.transaction():
            for table in self.tables:
                self._sql(f"DELETE FROM @schema@.{table} WHERE ns = %(ns)s")  # noqa: S608 - catalog names

    def new_store(self) -> PostgresStore:
        # A pool per node, as in a fleet (one connection is enough: one call at a time).
        store = PostgresStore.from_url(
            f"{self.url}?schema={self.schema}", NAMESPACE, max_connections=1
        )
        self.stores.append(store)
        return store

    def pass_time(self, elapsed_ms: int) -> None:
        self._sql(
            "UPDATE @schema@.model_clock SET offset_us = offset_us + %(us)s", us=elapsed_ms * 1000
        )
        self._sql("SELECT @schema@.prune(%(ns)s, @schema@.now_us())")

    def restart_keeping_data(self) -> None:
        """Nothing is lost: the functions live in the schema, not in a cache."""

    def snapshot_data(self) -> dict[str, list[Any]]:
        return {
            table: [
                row
                for (row,) in self._sql(
                    f"SELECT to_jsonb(t) FROM @schema@.{table} t WHERE ns = %(ns)s"  # noqa: S608
                )
            ]
            for table in self.tables
        }

    def restore_data(self, copy: Any, elapsed_ms: int) -> None:
        """The rows as they were; their expiries are instants, ``elapsed_ms`` needs nothing."""
        with self.raw.transaction():
            self.reset_server()
            for table, rows in copy.items():
                for row in rows:
                    self._sql(
                        f"INSERT INTO @schema@.{table} OVERRIDING SYSTEM VALUE "  # noqa: S608
                        f"SELECT * FROM jsonb_populate_record(NULL::@schema@.{table}, %(row)s)",
                        row=psycopg.types.json.Jsonb(row),
                    )

    def put_garbage(self, job: str, key: str, kind: str) -> None:
        if key == "runs":
            value = '"garbage ☠"' if kind == "text" else "7"
            self._sql(
                "INSERT INTO @schema@.runs (ns, job, written_ms, record) "
                "VALUES (%(ns)s, %(job)s, 7, %(value)s::jsonb)",
                job=job,
                value=value,
            )
            return
        if key == "claim":
            owner, memo = ("garbage ☠", '"garbage ☠"') if kind == "text" else ("7", "7")
            self._sql(
                "INSERT INTO @schema@.claims (ns, job, tick, owner, expires_us, request_id, memo) "
                "VALUES (%(ns)s, %(job)s, %(tick)s, %(owner)s, "
                "@schema@.now_us() + %(forever)s, %(owner)s, %(memo)s::jsonb) "
                "ON CONFLICT (ns, job, tick, trigger_id) DO UPDATE SET owner = excluded.owner, "
                "expires_us = excluded.expires_us, request_id = excluded.request_id, "
                "memo = excluded.memo",
                job=job,
                tick=self.head() + 1,
                owner=owner,
                memo=memo,
                forever=FOREVER_US,
            )
            return
        self._sql(
            "INSERT INTO @schema@.jobs (ns, job) VALUES (%(ns)s, %(job)s) ON CONFLICT DO NOTHING",
            job=job,
        )
        self._sql(
            f"UPDATE @schema@.jobs SET {_GARBAGE_SQL[(key, kind)]} "  # noqa: S608 - our own text
            "WHERE ns = %(ns)s AND job = %(job)s",
            job=job,
            forever=FOREVER_US,
        )

    def read_watermark(self, job: str) -> Any:
        rows = self._sql(
            "SELECT watermark FROM @schema@.jobs WHERE ns = %(ns)s AND job = %(job)s", job=job
        )
        return rows[0][0] if rows else None

    def read_state(
        self,
    ) -> tuple[dict[str, int | None], dict[str, int], dict[str, int | None], int | None]:
        """One statement; a garbled lease, a negative watermark or tick read as absent."""
        rows = self._sql(
            "SELECT j.job, CASE WHEN NOT @schema@.lease_garbled(j) "
            "  AND j.lease_expires_us > t.now THEN j.lease_fence END, "
            "  (j.lease_expires_us - t.now) / 1000, "
            "  CASE WHEN j.watermark >= 0 THEN j.watermark END, "
            "  CASE WHEN j.pending_tick >= 0 THEN j.pending_tick END "
            "FROM @schema@.jobs j, (SELECT @schema@.now_us() AS now) t WHERE j.ns = %(ns)s"
        )
        by_job = {str(row[0]): row[1:] for row in rows}
        leases: dict[str, int | None] = {}
        pttls: dict[str, int] = {}
        marks: dict[str, int | None] = {}
        for job in JOBS:
            fence, left_ms, mark, _pending = by_job.get(job, (None, None, None, None))
            leases[job] = fence
            pttls[job] = max(0, int(left_ms)) if fence is not None and left_ms else 0
            marks[job] = mark
        pending = by_job.get("j-queue", (None, None, None, None))[3]
        return leases, pttls, marks, pending

    @rule(
        job=st.sampled_from(list(JOBS)),
        key=st.sampled_from(KEY_KINDS),
        kind=st.sampled_from(GARBAGE_KINDS),
    )
    def garbage_lands_under_a_key(self, job: str, key: str, kind: str) -> None:
        """Garbage lands in one part of a job's rows (PostgreSQL's kinds: module doc)."""
        self._garbage_lands(job, key, kind)
