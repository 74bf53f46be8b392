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

from cronrace.model.records import RunRecord
from cronrace.stores.values import JobState, LeaseInfo, Owner, Quarantined

log = logging.getLogger("cronrace.stores.redis")


def decode_owner(raw: Any) -> Owner | None:
    """An owner as a script answers it ('' when there is none)."""
    if not raw:
        return None
    text = decode_text(raw)
    return Owner.parse(text) if text else None


def decode_claim_owner(raw: Any) -> Owner | None:
    """Who holds a claim key: its value is ``<owner>``, and once decided
    ``<owner>\n<memo>`` (decide.lua keeps its answer there)."""
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
    job: str, cursor: Any, lease: Any, lease_ttl_ms: Any, state: Any, fence: Any
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
            tick_s=int_or_none((held.get("ticks") or "").split(" ")[0]) or 0,
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
        cursor_s=int_or_none(cursor),
        lease=lease_info,
        paused=fields.get("paused") == "1",
        counters=counters,
        spec={k.removeprefix("spec_"): v for k, v in fields.items() if k.startswith("spec_")},
        last_fence=int_or_none(fence),
    )


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
