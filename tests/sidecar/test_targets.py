"""Each target against a real receiver: the fence and the tick arrive, a stale fence is refused."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError

from cronrace.errors import TargetError
from cronrace.sidecar.streams import OtherRedis, StreamTarget
from cronrace.sidecar.targets import CommandTarget, HttpTarget
from cronrace.specs.targets import CommandSpec, HttpSpec, StreamSpec, is_loopback
from cronrace.stores.redis import Store
from tests.helpers import wait_for
from tests.redis_server import RedisServer, free_port
from tests.sidecar.conftest import DemoApp, make_ctx, process_alive, wait_until

PY = sys.executable

# -- http ---------------------------------------------------------------------------------


async def test_http_target_sends_job_tick_fence_and_idempotency_key(demo_app: DemoApp) -> None:
    target = HttpTarget(HttpSpec(url=f"{demo_app.url}/jobs/backup"))
    detail = await target(make_ctx(tick_s=1_700_000_000, fence=7))
    assert detail["status"] == 200
    [call] = demo_app.calls("backup")
    assert (call["tick"], call["fence"], call["key"]) == (1_700_000_000, 7, "backup:1700000000")
    assert call["result"] == "done"


async def test_http_receiver_refuses_a_stale_fence(demo_app: DemoApp) -> None:
    target = HttpTarget(HttpSpec(url=f"{demo_app.url}/jobs/backup"))
    await target(make_ctx(tick_s=1_700_000_010, fence=9))
    with pytest.raises(TargetError, match="status 409"):
        await target(make_ctx(tick_s=1_700_000_000, fence=8))
    assert [c["result"] for c in demo_app.calls("backup")] == ["done", "stale"]


async def test_http_repeated_tick_is_answered_as_duplicate(demo_app: DemoApp) -> None:
    target = HttpTarget(HttpSpec(url=f"{demo_app.url}/jobs/backup"))
    await target(make_ctx(fence=3))
    await target(make_ctx(fence=3))
    assert [c["result"] for c in demo_app.calls("backup")] == ["done", "duplicate"]


async def test_http_target_never_follows_redirects(demo_app: DemoApp) -> None:
    target = HttpTarget(HttpSpec(url=f"{demo_app.url}/redirect"))
    with pytest.raises(TargetError, match=r"status 302 \(redirect to '/jobs/redirected' not"):
        await target(make_ctx())
    assert demo_app.calls() == []


async def test_http_status_outside_accept_status_is_an_error(demo_app: DemoApp) -> None:
    with pytest.raises(TargetError, match="status 404"):
        await HttpTarget(HttpSpec(url=f"{demo_app.url}/nowhere", method="GET"))(make_ctx())
    spec = HttpSpec(url=f"{demo_app.url}/nowhere", method="get", accept_status=[404])
    assert (await HttpTarget(spec)(make_ctx()))["status"] == 404


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


async def test_http_target_gives_up_at_its_timeout(silent_port: int) -> None:
    target = HttpTarget(HttpSpec(url=f"http://127.0.0.1:{silent_port}/x", timeout_s=0.3))
    with anyio.fail_after(5), pytest.raises(TargetError, match=r"within 0\.3s"):
        await target(make_ctx())


async def test_http_connection_refused_is_one_line() -> None:
    target = HttpTarget(HttpSpec(url=f"http://127.0.0.1:{free_port()}/x"))
    with pytest.raises(TargetError, match="ConnectError") as caught:
        await target(make_ctx())
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),  # noqa: S104 - a host to refuse, nothing binds it
        ("10.0.0.1", False),
        ("169.254.169.254", False),
        ("example.com", False),
        ("localhost.example.com", False),
        ("2130706433", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_http_target_refuses_other_hosts_unless_allowed() -> None:
    spec = HttpSpec(url="http://169.254.169.254/latest/meta-data")
    with pytest.raises(TargetError, match="not loopback; add it to the agent's allow_hosts"):
        HttpTarget(spec)
    assert HttpTarget(HttpSpec(url="http://app:8000/x"), allow_hosts=["app"]).spec.host == "app"


def test_http_spec_refuses_to_override_cronrace_headers() -> None:
    with pytest.raises(ValidationError, match="set by cronrace"):
        HttpSpec(url="http://127.0.0.1/x", headers={"idempotency-key": "mine"})


# -- command ------------------------------------------------------------------------------


async def test_command_gets_job_tick_fence_in_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONRACE_STORE_URL", "redis://:secret@127.0.0.1:1/0")
    names = ["CRONRACE_JOB", "CRONRACE_TICK", "CRONRACE_FENCE", "CRONRACE_STORE_URL", "COLOR"]
    script = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    target = CommandTarget(CommandSpec(argv=[PY, "-c", script], env={"COLOR": "blue"}))
    detail = await target(make_ctx(job="report", tick_s=1_700_000_060, fence=42))
    seen = json.loads(detail["output"])
    assert seen == {
        "CRONRACE_JOB": "report",
        "CRONRACE_TICK": "1700000060",
        "CRONRACE_FENCE": "42",
        "CRONRACE_STORE_URL": None,  # the agent's settings (and passwords) stay with the agent
        "COLOR": "blue",
    }
    assert detail["exit_code"] == 0


FENCE_CHECK = """
import os, pathlib, sys
state = pathlib.Path(sys.argv[1])
fence = int(os.environ["CRONRACE_FENCE"])
if state.exists() and fence < int(state.read_text()):
    print(f"stale fence {fence}")
    sys.exit(3)
state.write_text(str(fence))
print(f"accepted fence {fence}")
"""


async def test_command_receiver_refuses_a_stale_fence(tmp_path: Path) -> None:
    target = CommandTarget(CommandSpec(argv=[PY, "-c", FENCE_CHECK, str(tmp_path / "fence")]))
    assert (await target(make_ctx(fence=10)))["output"] == "accepted fence 10"
    with pytest.raises(TargetError, match="exited with code 3; output: stale fence 9"):
        await target(make_ctx(fence=9))


async def test_command_arguments_never_pass_through_a_shell(tmp_path: Path) -> None:
    tricky = ["x; touch semi", "$(touch subst)", "`touch tick`", "| touch pipe", "&& touch and"]
    script = "import json, sys; print(json.dumps(sys.argv[1:]))"
    spec = CommandSpec(argv=[PY, "-c", script, *tricky], cwd=str(tmp_path))
    detail = await CommandTarget(spec)(make_ctx())
    assert json.loads(detail["output"]) == tricky
    assert [path async for path in anyio.Path(tmp_path).iterdir()] == []


def test_command_spec_refuses_a_shell_string() -> None:
    with pytest.raises(ValidationError, match="a string is never given to a shell"):
        CommandSpec(argv="backup --full; rm -rf /")  # type: ignore[arg-type]


SPAWN_AND_HANG = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
print("started", flush=True)
time.sleep(60)
"""


def _pids(path: Path) -> list[int]:
    text = path.read_text() if path.exists() else ""
    return [int(pid) for pid in text.split()] if len(text.split()) == 2 else []


async def test_command_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    spec = CommandSpec(
        argv=[PY, "-c", SPAWN_AND_HANG, str(pid_file)], timeout_s=1.0, kill_grace_s=0.2
    )
    with anyio.fail_after(10), pytest.raises(TargetError, match="timed out after 1s") as caught:
        await CommandTarget(spec)(make_ctx())
    assert "started" in str(caught.value)
    pids = _pids(pid_file)
    assert len(pids) == 2
    wait_until(lambda: not any(map(process_alive, pids)), timeout_s=5, what="group killed")


async def test_cancelled_command_run_kills_the_whole_process_group(tmp_path: Path) -> None:
    """Lease loss and shutdown cancel the handler: the group must not outlive the run."""
    pid_file = tmp_path / "pids"
    spec = CommandSpec(argv=[PY, "-c", SPAWN_AND_HANG, str(pid_file)], kill_grace_s=0.2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(CommandTarget(spec), make_ctx())
        await wait_for(lambda: bool(_pids(pid_file)), timeout_s=10, what="the process group")
        tg.cancel_scope.cancel()
    pids = _pids(pid_file)
    try:
        wait_until(lambda: not any(map(process_alive, pids)), timeout_s=5, what="group killed")
    except AssertionError as exc:  # seen once in a full CI run: say who was still there
        raise AssertionError(f"{exc}: {pids}: {_describe(pids)}") from None


async def test_a_run_cancelled_while_its_command_starts_still_kills_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process exists before ``open_process`` returns (asyncio connects its pipes after
    the fork); a cancellation there left the group alive (asyncio kills the leader alone:
    its child lived on, reparented, in a CI run of the test above)."""
    from cronrace.sidecar import targets

    started = anyio.Event()
    real_open = targets.open_process

    async def slow_open(*args: Any, **kwargs: Any) -> Any:
        process = await real_open(*args, **kwargs)
        started.set()
        await anyio.sleep(3)  # the pipes being connected, slowly
        return process

    monkeypatch.setattr(targets, "open_process", slow_open)
    pid_file = tmp_path / "pids"
    spec = CommandSpec(argv=[PY, "-c", SPAWN_AND_HANG, str(pid_file)], kill_grace_s=0.2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(CommandTarget(spec), make_ctx())
        await started.wait()
        await wait_for(lambda: bool(_pids(pid_file)), timeout_s=10, what="the process group")
        tg.cancel_scope.cancel()  # while open_process has not returned
    pids = _pids(pid_file)
    wait_until(lambda: not any(map(process_alive, pids)), timeout_s=5, what="group killed")


def _describe(pids: list[int]) -> str:
    """Each pid's /proc stat line and command line, for a failure's message."""
    found = []
    for pid in pids:
        try:
            # pid (comm) state ppid pgrp
            stat = " ".join(Path(f"/proc/{pid}/stat").read_text().split()[:5])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError as exc:
            found.append(f"{pid}: {exc}")
        else:
            found.append(f"{pid}: {stat} | {argv}")
    return "; ".join(found)


async def test_command_failure_keeps_exit_code_and_output_tail() -> None:
    script = "import sys\nfor i in range(5000): print('line', i)\nsys.exit(4)"
    with pytest.raises(TargetError) as caught:
        await CommandTarget(CommandSpec(argv=[PY, "-c", script]))(make_ctx())
    message = str(caught.value)
    assert message.startswith("command exited with code 4; output: ...")
    assert message.endswith("line 4999")
    assert len(message) < 1100


async def test_command_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    with pytest.raises(TargetError, match="cannot start"):
        await CommandTarget(CommandSpec(argv=[missing]))(make_ctx())


# -- stream -------------------------------------------------------------------------------


@pytest.mark.redis
async def test_stream_target_hands_off_to_a_consumer_group(
    redis_server: RedisServer, namespace: str
) -> None:
    key = f"{namespace}:work"
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    store = Store.from_url(redis_server.url, namespace)
    try:
        await client.xgroup_create(key, "workers", id="0", mkstream=True)
        target = StreamTarget(
            StreamSpec(key=key, fields={"kind": "reindex"}), agent_store=lambda: store
        )
        await target(make_ctx(tick_s=1_700_000_001, fence=12))
        await target(make_ctx(tick_s=1_700_000_000, fence=11))  # a stale holder, late
        reply = await client.xreadgroup("workers", "w1", {key: ">"}, count=10)
        [(_stream, entries)] = reply
        accepted, refused, highest = [], [], 0
        for entry_id, fields in entries:  # what a worker does with each entry
            fence = int(fields["fence"])
            (refused if fence < highest else accepted).append(fields)
            highest = max(highest, fence)
            await client.xack(key, "workers", entry_id)
        assert [(f["job"], f["tick"], f["fence"]) for f in accepted] == [
            ("backup", "1700000001", "12")
        ]
        assert [f["fence"] for f in refused] == ["11"]
        assert accepted[0]["kind"] == "reindex"
        assert accepted[0]["idempotency_key"] == "backup:1700000001"
    finally:
        await client.aclose()
        await store.aclose()


@pytest.mark.redis
async def test_stream_target_can_write_to_another_redis(
    redis_server: RedisServer, fresh_redis: RedisServer, namespace: str
) -> None:
    key = f"{namespace}:elsewhere"
    agent_store = Store.from_url(redis_server.url, namespace)
    other = aioredis.Redis.from_url(fresh_redis.url, decode_responses=True)
    mine = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        spec = StreamSpec(key=key, redis_url=fresh_redis.url, maxlen=10)
        target = StreamTarget(spec, agent_store=lambda: agent_store)
        detail = await target(make_ctx(fence=5))
        again = await target(make_ctx(fence=6))  # the same store: opened once, kept
        [(entry_id, fields), (second_id, _)] = await other.xrange(key)
        assert (entry_id, second_id) == (detail["id"], again["id"])
        assert fields["fence"] == "5"
        assert await mine.exists(key) == 0
        clients = await other.client_list()
        assert len(clients) == 2  # this test's own connection and the target's one
        await target.aclose()

        async def only_ours_left() -> bool:
            return len(await other.client_list()) == 1

        await wait_for(only_ours_left, timeout_s=5, what="the target's connection closed")
    finally:
        await other.aclose()
        await mine.aclose()
        await agent_store.aclose()


async def test_stream_target_unreachable_redis_is_a_target_error() -> None:
    spec = StreamSpec(key="q", redis_url=f"redis://:pw@127.0.0.1:{free_port()}/0")
    target = StreamTarget(spec, agent_store=lambda: pytest.fail("not this store"))
    try:
        with pytest.raises(TargetError, match=r"stream 'q' at redis://\*\*\*@127.0.0.1") as caught:
            await target(make_ctx())
    finally:
        await target.aclose()
    assert "pw" not in str(caught.value)


async def test_http_errors_never_show_the_url_password() -> None:
    spec = HttpSpec(url=f"http://cron:s3cret@127.0.0.1:{free_port()}/x")
    assert spec.safe_url.startswith("http://cron:***@127.0.0.1:")
    with pytest.raises(TargetError) as caught:
        await HttpTarget(spec)(make_ctx())
    assert "s3cret" not in str(caught.value)
    assert "cron:***@" in str(caught.value)


async def test_other_redis_stores_are_kept_per_url_and_closed_when_the_agent_stops() -> None:
    other = OtherRedis(timeout_s=1)
    first = other.store("memory://other-a")
    assert other.store("memory://other-a") is first  # kept, not opened per run
    assert other.store("memory://other-b") is not first
    async with anyio.create_task_group() as tg:
        tg.start_soon(other.serve)  # as the sidecar's agent runs it, as a service
        await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()  # the agent stopping
    assert other.store("memory://other-a") is not first  # closed and forgotten
    await other.aclose()
