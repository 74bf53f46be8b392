"""The Lua scripts: loaded once, called by SHA, sent again after ``NOSCRIPT``.

Each script in ``cronrace/lua`` is sent with ``_lib.lua`` in front of it (helpers, and
the type checks that move garbage aside before any write). Calls go out one pipeline per
shard (one pipeline on a single primary). ``NOSCRIPT`` (a restart, a failover, ``SCRIPT
FLUSH``) is answered by repeating the calls that did not run with the script's source
(``EVAL``), which caches it again on exactly the server that lacked it: on a cluster,
``SCRIPT LOAD`` goes to every primary and would fail while any one is down.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from cronrace.stores.redis.errors import passage, translate
from cronrace.stores.redis.replies import decode_text
from cronrace.stores.redis.shards import per_shard

log = logging.getLogger("cronrace.stores.redis")

SCRIPTS = (
    "decide",
    "renew_lease",
    "end_run",
    "fenced_set",
    "quarantine",
    "schedules",
)


def _read_lua(name: str) -> str:
    return resources.files("cronrace.stores.redis.lua").joinpath(name).read_text(encoding="utf-8")


def script_sources() -> dict[str, str]:
    """Every script's source as sent to Redis: ``_lib.lua`` then the script."""
    lib = _read_lua("_lib.lua")
    return {name: lib + _read_lua(f"{name}.lua") for name in SCRIPTS}


#: How Redis (``user_script:12``) and fakeredis (``[string "<python>"]:12``) name a line.
_SCRIPT_LINE = re.compile(r'@?(?:user_script|\[string "<python>"\]):(\d+)')


def locate_lines(name: str, message: str) -> str:
    """Rewrite the line numbers of a script error to point into the files we ship.

    Redis numbers lines of the source it was sent, ``_lib.lua`` and the script joined:
    ``user_script:212`` becomes ``decide.lua:64`` (or ``_lib.lua:N``).
    """
    lib_lines = _read_lua("_lib.lua").count("\n")

    def where(match: re.Match[str]) -> str:
        line = int(match.group(1))
        if line > lib_lines:
            return f"{name}.lua:{line - lib_lines}"
        return f"_lib.lua:{line}"

    return _SCRIPT_LINE.sub(where, message)


class Scripts:
    """The scripts of one client, by SHA."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._sources = script_sources()
        self._shas: dict[str, str] = {}

    async def load(self) -> None:
        """Load every script into the server's script cache (every primary's)."""
        for name, source in self._sources.items():
            self._shas[name] = decode_text(await self.client.script_load(source))

    def _sha(self, name: str) -> str:
        if name not in self._shas:
            digest = hashlib.sha1(self._sources[name].encode(), usedforsecurity=False)
            self._shas[name] = digest.hexdigest()
        return self._shas[name]

    async def eval_many(
        self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Run one script many times, one pipeline per shard; each result or its exception.

        A shard that did not answer fails its own calls only (their exception is its
        error). When no call got an answer, that error is raised.
        """
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for by_source in (False, True):
            replies = await self._round(name, [calls[i] for i in todo], by_source=by_source)
            retry: list[int] = []
            for index, reply in zip(todo, replies, strict=True):
                if _is_noscript(reply) and not by_source:
                    retry.append(index)
                else:
                    results[index] = reply
            if not retry:
                break
            log.warning(
                "script cache was flushed; sending the script again", extra={"script": name}
            )
            todo = retry
        unanswered = [
            reply
            for reply in results
            if isinstance(reply, BaseException) and passage(reply, in_reply=True).passes
        ]
        if unanswered and len(unanswered) == len(results):
            raise translate(unanswered[0], in_reply=True)
        return results

    async def _round(
        self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]], *, by_source: bool
    ) -> list[Any]:
        command = ("EVAL", self._sources[name]) if by_source else ("EVALSHA", self._sha(name))

        def add(pipe: Any, index: int) -> None:
            keys, args = calls[index]
            # A cluster pipeline refuses pipe.evalsha(); the raw command goes everywhere.
            pipe.execute_command(*command, len(keys), *keys, *args)

        replies = await per_shard(self.client, [keys[0] for keys, _args in calls], add)
        return [_first(reply.replies) for reply in replies]

    async def eval(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script once; raise its error."""
        (reply,) = await self.eval_many(name, [(keys, args)])
        if isinstance(reply, ResponseError):
            raise type(reply)(locate_lines(name, str(reply))) from reply
        if isinstance(reply, BaseException):
            raise reply
        return reply


def _is_noscript(reply: Any) -> bool:
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and "NOSCRIPT" in str(reply)
    )


def _first(answers: list[Any] | BaseException) -> Any:
    return answers if isinstance(answers, BaseException) else answers[0]
