"""The Lua scripts: loaded once, called by SHA, reloaded after ``NOSCRIPT``.

Each script in ``cronrace/lua`` is sent with ``_lib.lua`` in front of it (helpers, and
the type checks that move garbage aside before any write). ``NOSCRIPT`` (a restart, a
failover, ``SCRIPT FLUSH``) is answered by loading them again and repeating the calls that
did not run, also inside pipelines.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from cronrace.errors import StoreError
from cronrace.store.replies import decode_text

log = logging.getLogger("cronrace.store")

SCRIPTS = ("acquire", "renew", "release", "fenced_set", "quarantine", "schedules")


def _read_lua(name: str) -> str:
    return resources.files("cronrace.lua").joinpath(name).read_text(encoding="utf-8")


def script_sources() -> dict[str, str]:
    """Every script's source as sent to Redis: ``_lib.lua`` then the script."""
    lib = _read_lua("_lib.lua")
    return {name: lib + _read_lua(f"{name}.lua") for name in SCRIPTS}


#: How Redis (``user_script:12``) and fakeredis (``[string "<python>"]:12``) name a line.
_SCRIPT_LINE = re.compile(r'@?(?:user_script|\[string "<python>"\]):(\d+)')


def locate_lines(name: str, message: str) -> str:
    """Rewrite the line numbers of a script error to point into the files we ship.

    Redis numbers lines of the source it was sent, ``_lib.lua`` and the script joined:
    ``user_script:212`` becomes ``acquire.lua:64`` (or ``_lib.lua:N``).
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
        """Load every script into the server's script cache."""
        for name, source in self._sources.items():
            self._shas[name] = decode_text(await self.client.script_load(source))

    async def _sha(self, name: str) -> str:
        if name not in self._shas:
            await self.load()
        return self._shas[name]

    async def eval_many(
        self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Run one script many times in one pipeline; each result or its exception."""
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _attempt in range(3):
            sha = await self._sha(name)
            pipe = self.client.pipeline(transaction=False)
            for index in todo:
                keys, args = calls[index]
                pipe.evalsha(sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
            retry: list[int] = []
            for index, reply in zip(todo, replies, strict=True):
                if isinstance(reply, NoScriptError) or (
                    isinstance(reply, ResponseError) and "NOSCRIPT" in str(reply)
                ):
                    retry.append(index)
                else:
                    results[index] = reply
            if not retry:
                return results
            log.warning("script cache was flushed; reloading", extra={"script": name})
            await self.load()
            todo = retry
        raise StoreError(f"script {name!r} kept answering NOSCRIPT after reloading")

    async def eval(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script once; raise its error."""
        (reply,) = await self.eval_many(name, [(keys, args)])
        if isinstance(reply, ResponseError):
            raise type(reply)(locate_lines(name, str(reply))) from reply
        if isinstance(reply, BaseException):
            raise reply
        return reply
