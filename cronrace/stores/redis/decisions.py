"""What goes into ``decide.lua``, ``renew_lease.lua`` and ``end_run.lua``, and what comes back.

The scripts implement the reference protocol (:mod:`cronrace.protocol`); their arguments
are built from its requests here and their replies decoded here, once, into its values.
A record the scripts appended comes back as the JSON they wrote (a
:class:`~cronrace.model.records.RunRecord`) and is decoded into a
:class:`cronrace.protocol.Record`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronrace.errors import StoreError
from cronrace.model.records import RunRecord
from cronrace.protocol import (
    Answer,
    DecideReply,
    DecideRequest,
    Record,
    Release,
    ReleaseReply,
    Renewal,
    RenewRequest,
    Verdict,
)
from cronrace.stores.redis.keys import Keys
from cronrace.stores.redis.replies import decode_quarantined, decode_text
from cronrace.stores.values import Quarantined, RunEnd, reference_record

#: How many records a job's history keeps when a request does not say.
DEFAULT_HISTORY = 1000

_ANSWERS = {a.value.encode(): a for a in Answer}
_VERDICTS = {v.value.encode(): v for v in Verdict}
_RELEASES = {r.value.encode(): r for r in Release}

Call = tuple[list[str], list[Any]]


def decide_call(keys: Keys, req: DecideRequest, known_fence: int) -> Call:
    """The keys and arguments of ``decide.lua`` for ``req``."""
    of = keys.of(req.job)
    if req.trigger_id is None:
        claim = keys.claim(req.job, req.tick_s)
    else:
        claim = keys.trigger_claim(req.job, req.trigger_id)
    names = [
        of.lease,
        of.fence,
        of.cursor,
        of.pending,
        of.state,
        claim,
        of.hold,
        of.runs,
        of.triggers,
    ]
    args: list[Any] = [
        req.tick_s,
        "" if req.cursor_s is None else req.cursor_s,
        req.from_s,
        " ".join(map(str, req.fire_s)),
        " ".join(f"{m.first_s}:{m.last_s}:{m.count}" for m in req.missed),
        req.owner,
        str(req.overlap),
        req.lease_ttl_ms,
        req.claim_ttl_ms,
        max(req.known_fence, known_fence),
        req.trigger_window_ms,
        req.trigger_id or "",
        req.history or DEFAULT_HISTORY,
        of.quarantine,
        req.job,
    ]
    return names, args


def renew_call(keys: Keys, job: str, req: RenewRequest) -> Call:
    """The keys and arguments of ``renew_lease.lua``."""
    of = keys.of(job)
    args = [req.fence, req.ttl_ms, of.quarantine, req.owner or "", req.tick_s]
    args += ["1" if req.starting else "0", req.trigger_id or "", job, req.history or 1000]
    return [of.lease, of.hold, of.fence, of.state, of.runs], args


def end_run_call(keys: Keys, req: RunEnd) -> Call:
    """The keys and arguments of ``end_run.lua``."""
    of = keys.of(req.job)
    names = [of.lease, of.fence, of.pending, of.state, of.runs, of.hold]
    record = req.record.to_json() if req.record is not None else b""
    args = [
        req.fence,
        str(req.owner),
        req.lease_ttl_ms,
        record,
        req.history or DEFAULT_HISTORY,
        of.quarantine,
        "1" if req.hand_on else "0",
        req.job,
    ]
    return names, args


def encode_memo(owner: str, memo: DecideReply) -> str:
    """A decided claim's value as ``decide.lua`` writes it: ``<owner>\n``, then the
    answer's cursor, verdict, fence, fences, ticks, hold_ms and data_lost, one a line.

    (The store itself never reads a memo: ``decide.lua`` does; this spells it for the
    tools and tests that put a job's state into Redis or read it back.)
    """
    parts = [
        "" if memo.cursor_s is None else str(memo.cursor_s),
        "" if memo.verdict is None else memo.verdict.value,
        str(memo.fence),
        " ".join(map(str, memo.fences)),
        " ".join(map(str, memo.ticks_s)),
        str(memo.hold_ms),
        "1" if memo.data_lost else "0",
    ]
    return owner + "\n" + "\n".join(parts)


def decode_claim(raw: Any) -> tuple[str, DecideReply | None]:
    """A claim's owner, and the answer remembered under it once decided (else None)."""
    owner, decided, memo = decode_text(raw).partition("\n")
    if not decided:
        return owner, None
    cursor, verdict, fence, fences, ticks, hold_ms, data_lost = memo.split("\n")
    return owner, DecideReply(
        Answer.DECIDED,
        cursor_s=int(cursor) if cursor else None,
        verdict=Verdict(verdict) if verdict else None,
        fence=int(fence),
        fences=_ints(fences),
        ticks_s=_ints(ticks),
        hold_ms=int(hold_ms),
        data_lost=data_lost == "1",
    )


def _records(raw: Sequence[Any]) -> tuple[Record, ...]:
    try:
        return tuple(reference_record(RunRecord.from_json(entry)) for entry in raw)
    except ValueError as exc:
        raise StoreError(f"a script answered a record it cannot have written: {exc}") from exc


def _ints(raw: Any) -> tuple[int, ...]:
    return tuple(int(word) for word in decode_text(raw).split())


def _enum(table: dict[bytes, Any], raw: Any, script: str) -> Any:
    found = table.get(raw if isinstance(raw, bytes) else decode_text(raw).encode())
    if found is None:
        raise StoreError(f"{script} answered an unknown value {raw!r}")
    return found


def decode_decide(reply: Any) -> tuple[DecideReply, tuple[Quarantined, ...]]:
    """Decode one ``decide.lua`` reply, and the keys it moved aside.

    Raises:
        StoreError: not a reply ``decide.lua`` gives (another version's script).
    """
    try:
        cursor = decode_text(reply[1])
        decided = DecideReply(
            answer=_enum(_ANSWERS, reply[0], "decide.lua"),
            cursor_s=int(cursor) if cursor else None,
            verdict=_enum(_VERDICTS, reply[2], "decide.lua") if reply[2] else None,
            fence=int(reply[3]),
            fences=_ints(reply[4]),
            ticks_s=_ints(reply[5]),
            hold_ms=int(reply[6]),
            data_lost=int(reply[7]) == 1,
            replayed=int(reply[8]) == 1,
            renewed=int(reply[9]) == 1,
            records=_records(reply[11:]),
        )
    except (IndexError, TypeError, ValueError) as exc:
        raise StoreError(f"decide.lua answered {reply!r}: {exc}") from exc
    return decided, decode_quarantined(reply[10])


def decode_renewal(reply: Any) -> tuple[Renewal, tuple[Quarantined, ...]]:
    """Decode ``renew_lease.lua``'s reply.

    Raises:
        StoreError: not a reply ``renew_lease.lua`` gives.
    """
    try:
        return Renewal(int(reply[0])), decode_quarantined(reply[1])
    except (IndexError, TypeError, ValueError) as exc:
        raise StoreError(f"renew_lease.lua answered {reply!r}") from exc


def decode_run_end(reply: Any) -> tuple[ReleaseReply, tuple[Quarantined, ...]]:
    """Decode one ``end_run.lua`` reply, and the keys it moved aside.

    Raises:
        StoreError: not a reply ``end_run.lua`` gives.
    """
    try:
        ended = ReleaseReply(
            decision=_enum(_RELEASES, reply[0], "end_run.lua"),
            fence=int(reply[1]),
            tick_s=int(reply[2]),
            trigger_id=decode_text(reply[3]) or None,
            hold_ms=int(reply[4]),
            records=_records(reply[6:]),
        )
    except (IndexError, TypeError, ValueError) as exc:
        raise StoreError(f"end_run.lua answered {reply!r}: {exc}") from exc
    return ended, decode_quarantined(reply[5])
