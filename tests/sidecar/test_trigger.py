"""`cronrace trigger` says when nothing will run the trigger, and why a wait timed out."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from typer.testing import CliRunner

from cronrace.cli.main import app
from cronrace.cli.options import EXIT_INVALID
from cronrace.stores.redis import Keys
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def known_job(redis_server: RedisServer, namespace: str) -> Iterator[redis.Redis]:
    """A namespace where job 'report' was registered once, by a node long gone."""
    client = redis.Redis.from_url(redis_server.url)
    client.sadd(Keys(namespace).jobs, "report")
    yield client
    client.close()


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_trigger_with_no_live_node_exits_1_and_sends_nothing(
    redis_server: RedisServer, namespace: str, known_job: redis.Redis
) -> None:
    code, stdout, stderr = invoke(
        "trigger", "report", "--store-url", redis_server.url, "-n", namespace
    )
    assert code == EXIT_INVALID
    assert stdout == ""
    assert stderr.splitlines() == [
        f"cronrace: job 'report': no live node in namespace {namespace!r}, so nothing would "
        "run this trigger (nodes see only the triggers made while they run); start an agent "
        "that defines the job"
    ]
    assert known_job.xlen(Keys(namespace).control) == 0


def test_trigger_wait_timeout_names_the_live_nodes_and_that_none_claimed_it(
    redis_server: RedisServer, namespace: str, known_job: redis.Redis
) -> None:
    # A live node (its heartbeat is fresh) that does not define the job: it never claims.
    seconds, micros = known_job.time()
    known_job.zadd(Keys(namespace).nodes, {"ghost": seconds * 1000 + micros // 1000 + 60_000})
    code, stdout, stderr = invoke(
        "trigger", "report", "--wait", "--timeout", "0.5", "--json",
        "--store-url", redis_server.url, "-n", namespace,
    )  # fmt: skip
    assert code == EXIT_INVALID
    result = json.loads(stdout)
    assert result["outcome"] == "timeout"
    assert result["live_nodes"] == ["ghost"]
    assert result["claimed_by"] is None
    assert stderr.splitlines() == [
        f"cronrace: job 'report': no record of trigger {result['trigger_id']} within 0.5s: "
        "no node claimed it (1 live node(s): ghost); a node runs triggers only for the jobs "
        "it defines: does any define it?"
    ]
