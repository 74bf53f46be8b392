"""Script replies decoded once, into enums and value types (stores/redis/decisions.py,
stores/redis/replies.py)."""

from __future__ import annotations

import pytest

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.protocol import Answer, DecideReply, Record, Release, Renewal, Verdict
from cronrace.stores.redis.decisions import (
    decode_claim,
    decode_decide,
    decode_renewal,
    decode_run_end,
    encode_memo,
)
from cronrace.stores.redis.replies import decode_claim_owner
from cronrace.stores.values import Owner


def decide_reply(answer: bytes, verdict: bytes = b"", *records: bytes) -> list[object]:
    """A decide.lua reply: answer, cursor, verdict, fence, fences, ticks, hold_ms,
    data_lost, replayed, renewed, warnings, then the records appended."""
    return [answer, b"100", verdict, 7, b"", b"100", 0, 0, 0, 0, b"", *records]


def test_an_owner_is_built_and_read_back_alike() -> None:
    owner = Owner.new("node-1")
    assert Owner.parse(str(owner)) == owner
    assert owner.node_id == "node-1"
    assert len(owner.nonce) == 12
    assert Owner.new("node-1") != owner  # one process, one nonce


@pytest.mark.parametrize(
    ("raw", "owner"),
    [
        (None, None),
        (b"n1:ab12", Owner("n1", "ab12")),
        (b"n1:ab12\n100\nrun\n7\n\n100\n0\n0", Owner("n1", "ab12")),  # decided: its memo
        ("n2:ff", Owner("n2", "ff")),
    ],
)
def test_a_claim_value_names_its_owner(raw: object, owner: Owner | None) -> None:
    assert decode_claim_owner(raw) == owner


@pytest.mark.parametrize("answer", list(Answer))
def test_every_answer_decodes_to_its_enum(answer: Answer) -> None:
    reply, quarantined = decode_decide(decide_reply(answer.value.encode()))
    assert (reply.answer, reply.cursor_s, reply.verdict) == (answer, 100, None)
    assert quarantined == ()


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_verdict_decodes_with_the_records_appended(verdict: Verdict) -> None:
    record = RunRecord("j", 100, "n1", Outcome.GRANTED, fence=7)
    reply, _ = decode_decide(decide_reply(b"decided", verdict.value.encode(), record.to_json()))
    assert (reply.verdict, reply.fence, reply.ticks_s) == (verdict, 7, (100,))
    assert reply.records == (Record(100, Outcome.GRANTED, "n1", 7),)


def test_an_unknown_answer_or_decision_is_a_store_error_not_a_crash() -> None:
    with pytest.raises(StoreError, match="unknown value"):
        decode_decide(decide_reply(b"launched"))
    with pytest.raises(StoreError, match="unknown value"):
        decode_decide(decide_reply(b"decided", b"sprinted"))
    with pytest.raises(StoreError, match="unknown value"):
        decode_run_end([b"kept", 0, 0, b"", 0, b""])
    with pytest.raises(StoreError, match=r"decide\.lua answered"):
        decode_decide([b"decided"])


def test_a_record_no_script_writes_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot have written"):
        decode_decide(decide_reply(b"decided", b"run", b"not json"))


@pytest.mark.parametrize(
    ("raw", "decision"),
    [
        (b"released", Release.RELEASED),
        (b"run", Release.HANDED_ON),
        (b"not_owner", Release.NOT_OWNER),
    ],
)
def test_release_decisions_decode_to_enums(raw: bytes, decision: Release) -> None:
    reply, quarantined = decode_run_end([raw, 5, 101, b"t1", 0, b""])
    assert (reply.decision, reply.fence, reply.tick_s, reply.trigger_id) == (
        decision,
        5,
        101,
        "t1",
    )
    assert quarantined == ()


@pytest.mark.parametrize(
    ("raw", "renewal"),
    [(1, Renewal.RENEWED), (2, Renewal.REASSERTED), (0, Renewal.GONE), (-1, Renewal.TAKEN)],
)
def test_renewals_decode_to_enums(raw: int, renewal: Renewal) -> None:
    assert decode_renewal([raw, b""]) == (renewal, ())


def test_an_unknown_renewal_answer_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"renew_lease\.lua answered"):
        decode_renewal([3, b""])


def test_a_remembered_answer_reads_back_as_written() -> None:
    memo = DecideReply(
        Answer.DECIDED,
        cursor_s=160,
        verdict=Verdict.RUN,
        fence=9,
        fences=(9, 10),
        ticks_s=(100, 160),
        hold_ms=300,
        data_lost=True,
    )
    raw = encode_memo("n1:ab", memo).encode()
    assert decode_claim(raw) == ("n1:ab", memo)
    assert decode_claim(b"n1:ab") == ("n1:ab", None)  # won, undecided
    assert decode_claim_owner(raw) == Owner("n1", "ab")


def test_change_log_entries_decode_from_bytes_or_text_and_skip_malformed_ones() -> None:
    from cronrace.stores.redis import changes

    reply = [
        (b"5-0", {b"n": b"a", b"k": b"join", b"v": b"9000"}),
        (b"6-0", {b"n": b"b", b"k": b"leave"}),
        (b"7-0", {b"x": b"garbage"}),
        (b"8-0", {}),
        ("9-0", {"n": "c", "k": "print", "v": "f1 f2"}),
    ]
    assert changes.decode(reply) == [
        ("5-0", "a", "join", "9000"),
        ("6-0", "b", "leave", ""),
        ("9-0", "c", "print", "f1 f2"),
    ]
