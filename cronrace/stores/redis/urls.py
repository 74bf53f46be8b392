"""Redis URLs: which deployment a URL names, and everything needed to connect to it.

redis-py parses only single-host ``redis://``, ``rediss://`` and ``unix://`` URLs, and passes
unknown query options through to the connection, where they fail at the first command.
cronrace parses every form itself (docs/design.md section 11), so that a wrong URL is one line
naming what is wrong, before anything connects:

- one primary: ``redis://[user:pw@]host[:port][/db]``, ``rediss://``,
  ``unix://[user:pw@]/path[?db=N]``;
- Sentinel: ``redis+sentinel://[user:pw@]h:p[,h:p...]/<master>[/<db>]``,
  ``rediss+sentinel://``;
- Redis Cluster: ``redis+cluster://[user:pw@]h:p[,h:p...]``, ``rediss+cluster://``;
- the embedded in-process store: ``memory://[name]``.

The ``rediss`` forms use TLS to the data nodes; the TLS options are query options
(``?ssl_ca_certs=/path``). Sentinels take their own credentials as ``?sentinel_password=``
and ``?sentinel_username=``. Messages never contain a password.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, unquote

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379


class Deployment(enum.Enum):
    """How the Redis behind a URL is deployed."""

    MEMORY = "memory"
    PRIMARY = "primary"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


#: scheme -> (deployment, TLS to the data nodes)
SCHEMES: dict[str, tuple[Deployment, bool]] = {
    "redis": (Deployment.PRIMARY, False),
    "rediss": (Deployment.PRIMARY, True),
    "unix": (Deployment.PRIMARY, False),
    "redis+sentinel": (Deployment.SENTINEL, False),
    "rediss+sentinel": (Deployment.SENTINEL, True),
    "redis+cluster": (Deployment.CLUSTER, False),
    "rediss+cluster": (Deployment.CLUSTER, True),
    "memory": (Deployment.MEMORY, False),
}
SCHEME_LIST = ", ".join(f"{scheme}://" for scheme in SCHEMES)

_TLS_PATHS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = ("none", "optional", "required")
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL.

    Attributes:
        deployment: one primary, Sentinel, Cluster or the embedded store.
        hosts: ``(host, port)`` of the primary, the sentinels or the cluster's seed nodes.
        unix_path: the socket of a ``unix://`` URL.
        master: the Sentinel service (master) name.
        db: the database number (always 0 on a cluster).
        tls: TLS to the data nodes.
        username, password: the data nodes' ACL user and password.
        sentinel_username, sentinel_password: the sentinels' own, when they have them.
        tls_options: ``ssl_*`` connection options from the query.
        memory_name: the embedded store's name.
    """

    deployment: Deployment
    hosts: tuple[tuple[str, int], ...] = ()
    unix_path: str | None = None
    master: str | None = None
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls_options: dict[str, Any] = field(default_factory=dict)
    memory_name: str = "default"

    def credentials(self) -> dict[str, Any]:
        """The data nodes' connection options: credentials, database, TLS."""
        out: dict[str, Any] = {"db": self.db}
        if self.username is not None:
            out["username"] = self.username
        if self.password is not None:
            out["password"] = self.password
        if self.tls:
            out["ssl"] = True
            out.update(self.tls_options)
        return out


def parse_redis_url(url: str) -> RedisTarget:
    """Parse any URL cronrace accepts for Redis.

    Raises:
        ValueError: the URL cannot be used; the message says why and never contains a
            password.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"is not a URL: use one of {SCHEME_LIST}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme + '://'!r}: use one of {SCHEME_LIST}")
    deployment, tls = SCHEMES[scheme]
    if deployment is Deployment.MEMORY:
        return RedisTarget(Deployment.MEMORY, memory_name=rest or "default")
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise ValueError("has a '#fragment'; remove it")
    rest, _, query = rest.partition("?")
    userinfo, at, location = rest.rpartition("@")
    username, password = _userinfo(userinfo) if at else (None, None)
    options = _query(query)
    db_option = options.pop("db", None)
    sentinel_auth = {name: options.pop(name, None) for name in _SENTINEL_OPTIONS}
    if deployment is not Deployment.SENTINEL and any(sentinel_auth.values()):
        raise ValueError("sentinel_password/sentinel_username need redis+sentinel://")
    base = RedisTarget(
        deployment,
        tls=tls,
        username=username,
        password=password,
        tls_options=_tls_options(options, tls=tls),
    )
    if options:
        known = "db, sentinel_password, sentinel_username, ssl_*"
        raise ValueError(f"unknown option {next(iter(options))!r} (known: {known})")
    if scheme == "unix":
        path = unquote(location)
        if not path.startswith("/"):
            raise ValueError("use unix:///absolute/path/to/redis.sock")
        return replace(base, unix_path=path, db=_db(db_option or "0"))
    location, slash, path = location.partition("/")
    default_port = DEFAULT_SENTINEL_PORT if deployment is Deployment.SENTINEL else DEFAULT_PORT
    hosts = _hosts(location, default_port)
    if deployment is Deployment.PRIMARY:
        if len(hosts) > 1:
            raise ValueError(
                "names several hosts: use redis+sentinel:// or redis+cluster:// for those"
            )
        return replace(base, hosts=hosts, db=_db(_one_db(path if slash else "", db_option)))
    if deployment is Deployment.CLUSTER:
        if (path and path != "0") or (db_option not in (None, "0")):
            raise ValueError("a cluster has only database 0: remove the /db part")
        return replace(base, hosts=hosts)
    master, _, db_path = path.partition("/")
    if not master:
        raise ValueError(
            "names no master: use redis+sentinel://host:port[,host:port...]/<master-name>[/<db>]"
        )
    return replace(
        base,
        hosts=hosts,
        master=unquote(master),
        db=_db(_one_db(db_path, db_option)),
        sentinel_username=sentinel_auth["sentinel_username"],
        sentinel_password=sentinel_auth["sentinel_password"],
    )


def _userinfo(text: str) -> tuple[str | None, str | None]:
    user, colon, password = text.partition(":")
    return unquote(user) or None, unquote(password) if colon and password else None


def _query(query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError("has a query that is not name=value&name=value") from None
    for name, value in pairs:
        if name in options:
            raise ValueError(f"gives option {name!r} twice")
        options[name] = value
    return options


def _hosts(location: str, default_port: int) -> tuple[tuple[str, int], ...]:
    if not location:
        raise ValueError("names no host: use host:port (several as host:port,host:port)")
    out = []
    for item in location.split(","):
        out.append(_host_port(item.strip(), default_port))
    return tuple(out)


def _host_port(item: str, default_port: int) -> tuple[str, int]:
    if not item:
        raise ValueError("has an empty host in its host list")
    if item.startswith("["):
        host, bracket, tail = item[1:].partition("]")
        if not bracket or not host or (tail and not tail.startswith(":")):
            raise ValueError(f"host {item!r} is not [ipv6-address]:port")
        port_text = tail[1:] if tail else ""
    else:
        host, _, port_text = item.partition(":")
        if ":" in port_text:
            raise ValueError(f"host {item!r}: write IPv6 addresses as [address]:port")
    if not host or any(char in host for char in "/ \t"):
        raise ValueError(f"host {item!r} is not a host name or address")
    if not port_text:
        return unquote(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"host {item!r}: the port must be a number from 1 to 65535")
    return unquote(host), int(port_text)


def _one_db(path: str, option: str | None) -> str:
    if path and option is not None and path != option:
        raise ValueError(f"names database {path!r} in the path and {option!r} in ?db=")
    return path or option or "0"


def _db(text: str) -> int:
    text = text.rstrip("/")
    if not text.isdigit():
        raise ValueError(f"database {text!r} is not a number (use /0, /1, ...)")
    return int(text)


def _tls_options(options: dict[str, str], *, tls: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in [name for name in options if name.startswith("ssl_")]:
        value = options.pop(name)
        if not tls:
            raise ValueError(f"option {name!r} needs TLS: use a rediss scheme")
        if name in _TLS_PATHS:
            if not value:
                raise ValueError(f"option {name!r} is empty")
            out[name] = value
        elif name == "ssl_cert_reqs":
            if value not in _CERT_REQS:
                raise ValueError(f"ssl_cert_reqs={value!r}: use one of {', '.join(_CERT_REQS)}")
            out[name] = value
        elif name == "ssl_check_hostname":
            if value.lower() not in _BOOLS:
                raise ValueError(f"ssl_check_hostname={value!r}: use true or false")
            out[name] = _BOOLS[value.lower()]
        else:
            known = ", ".join((*_TLS_PATHS, "ssl_cert_reqs", "ssl_check_hostname"))
            raise ValueError(f"unknown TLS option {name!r} (known: {known})")
    return out
