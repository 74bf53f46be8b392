"""What goes into the Redis scripts and what comes back, typed; and reply decoding.

The scripts speak strings and integers; the rest of cronrace speaks the enums and value
types here (decisions, modes, the lease owner), built and parsed in this module only. A
script's reply is decoded once, here. Replies are read as bytes and decoded with
``errors="replace"``: a value that is not UTF-8 (garbage under one of our keys) is reported
by the caller, never a crash in decoding.
"""

from __future__ import annotations

import logging
from typing import Any

from cronrace.errors import StoreError
from cronrace.model.records import RunRecord
from cronrace.stores.values import (
    AcquireDecision,
    AcquireReply,
    JobState,
    LeaseInfo,
    Owner,
    Quarantined,
    ReleaseDecision,
    ReleaseReply,
    Renewal,
)

log = logging.getLogger("cronrace.stores.redis")


#: The decisions as the scripts spell them: read with one lookup (every run reads two).
_ACQUIRE_DECISIONS = {d.value.encode(): d for d in AcquireDecision}
_RELEASE_DECISIONS = {d.value.encode(): d for d in ReleaseDecision}


def decode_owner(raw: Any) -> Owner | None:
    """An owner as a script answers it ('' when there is none)."""
    if not raw:
        return None
    text = decode_text(raw)
    return Owner.parse(text) if text else None


def decode_claim_owner(raw: Any) -> Owner | None:
    """Who holds a claim key: its value is ``<owner>``, and once decided
    ``<owner>\n<request_id>\n<reply>`` (acquire.lua keeps its answer there)."""
    if raw is None:
        return None
    return Owner.parse(decode_text(raw).split("\n", 1)[0])


def decode_quarantined(raw: Any) -> tuple[Quarantined, ...]:
    """Decode a script's ``warnings`` string: ``kind|key|moved_to`` items, comma-separated."""
    if not raw:
        return ()  # nearly every reply: nothing was moved aside
    out = []
    for item in decode_text(raw).split(","):
        kind, _, rest = item.partition("|")
        key, _, moved_to = rest.partition("|")
        if kind:
            out.append(Quarantined(kind, key, moved_to))
    return tuple(out)


def decode_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return str(raw)


def int_or_none(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def decode_job_state(
    job: str, last: Any, lease: Any, lease_ttl_ms: Any, state: Any, fence: Any
) -> JobState:
    """Build a job's state from the raw replies of ``Store.job_states``; garbage reads as unset."""
    fields = {decode_text(k): decode_text(v) for k, v in (state or {}).items()}
    held = {decode_text(k): decode_text(v) for k, v in (lease or {}).items()}
    lease_fence = int_or_none(held.get("fence"))
    lease_info = None
    if lease_fence is not None:
        lease_info = LeaseInfo(
            owner=Owner.parse(held.get("owner", "")),
            fence=lease_fence,
            tick_s=int_or_none(held.get("tick")) or 0,
            started_ms=int_or_none(held.get("started_ms")) or 0,
            ttl_ms=int(lease_ttl_ms),
        )
    counters = {
        key: value
        for key in ("skipped_overlap", "skipped_paused", "missed", "queued", "abandoned")
        if (value := int_or_none(fields.get(key))) is not None
    }
    return JobState(
        job=job,
        watermark_s=int_or_none(last),
        lease=lease_info,
        paused=fields.get("paused") == "1",
        counters=counters,
        spec={k.removeprefix("spec_"): v for k, v in fields.items() if k.startswith("spec_")},
        last_fence=int_or_none(fence),
    )


def decode_acquire(reply: Any) -> AcquireReply:
    """Decode one ``acquire.lua`` reply (a fresh answer or a replayed one).

    Raises:
        StoreError: the reply is not one ``acquire.lua`` gives (another version's script).
    """
    decision = _ACQUIRE_DECISIONS.get(reply[0]) if isinstance(reply[0], bytes) else None
    if decision is None:
        try:
            decision = AcquireDecision(decode_text(reply[0]))
        except ValueError:
            raise StoreError(f"acquire.lua answered an unknown decision {reply[0]!r}") from None
    prev = int(reply[2])
    quarantined = decode_quarantined(reply[8])
    return AcquireReply(
        decision=decision,
        fence=int(reply[1]),
        prev_watermark_s=None if prev < 0 else prev,
        holder_fence=int(reply[3]),
        holder_owner=decode_owner(reply[4]),
        abandoned_tick_s=int(reply[5]),
        abandoned_fence=int(reply[6]),
        abandoned_owner=decode_owner(reply[7]),
        warnings=tuple(q.kind for q in quarantined) if quarantined else (),
        superseded_tick_s=int(reply[9]),
        hold_ms=int(reply[10]),
        data_lost=int(reply[11]) == 1,
        superseded_trigger_id=(decode_text(reply[12]) or None) if reply[12] else None,
        late_from_s=int(reply[13]),
        replayed=int(reply[14]) == 1,
        renewed=int(reply[15]) == 1,
        quarantined=quarantined,
    )


def decode_release(reply: Any, quarantined: tuple[Quarantined, ...]) -> ReleaseReply:
    """Decode one ``release.lua`` reply (its quarantined keys decoded by the caller).

    Raises:
        StoreError: the reply is not one ``release.lua`` gives.
    """
    decision = _RELEASE_DECISIONS.get(reply[0]) if isinstance(reply[0], bytes) else None
    if decision is None:
        try:
            decision = ReleaseDecision(decode_text(reply[0]))
        except ValueError:
            raise StoreError(f"release.lua answered an unknown decision {reply[0]!r}") from None
    return ReleaseReply(
        decision=decision,
        fence=int(reply[1]),
        tick_s=int(reply[2]),
        warnings=tuple(q.kind for q in quarantined) if quarantined else (),
        hold_ms=int(reply[4]),
        quarantined=quarantined,
        trigger_id=(decode_text(reply[5]) or None) if reply[5] else None,
    )


def decode_renewal(raw: Any) -> Renewal:
    """Decode ``renew.lua``'s answer.

    Raises:
        StoreError: not one ``renew.lua`` gives.
    """
    try:
        return Renewal(int(raw))
    except (TypeError, ValueError):
        raise StoreError(f"renew.lua answered {raw!r}") from None


def decode_run_entries(job: str, entries: Any) -> list[RunRecord]:
    """Decode history stream entries; an unreadable one is logged and skipped."""
    out = []
    for entry_id, fields in entries:
        raw = fields.get(b"r", fields.get("r"))
        try:
            out.append(RunRecord.from_json(raw or b"", record_id=decode_text(entry_id)))
        except ValueError as exc:
            log.warning(
                "unreadable run record skipped",
                extra={"job": job, "record_id": decode_text(entry_id), "error": str(exc)},
            )
    return out
