"""The PostgreSQL store: the protocol of docs/design.md sections 3-5 and 8 on one database.

docs/design.md section 14 maps each concept from Redis: a claim is a row inserted with
``ON CONFLICT DO NOTHING`` (one statement per wake-up for every due job); decide, renew and
release are PL/pgSQL functions that lock the job's row, so each is atomic as a Lua script
is on its slot, and answer what the scripts answer; fences are a per-job counter floored
at the database clock in microseconds; records are a table pruned per job to ``history``.
A wake-up's decisions (and finished runs' releases) go in one statement and one commit.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Self

import orjson

from cronrace.errors import StoreAccessError, StoreError, StoreUnavailableError
from cronrace.protocol.values import DecideReply, DecideRequest
from cronrace.stores.contract import Store
from cronrace.stores.postgres.database import Database
from cronrace.stores.postgres.errors import reply_error, translating
from cronrace.stores.postgres.replies import (
    decode_decide,
    decode_quarantined,
)
from cronrace.stores.postgres.runs import RunSide, report_quarantined
from cronrace.stores.postgres.schema import check as check_schema
from cronrace.stores.postgres.tables import latest_changes
from cronrace.stores.postgres.urls import parse_postgres_url
from cronrace.stores.values import (
    Claim,
    ClaimOutcome,
    ClaimReply,
    FleetRequest,
    HeartbeatReply,
    NotReplicatedError,
    Owner,
)

log = logging.getLogger("cronrace.stores.postgres")

#: A lost claim witnesses a loss of the job's rows only while it has this long (s) to live
#: still (as on Redis: stores/redis/commands.py).
WITNESS_MARGIN_S = 1.0


@translating
class PostgresStore(RunSide, Store):
    """One namespace of a PostgreSQL database (see the module doc)."""

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "cronrace",
        *,
        max_connections: int = 16,
        timeout_s: float = 5.0,
        schema_name: str | None = None,
    ) -> Self:
        """Connect lazily to ``url``; nothing is sent until the first call.

        Raises:
            ValueError: the URL cannot be used (the message never contains a password).
        """
        target = parse_postgres_url(url, schema_name)
        db = Database(target, max_connections=max_connections, timeout_s=timeout_s)
        return cls(db, namespace)

    async def prepare(self) -> None:
        """Check the schema: missing or older than this cronrace is refused, naming the
        command that fixes it (``cronrace db upgrade``)."""
        await check_schema(self.db)

    async def ping(self) -> bool:
        """Return whether the database answers."""
        try:
            await self.db.rows("server_time")
        except StoreError:
            return False
        return True

    async def aclose(self) -> None:
        """Close the connection pool and the control listener's connection."""
        await self.listener.aclose()
        await self.db.aclose()

    # -- the race ------------------------------------------------------------------------

    async def claim_each(
        self,
        claims: Sequence[Claim],
        owner: Owner,
        *,
        read_back: bool = False,
        wait_replicas: int = 0,
        wait_ms: int = 0,
    ) -> list[ClaimReply]:
        """Race for every claim in one statement (claim.sql); a loser writes nothing.

        ``wait_replicas`` has no meaning here: a commit is as durable as the server's
        ``synchronous_commit`` and ``synchronous_standby_names`` make it (README, "Choosing
        a store"), so every won claim is confirmed by that many replicas or by none.

        Raises:
            StoreUnavailableError: the database did not answer; every claim is ambiguous.
        """
        if not claims:
            return []
        sent_at = time.monotonic()
        witnesses = [
            self._witness_of(claim.job, sent_at) if self.known_fence(claim.job) == 0 else None
            for claim in claims
        ]
        try:
            rows = await self.db.rows(
                "claim",
                {
                    "ns": self.ns,
                    "owner": str(owner),
                    "jobs": [claim.job for claim in claims],
                    "ticks": [0 if claim.trigger_id else claim.tick_s for claim in claims],
                    "triggers": [claim.trigger_id or "" for claim in claims],
                    "ttls_ms": [claim.ttl_ms for claim in claims],
                    "witnesses": witnesses,
                    "read_backs": [read_back or claim.read_back for claim in claims],
                },
            )
        except StoreAccessError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(f"claim failed: {exc}") from exc
        out: list[ClaimReply] = []
        for claim, (_index, won, fence, witness_kept) in zip(claims, rows, strict=True):
            # The job's counter, read with the race, is this node's evidence that the job
            # has had fences (known_fence); a garbage counter (<= 0) is none.
            self._probed(claim.job, max(0, int(fence or 0)), witness_kept)
            if not won and claim.trigger_id is None and self.known_fence(claim.job) == 0:
                # Lost while the job had no counter: kept as a witness. Should the claim be
                # gone at the next claim although its TTL has not run out, the database lost
                # the job's rows, and the winner may be running under a fence with them.
                expires = sent_at + claim.ttl_ms / 1000 - WITNESS_MARGIN_S
                self._lost_unseen[claim.job] = (claim.tick_s, expires)
            outcome = ClaimOutcome.WON if won else ClaimOutcome.LOST
            out.append(ClaimReply(outcome, wait_replicas))
        return out

    def _witness_of(self, job: str, now_s: float) -> int | None:
        """The tick of the lost claim of ``job`` to read back, while it must still exist."""
        witness = self._lost_unseen.get(job)
        if witness is None:
            return None
        if now_s >= witness[1]:
            del self._lost_unseen[job]  # it may have expired and been pruned: no witness
            return None
        return witness[0]

    def _probed(self, job: str, fence: int, witness_kept: bool | None) -> None:
        if fence:
            self._saw_fence(job, fence)
            self._lost_unseen.pop(job, None)
        elif witness_kept is False and job in self._lost_unseen:
            log.warning(
                "a lost claim vanished before its expiry: taking it as a loss of the job's rows",
                extra={"job": job, "tick": self._lost_unseen[job][0]},
            )
            self._lost_unseen.pop(job, None)
            self._saw_fence(job, 1)

    async def read_claims(self, claims: Sequence[Claim], owner: Owner) -> list[bool]:
        """Read claims back without claiming: True where one holds ``owner`` (ours)."""
        if not claims:
            return []
        rows = await self.db.rows(
            "read_claims",
            {
                "ns": self.ns,
                "jobs": [claim.job for claim in claims],
                "ticks": [0 if claim.trigger_id else claim.tick_s for claim in claims],
                "triggers": [claim.trigger_id or "" for claim in claims],
            },
        )
        value = str(owner)
        return [found == value for _index, found in rows]

    async def decide(self, requests: Sequence[DecideRequest]) -> list[DecideReply | Exception]:
        """Decide every request in one statement (decide(), functions/decide.sql): each
        atomically under its job's row lock, exactly as :func:`cronrace.protocol.decide`.

        Returns:
            One reply per request, or its error: :class:`JobBusyError` (its row stayed
            locked) or :class:`StoreUnavailableError` when that request's function did not
            run to its end (retry), a :class:`StoreError` when it failed.

        Raises:
            StoreUnavailableError: no answer; the decisions may or may not have been
                committed. Sending the same requests again is safe: a decision made answers
                as it did (``replayed``), from the claim it kept its answer under.
        """
        if not requests:
            return []
        payload = [_decide_request(req, self.known_fence(req.job)) for req in requests]
        try:
            rows = await self.db.rows(
                "decide", {"ns": self.ns, "requests": orjson.dumps(payload).decode()}
            )
        except StoreAccessError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(f"decide failed: {exc}") from exc
        out: list[DecideReply | Exception] = []
        for req, (_index, reply) in zip(requests, rows, strict=True):
            if "error" in reply:
                out.append(reply_error(req.job, "decide()", reply["error"], reply["sqlstate"]))
                continue
            try:
                decoded = decode_decide(reply)
            except StoreError as exc:
                out.append(exc)
                continue
            quarantined = decode_quarantined(reply.get("warnings"))
            report_quarantined(quarantined, function="decide", job=req.job, tick=req.tick_s)
            self._saw_fence(req.job, decoded.fence, *decoded.fences)
            out.append(decoded)
        return out

    async def cursors(self, jobs: Sequence[str]) -> dict[str, int | None]:
        """Each job's cursor (None: no decision yet, or the database lost the job's row).

        The fence counters are read too: this node's first evidence that a job has had
        fences (see :meth:`known_fence`).
        """
        if not jobs:
            return {}
        rows = await self.db.rows("cursors", {"ns": self.ns, "jobs": list(jobs)})
        out: dict[str, int | None] = dict.fromkeys(jobs)
        for job, cursor, fence in rows:
            self._saw_fence(str(job), max(0, int(fence or 0)))
            out[str(job)] = None if cursor is None else int(cursor)
        return out

    async def heartbeat(
        self,
        node_id: str,
        *,
        now_ms: int,
        ttl_ms: int,
        epoch_candidate: str,
        prune: bool = True,
        since: str | None = None,
        joined: bool = True,
        live_after_ms: int = 0,
        recheck: Sequence[str] = (),
        asserted_epoch: str = "",
        read_asserted: bool = False,
        fleet: FleetRequest | None = None,
    ) -> HeartbeatReply:
        """Read the database clock and the epoch, refresh this node's heartbeat, read members.

        One statement; with ``prune`` it also deletes, in one bounded batch, claims that
        expired below their job's watermark and members whose heartbeat expired. With
        ``since`` None every live member is read; with a cursor (a number of the change
        log, fleet.sql) only the changes since it. ``fleet``: the fleet's exchange follows,
        in a statement of its own.
        """
        beat = await self._heartbeat(
            node_id,
            now_ms=now_ms,
            ttl_ms=ttl_ms,
            epoch_candidate=epoch_candidate,
            prune=prune,
            since=since,
            joined=joined,
            live_after_ms=live_after_ms,
            recheck=recheck,
            asserted_epoch=asserted_epoch,
            read_asserted=read_asserted,
        )
        if fleet is None:
            return beat
        exchanged = await self.fleet.exchange(
            node_id,
            fleet.fingerprint,
            details=fleet.details,
            now_ms=now_ms,
            since=fleet.since,
            changed=fleet.changed,
        )
        return dataclasses.replace(beat, fleet=exchanged)

    async def _heartbeat(
        self,
        node_id: str,
        *,
        now_ms: int,
        ttl_ms: int,
        epoch_candidate: str,
        prune: bool,
        since: str | None,
        joined: bool,
        live_after_ms: int,
        recheck: Sequence[str],
        asserted_epoch: str,
        read_asserted: bool,
    ) -> HeartbeatReply:
        reply = await self.db.value(
            "heartbeat",
            {
                "ns": self.ns,
                "node": node_id,
                "now_ms": now_ms,
                "ttl_ms": ttl_ms,
                "epoch": epoch_candidate,
                "prune": prune,
                "since": None if since is None else int(since or 0),
                "joined": joined,
                "live_after_ms": live_after_ms,
                "asserted": asserted_epoch,
                "read_asserted": read_asserted,
                "recheck": list(recheck),
            },
        )
        server_time_s = int(reply["server_us"]) / 1e6
        epoch = str(reply["epoch"])
        asserted = {str(node): str(said) for node, said in reply.get("asserted", {}).items()}
        if since is None:
            return HeartbeatReply(
                server_time_s=server_time_s,
                epoch=epoch,
                members={str(node): int(expiry) for node, expiry in reply["members"].items()},
                cursor=str(reply["cursor"]),
                asserted=asserted,
            )
        found = reply["changes"]
        if found["gap"]:
            return HeartbeatReply(
                server_time_s,
                epoch,
                full=False,
                cursor=str(found["cursor"]),
                gap=True,
                asserted=asserted,
            )
        last = latest_changes(found["entries"], ("join", "leave"))
        came = {n: int(v) for n, (k, v) in last.items() if k == "join" and v.isdigit()}
        for node, expiry in reply.get("back", {}).items():
            # Back: beating again since it was read silent (a late beat logs no join).
            if last.get(node, ("",))[0] != "leave":
                came[str(node)] = max(int(expiry), came.get(str(node), 0))
        return HeartbeatReply(
            server_time_s=server_time_s,
            epoch=epoch,
            members=came,
            full=False,
            cursor=str(found["cursor"]),
            silent={str(node): int(expiry) for node, expiry in reply["silent"].items()},
            left=tuple(sorted(n for n, (k, _v) in last.items() if k == "leave")),
            live_count=int(reply["live_count"]),
            asserted=asserted,
        )

    async def leave(self, node_id: str) -> None:
        """Remove this node from the live set, and log that it left."""
        await self.db.rows("leave", {"ns": self.ns, "node": node_id})

    async def register_jobs(self, specs: dict[str, dict[str, str]]) -> None:
        """Publish job definitions so that operator commands can list them."""
        if not specs:
            return
        jobs = sorted(specs)
        await self.db.rows(
            "register_jobs",
            {
                "ns": self.ns,
                "jobs": jobs,
                "specs": [orjson.dumps(specs[job]).decode() for job in jobs],
            },
        )

    # -- what handlers write -------------------------------------------------------------

    async def fenced_set(self, key: str, value: str | bytes, fence: int, ttl_ms: int = 0) -> bool:
        """Write ``value`` under ``key`` (the fenced_values table) unless a higher fence
        wrote it before."""
        data = value.encode() if isinstance(value, str) else value
        return bool(
            await self.db.value(
                "fenced_set",
                {"ns": self.ns, "key": key, "value": data, "fence": fence, "ttl_ms": ttl_ms},
            )
        )


def _decide_request(req: DecideRequest, known_fence: int) -> dict[str, object]:
    """``decide()``'s input for one request; the fence sent is the highest this node knows."""
    return {
        "job": req.job,
        "tick": req.tick_s,
        "cursor": req.cursor_s,
        "from": req.from_s,
        "fire": list(req.fire_s),
        "missed": [[m.first_s, m.last_s, m.count] for m in req.missed],
        "owner": req.owner,
        "overlap": str(req.overlap),
        "lease_ttl_ms": req.lease_ttl_ms,
        "claim_ttl_ms": req.claim_ttl_ms,
        "known_fence": max(req.known_fence, known_fence),
        "trigger_window_ms": req.trigger_window_ms,
        "trigger_id": req.trigger_id,
        "history": req.history,
    }


def _won(replies: Sequence[ClaimReply]) -> list[bool]:
    """The all-or-nothing view of :meth:`PostgresStore.claim_each`."""
    if any(reply.outcome is ClaimOutcome.UNKNOWN for reply in replies):
        raise StoreUnavailableError("claim failed: the database did not answer")
    short = [reply for reply in replies if reply.outcome is ClaimOutcome.NOT_REPLICATED]
    if short:
        raise NotReplicatedError([reply.outcome is not ClaimOutcome.LOST for reply in replies], 0)
    return [reply.outcome is ClaimOutcome.WON for reply in replies]
