"""The least-privilege ACL line lists exactly what cronrace sends, and the docs show it."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from cronrace.stores.redis.acl import COMMANDS, SCRIPT_COMMANDS, acl_setuser

ACL_PAGE = Path(__file__).resolve().parents[4] / "docs" / "how-to" / "acl-tls.md"


def test_acl_lists_exactly_the_commands_the_lua_scripts_call() -> None:
    called: set[str] = set()
    for script in resources.files("cronrace.stores.redis.lua").iterdir():
        if script.name.endswith(".lua"):
            text = script.read_text(encoding="utf-8")
            called |= {c.lower() for c in re.findall(r"redis\.p?call\(\s*['\"](\w+)", text)}
    assert called == set(SCRIPT_COMMANDS)


def test_acl_line_is_namespace_aware_and_allows_nothing_else() -> None:
    line = acl_setuser("fleet", "billing", "s3cret")
    assert line.startswith("ACL SETUSER fleet reset on >s3cret ~billing:* resetchannels -@all +")
    granted = [word[1:] for word in line.split() if word.startswith("+")]
    assert granted == sorted(COMMANDS)
    assert "+xread" in line
    assert "+script|load" in line


def test_the_docs_give_the_acl_line_of_the_default_namespace() -> None:
    assert acl_setuser() in ACL_PAGE.read_text(encoding="utf-8")
