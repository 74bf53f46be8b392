"""Agent settings: from keyword arguments, ``CRONRACE_*`` environment variables, or TOML."""

from __future__ import annotations

import os
import re
import secrets
import socket

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cronrace.errors import ConfigError

NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def default_node_id() -> str:
    """Return ``<host>-<pid>-<random>``: unique per process, readable in logs."""
    host = socket.gethostname().split(".")[0] or "node"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class AgentSettings(BaseSettings):
    """How one agent process connects and behaves.

    Every field can be set as ``CRONRACE_<FIELD>`` in the environment.
    """

    model_config = SettingsConfigDict(env_prefix="CRONRACE_", extra="forbid")

    redis_url: str = Field(
        default="memory://",
        description="redis://, rediss:// (TLS), unix://, or memory:// (embedded, one process)",
    )
    node_id: str = Field(default_factory=default_node_id)
    namespace: str = "cronrace"
    heartbeat_s: float = Field(default=2.0, gt=0)
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    clock: str = Field(default="redis", pattern="^(redis|local)$")
    skew_tolerance_s: float = Field(default=5.0, ge=0)
    live_grace_s: float = Field(default=1.0, ge=0)
    startup_timeout_s: float = Field(default=10.0, ge=0)
    redis_timeout_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=16, ge=2)
    claim_replicas: int = Field(default=0, ge=0)
    claim_replicas_timeout_ms: int = Field(default=100, ge=1)
    log_format: str = Field(default="text", pattern="^(text|json)$")
    log_level: str = "INFO"

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if not NAMESPACE_PATTERN.fullmatch(value):
            raise ValueError("use 1-64 letters, digits, '_', '.', '-'")
        return value

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, value: str) -> str:
        if not value or ":" in value or len(value) > 200 or not value.isprintable():
            raise ValueError("use 1-200 printable characters without ':'")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://", "memory://")):
            raise ValueError("must start with redis://, rediss://, unix:// or memory://")
        return value


def load_settings(**overrides: object) -> AgentSettings:
    """Build settings from the environment and ``overrides``; one ConfigError per problem."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return AgentSettings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(settings_problems(exc, prefix="agent")) from None


def settings_problems(exc: ValidationError, *, prefix: str) -> list[str]:
    """Turn a pydantic ValidationError into one line per problem."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        value = error.get("input")
        lines.append(f"{prefix}: {where} {value!r}: {error['msg']}")
    return lines
