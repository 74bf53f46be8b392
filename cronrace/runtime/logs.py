"""Structured logs: every decision is one line with job, tick, node, fence, outcome."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


#: Extra fields holding a tick (UTC epoch seconds): logged with their ISO time beside them.
TICK_FIELDS = frozenset({"tick", "last_tick", "next_tick", "abandoned_tick"})


def iso_utc(epoch_s: int) -> str:
    """``2024-05-01T12:00:05Z``."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's extra fields without empty ones; ticks get a ``<name>_utc`` companion."""
    out: dict[str, Any] = {}
    for key, value in record.__dict__.items():
        if key in _STANDARD or value is None or value == "":
            continue
        out[key] = value
        if key in TICK_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            out[f"{key}_utc"] = iso_utc(value)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line (orjson), with the record's extra fields at top level."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level msg key=value ...``: readable in a terminal, greppable at 3 a.m."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
        extras = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{when} {record.levelname:<7} {record.getMessage()}"
        if extras:
            line = f"{line}  {extras}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Send cronrace's logs to stderr as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("cronrace")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
