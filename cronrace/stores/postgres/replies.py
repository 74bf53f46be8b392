"""The PostgreSQL functions' answers, decoded once into the values every store speaks.

The functions answer JSON objects (``jsonb``, decoded by psycopg into dicts) whose fields
are the ones the Redis scripts answer; rows of the operator reads are typed columns. A
field missing or of the wrong type (a function of another version) is a
:class:`~cronrace.errors.StoreError`, never a crash in decoding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from cronrace.errors import StoreError
from cronrace.model.records import RunRecord
from cronrace.protocol.values import (
    Answer,
    DecideReply,
    Record,
    Release,
    Verdict,
)
from cronrace.protocol.values import ReleaseReply as RunEndReply
from cronrace.protocol.values import (
    Renewal as LeaseRenewal,
)
from cronrace.stores.values import (
    JobState,
    LeaseInfo,
    Owner,
    Quarantined,
    reference_record,
)

log = logging.getLogger("cronrace.stores.postgres")

COUNTERS = ("skipped_overlap", "skipped_paused", "missed", "queued", "abandoned")


def owner_or_none(text: Any) -> Owner | None:
    return Owner.parse(str(text)) if text else None


def decode_quarantined(raw: Any) -> tuple[Quarantined, ...]:
    """A function's ``warnings``: ``kind|where|moved_to`` items, comma-separated."""
    out = []
    for item in str(raw or "").split(","):
        kind, _, rest = item.partition("|")
        where, _, moved_to = rest.partition("|")
        if kind:
            out.append(Quarantined(kind, where, moved_to))
    return tuple(out)


def decode_job_state(row: Sequence[Any]) -> JobState:
    """A row of ``job_states.sql``; a lease whose owner or fence is unusable reads as none."""
    (job, cursor, fence, owner, lease_fence, lease_tick, started_ms, left_ms, paused) = row[:9]
    # A decision adds to every counter at once (0 to those its records do not count):
    # shown like Redis's, a counter is there once something was counted.
    counters = {name: int(value) for name, value in zip(COUNTERS, row[9:14], strict=True) if value}
    spec_raw = row[14] if isinstance(row[14], dict) else {}
    lease = None
    if lease_fence is not None and left_ms is not None and owner:
        lease = LeaseInfo(
            owner=Owner.parse(owner),
            fence=int(lease_fence),
            tick_s=int(lease_tick or 0),
            started_ms=int(started_ms or 0),
            ttl_ms=int(left_ms),
        )
    return JobState(
        job=str(job),
        cursor_s=None if cursor is None else int(cursor),
        lease=lease,
        paused=bool(paused),
        counters=counters,
        spec={str(k): str(v) for k, v in spec_raw.items()},
        last_fence=None if fence is None else int(fence),
    )


def decode_records(job: str, rows: Sequence[Sequence[Any]]) -> list[RunRecord]:
    """Rows ``(id, written_ms, record text)`` as run records; an unreadable one is logged
    and skipped. A record's id is ``<written_ms>-<id>``, like a Redis stream entry's."""
    out = []
    for record_id, written_ms, text in rows:
        name = f"{written_ms}-{record_id}"
        try:
            out.append(RunRecord.from_json(text or "", record_id=name))
        except ValueError as exc:
            log.warning(
                "unreadable run record skipped",
                extra={"job": job, "record_id": name, "error": str(exc)},
            )
    return out


def decode_protocol_records(raw: Any) -> tuple[Record, ...]:
    """The records a function says it appended (RunRecord JSON objects), as the reference's.

    Raises:
        ValueError: one is not a run record.
    """
    if not isinstance(raw, list):
        raise ValueError(f"records is {raw!r}, not a list")  # noqa: TRY004
    return tuple(reference_record(RunRecord.from_json(orjson.dumps(item))) for item in raw)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def decode_decide(reply: Mapping[str, Any]) -> DecideReply:
    """Decode one ``decide()`` answer, or an answer remembered under a claim (its ``memo``:
    no records, neither replayed nor renewed).

    Raises:
        StoreError: not an answer ``decide()`` gives.
    """
    try:
        verdict = reply.get("verdict")
        return DecideReply(
            answer=Answer(str(reply["answer"])),
            cursor_s=_optional_int(reply.get("cursor")),
            verdict=None if verdict is None else Verdict(str(verdict)),
            fence=int(reply.get("fence") or 0),
            fences=tuple(int(fence) for fence in reply.get("fences") or ()),
            ticks_s=tuple(int(tick) for tick in reply.get("ticks") or ()),
            hold_ms=int(reply.get("hold_ms") or 0),
            data_lost=bool(reply.get("data_lost")),
            replayed=bool(reply.get("replayed")),
            renewed=bool(reply.get("renewed")),
            records=decode_protocol_records(reply.get("records") or []),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"decide() answered {dict(reply)!r}: {exc}") from None


def decode_lease_renewal(reply: Mapping[str, Any]) -> tuple[LeaseRenewal, tuple[Quarantined, ...]]:
    """Decode ``renew_lease()``'s answer and what it moved aside.

    Raises:
        StoreError: not an answer ``renew_lease()`` gives.
    """
    try:
        return LeaseRenewal(int(reply["answer"])), decode_quarantined(reply.get("warnings"))
    except (KeyError, TypeError, ValueError):
        raise StoreError(f"renew_lease() answered {dict(reply)!r}") from None


def decode_end_run(reply: Mapping[str, Any]) -> RunEndReply:
    """Decode one ``end_run()`` answer.

    Raises:
        StoreError: not an answer ``end_run()`` gives.
    """
    try:
        trigger = reply.get("trigger")
        return RunEndReply(
            decision=Release(str(reply["decision"])),
            fence=int(reply.get("fence") or 0),
            tick_s=int(reply.get("tick") or 0),
            trigger_id=None if trigger is None else str(trigger),
            hold_ms=int(reply.get("hold_ms") or 0),
            records=decode_protocol_records(reply.get("records") or []),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"end_run() answered {dict(reply)!r}: {exc}") from None
