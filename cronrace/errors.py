"""One exception hierarchy, rooted at :class:`CronraceError`.

Every error a user can cause (a bad schedule, an unknown time zone, an invalid job name, a
bad config file) carries a message that names the job, the field and the value, so the CLI
can print it as one line without a traceback.
"""

from __future__ import annotations


class CronraceError(Exception):
    """Base class of every error cronrace raises on purpose."""


class ScheduleError(CronraceError, ValueError):
    """A schedule expression or time zone cannot be used.

    Attributes:
        reason: why, without the job, field and value (for callers that name them).
    """

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


class JobDefinitionError(CronraceError, ValueError):
    """A job is defined wrongly: bad name, duplicate name, bad policy or setting."""


class ConfigError(CronraceError, ValueError):
    """Agent settings or a config file cannot be used.

    Attributes:
        problems: one line per problem, each naming the job, the field and the value.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class StoreError(CronraceError):
    """A store call failed; the base of every error a store (Redis, PostgreSQL) raises.

    Each store translates its driver's exceptions into these where they leave it, so
    nothing above ``cronrace/stores/`` needs to know redis-py or psycopg (docs/design.md
    section 7). A plain ``StoreError`` is something cronrace cannot use (a script that
    failed, a key that cannot be named); the subclasses say why the call failed.

    The subclasses have store-neutral names; the ``Redis*`` names they had before the
    PostgreSQL store are kept as aliases (the same classes), public API included.
    """


class StoreUnavailableError(StoreError):
    """The store cannot be reached (yet): a transient failure, worth retrying.

    Also a primary that is read-only, loading its data, or a cluster re-electing a
    primary; a statement cancelled by a statement_timeout: the call did not run, and will
    once the failover (or the wait) is over.
    """


RedisUnavailableError = StoreUnavailableError


class JobBusyError(StoreUnavailableError):
    """One job's data is busy for a while; the call did not run, and passes by itself.

    A PostgreSQL row another session holds locked (an open transaction), a Redis Cluster
    slot moving between shards: the store is healthy, so this is no outage. A decision
    meeting it is retried apart from the wake-up's other jobs, which go on.
    """


class RedisMovingError(JobBusyError):
    """The key's Cluster slot is moving between shards (a live resharding): not run.

    ``TRYAGAIN`` (a script whose keys are partly moved), an ``ASK`` or ``MOVED`` that did
    not settle: the cluster is healthy, and the call passes once the slot has moved, so it
    is retried at once and does not make the node not ready.
    """


class StoreAmbiguousError(StoreUnavailableError):
    """The connection failed or timed out with a call in flight: it may have run.

    A write that meets this must be read back before anything is decided from it (a claim
    whose reply was lost may have won, docs/design.md section 8).
    """


RedisAmbiguousError = StoreAmbiguousError


class StoreDataError(StoreError):
    """The store answered the call with an error: a key holding the wrong type, a bad
    script, a function that failed.

    Waiting will not fix it; the store moves garbage aside where it can, and reports it.
    """


RedisDataError = StoreDataError


class StoreAccessError(StoreError):
    """The store answers but refuses this client; waiting will not fix it (docs/design.md
    section 8).

    Attributes:
        command: the refused call: a command as Redis's ACL names it (``xread``,
            ``script|load``, ``evalsha`` ...), a PostgreSQL statement (``claim``, ...), or
            ``connect`` when the connection itself was refused.
    """

    #: What kind of refusal this is, for metrics and logs.
    cause = "refused"
    #: What ends it, for the log line an operator reads first.
    ends_when = "it will not pass by itself"

    def __init__(self, message: str, *, command: str = "connect") -> None:
        super().__init__(message)
        self.command = command


RedisAccessError = StoreAccessError


class StoreAuthError(StoreAccessError):
    """The store refused the user name or password (or wants one and none was given)."""

    cause = "authentication"


RedisAuthError = StoreAuthError


class StorePermissionError(StoreAccessError):
    """The user may not run a command or touch a key (Redis's ``NOPERM``), or the role
    may not use a table or function (PostgreSQL's missing grant)."""

    cause = "permission"


RedisPermissionError = StorePermissionError


class StoreTLSError(StoreAccessError):
    """The TLS handshake failed: a certificate that does not verify, an unreadable CA file."""

    cause = "tls"


RedisTLSError = StoreTLSError


class StoreSchemaError(StoreAccessError):
    """The PostgreSQL schema is missing or older than this cronrace needs.

    Waiting will not fix it: ``cronrace db upgrade`` (or a DBA running ``cronrace db sql``)
    does, and the message says so.
    """

    cause = "schema"

    def __init__(self, message: str) -> None:
        super().__init__(message, command="schema")


class RedisOutOfMemoryError(StoreAccessError):
    """Redis refuses writes: it reached ``maxmemory`` under the ``noeviction`` policy.

    Refused, not unavailable: retrying will not help until memory is freed or the limit
    raised, and a node that cannot claim must say so (readiness, a metric, one line).
    """

    cause = "out_of_memory"
    ends_when = "it passes once memory is freed or maxmemory raised"


class NoLiveNodeError(CronraceError):
    """An operator asked the fleet for something and no node of the namespace is alive."""


class TargetError(CronraceError):
    """A sidecar target (HTTP, command, stream) failed; the message goes to the run record."""


class UnknownJobError(CronraceError, KeyError):
    """An operator command named a job this agent does not know."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


def error_text(exc: BaseException) -> str:
    """A handler's exception as a run record shows it: its type and message, 2,000 at most."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:1997] + "..."
