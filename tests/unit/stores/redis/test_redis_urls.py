"""Redis URLs: every deployment's form parses, every malformed one is one clear line."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from redis.asyncio.connection import SSLConnection

from cronrace.errors import ConfigError
from cronrace.settings import load_settings
from cronrace.specs.targets import StreamSpec
from cronrace.stores.redis.client import make_client
from cronrace.stores.redis.packing import FastPacking
from cronrace.stores.redis.readtimer import SharedReadTimer
from cronrace.stores.redis.urls import Deployment, parse_redis_url
from cronrace.stores.urls import redact_url

P, S, C = Deployment.PRIMARY, Deployment.SENTINEL, Deployment.CLUSTER
GOOD = [  # url, deployment, hosts, master, db
    ("redis://127.0.0.1", P, (("127.0.0.1", 6379),), None, 0),
    ("redis://h:7000/3", P, (("h", 7000),), None, 3),
    ("redis://h?db=2", P, (("h", 6379),), None, 2),
    ("rediss://u:pw@h:6380/0", P, (("h", 6380),), None, 0),
    ("redis://[::1]:7000", P, (("::1", 7000),), None, 0),
    ("redis+sentinel://a:1,b,c:3/m", S, (("a", 1), ("b", 26379), ("c", 3)), "m", 0),
    ("redis+sentinel://a:1/mymaster/5", S, (("a", 1),), "mymaster", 5),
    ("rediss+sentinel://u:pw@a:1/m?sentinel_password=x", S, (("a", 1),), "m", 0),
    ("redis+cluster://a:7000,b:7001", C, (("a", 7000), ("b", 7001)), None, 0),
    ("rediss+cluster://:pw@a:7000/0", C, (("a", 7000),), None, 0),
]  # fmt: skip


@pytest.mark.parametrize(("url", "deployment", "hosts", "master", "db"), GOOD)
def test_every_deployment_form_parses(
    url: str, deployment: Deployment, hosts: tuple[tuple[str, int], ...], master: str, db: int
) -> None:
    target = parse_redis_url(url)
    assert (target.deployment, target.hosts, target.master, target.db) == (
        deployment,
        hosts,
        master,
        db,
    )


def test_credentials_and_tls_options_reach_the_connection_options() -> None:
    target = parse_redis_url(
        "rediss+sentinel://app:p%40ss@a:1/m/2?sentinel_password=sp&sentinel_username=sen"
        "&ssl_ca_certs=/ca.pem&ssl_check_hostname=false&ssl_cert_reqs=required"
    )
    assert target.credentials() == {
        "db": 2,
        "username": "app",
        "password": "p@ss",
        "ssl": True,
        "ssl_ca_certs": "/ca.pem",
        "ssl_check_hostname": False,
        "ssl_cert_reqs": "required",
    }
    assert (target.sentinel_username, target.sentinel_password) == ("sen", "sp")


def test_a_unix_socket_url_keeps_its_path_and_database() -> None:
    target = parse_redis_url("unix://:pw@/run/redis/redis.sock?db=4")
    assert (target.unix_path, target.db, target.password) == ("/run/redis/redis.sock", 4, "pw")


def test_the_embedded_store_is_named_by_its_url() -> None:
    assert parse_redis_url("memory://fleet-a").memory_name == "fleet-a"
    assert parse_redis_url("memory://").memory_name == "default"


BAD = [
    ("http://s3cret@h:6379", "unknown scheme 'http://'"),
    ("127.0.0.1:6379", "is not a URL"),
    ("redis://:s3cret@", "names no host"),
    ("redis+sentinel://:s3cret@a:1", "names no master"),
    ("redis+sentinel://:s3cret@a:1/", "names no master"),
    ("redis+cluster://:s3cret@", "names no host"),
    ("redis+cluster://:s3cret@a:1/2", "only database 0"),
    ("redis://:s3cret@a:1,b:2", "several hosts"),
    ("redis://:s3cret@a:0", "port must be a number from 1 to 65535"),
    ("redis://:s3cret@a:x", "port must be a number"),
    ("redis://:s3cret@a,,b", "empty host"),
    ("redis://:s3cret@::1", "IPv6"),
    ("redis://:s3cret@h/db1", "database 'db1' is not a number"),
    ("redis://:s3cret@h/1?db=2", "in the path and"),
    ("redis://:s3cret@h?timeout=3", "unknown option 'timeout'"),
    ("redis://:s3cret@h?db=1&db=2", "twice"),
    ("redis://:s3cret@h?ssl_ca_certs=/ca", "needs TLS"),
    ("rediss://:s3cret@h?ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe'"),
    ("rediss://:s3cret@h?ssl_ciphers=x", "unknown TLS option"),
    ("redis://:s3cret@h?sentinel_password=x", "need redis+sentinel"),
    ("unix://:s3cret@relative.sock", "absolute"),
]


@pytest.mark.parametrize(("url", "why"), BAD)
def test_a_malformed_url_says_why_without_its_password(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)) as caught:
        parse_redis_url(url)
    assert "s3cret" not in str(caught.value)


def test_redaction_hides_user_password_and_sentinel_password() -> None:
    url = "redis+sentinel://app:pw@a:1,b:2/m/1?sentinel_password=sp&ssl_ca_certs=/ca"
    assert (
        redact_url(url) == "redis+sentinel://***@a:1,b:2/m/1?sentinel_password=***&ssl_ca_certs=/ca"
    )
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


def test_a_bad_url_in_the_settings_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONRACE_STORE_URL", "redis+sentinel://:s3cret@a:1,b:2")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line == (
        "agent: store_url 'redis+sentinel://***@a:1,b:2' (from CRONRACE_STORE_URL): names no "
        "master: use redis+sentinel://host:port[,host:port...]/<master-name>[/<db>]"
    )


def test_every_deployment_form_is_accepted_by_the_settings_and_the_stream_target() -> None:
    for url, *_ in GOOD:
        assert load_settings(store_url=url).store_url == url
        assert StreamSpec(key="q", redis_url=url).redis_url == url
    with pytest.raises(ValidationError, match="names no master"):
        StreamSpec(key="q", redis_url="redis+sentinel://a:1")


@pytest.mark.parametrize(
    ("url", "tls"),
    [("redis+sentinel://a:1/m", False), ("rediss+sentinel://a:1/m", True)],
)
async def test_a_sentinel_primary_is_reached_over_tls_exactly_when_the_url_says(
    url: str, tls: bool
) -> None:
    # The pool's connections are cronrace's (its packer, one read timer per pipeline), and
    # the TLS one only for rediss: a plain one would speak clear text to a TLS server.
    client = make_client(url)
    try:
        kind = client.connection_pool.connection_class
        assert issubclass(kind, FastPacking)
        assert issubclass(kind, SharedReadTimer)
        assert issubclass(kind, SSLConnection) is tls
        assert "ssl" not in client.connection_pool.connection_kwargs
    finally:
        await client.aclose()
