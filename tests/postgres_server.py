"""A real PostgreSQL server for tests: initdb in a temporary directory, a free loopback port.

Tests never use the machine's own service (port 5432) nor a server someone else started.
As root, initdb and postgres refuse to run: the server then runs as an unprivileged user
(``postgres`` where Debian's package made one, else ``nobody``), in a directory of its own
under the system's temporary directory (pytest's are private to root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cronrace.testing import free_port

SUPERUSER = "postgres"
PASSWORD = "cronrace-test-pw"  # noqa: S105 - a throwaway server of the tests


def _bindir() -> Path | None:
    """Where initdb and postgres are: ``pg_config --bindir``, Debian's versioned dirs, PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += [Path(p) for p in versions]
    found = shutil.which("postgres")
    if found is not None:
        candidates.append(Path(found).resolve().parent)
    for directory in candidates:
        if (directory / "postgres").is_file() and (directory / "initdb").is_file():
            return directory
    return None


BINDIR = _bindir()


def postgres_available() -> bool:
    return BINDIR is not None


def require_postgres_in_ci() -> None:
    """In CI a missing PostgreSQL is a failure, not a skip."""
    if os.environ.get("CI") and BINDIR is None:
        raise RuntimeError("CI=true but PostgreSQL is not installed (see scripts/test.sh)")


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither user 'postgres' nor 'nobody' exists")


class PostgresServer:
    """One postgres process of our own; ``start()`` blocks until it accepts connections.

    Args:
        conf: extra ``postgresql.conf`` settings (name -> value).
    """

    def __init__(self, conf: dict[str, str] | None = None) -> None:
        assert BINDIR is not None, "PostgreSQL is not installed"
        self.bindir = BINDIR
        self.user = _run_as()
        self.directory = Path(tempfile.mkdtemp(prefix="cronrace-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.conf = dict(conf or {})
        self.process: subprocess.Popen[bytes] | None = None
        if self.user is not None:
            os.chown(self.directory, self.user.pw_uid, self.user.pw_gid)

    # -- URLs ---------------------------------------------------------------------------

    def url_for(self, user: str = SUPERUSER, password: str = PASSWORD, db: str = "postgres") -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{db}"

    @property
    def url(self) -> str:
        """The superuser's URL (tests isolate by namespace, or by a database of their own)."""
        return self.url_for()

    # -- processes ----------------------------------------------------------------------

    def _popen_kwargs(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        return {
            "user": self.user.pw_uid,
            "group": self.user.pw_gid,
            "extra_groups": [],
            "env": {**os.environ, "HOME": str(self.directory)},
        }

    def _initdb(self) -> None:
        pwfile = self.directory / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.user is not None:
            os.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
        subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
            **self._popen_kwargs(),
        )

    def start(self, timeout_s: float = 30.0) -> PostgresServer:
        """Start the server (initdb on the first start) and wait until it accepts logins."""
        if not self.data.exists():
            self._initdb()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.directory),
            "max_connections": "300",
            # The server dies only by our signal, never with the machine: a restart after
            # `-m immediate` replays the WAL as after a crash, without fsync's cost.
            "fsync": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
            **self.conf,
        }
        argv = [str(self.bindir / "postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        log = (self.directory / "postgres.log").open("ab")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, **self._popen_kwargs()
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                text = (self.directory / "postgres.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"postgres exited with {self.process.returncode}: {text}")
            if self.accepts_logins():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"postgres on port {self.port} did not accept logins in {timeout_s}s")

    def accepts_logins(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (SIGINT), ``immediate`` (SIGQUIT: a crash, WAL replay at
        the next start) or ``kill`` (SIGKILL)."""
        if self.process is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}.get(
            mode, signal.SIGKILL
        )
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if mode == "kill":  # SIGKILL leaves its backends behind, holding the port
            self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(OSError):
            pid_file.unlink()

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def execute(self, sql: str, *params: Any, db: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement as the superuser; return its rows (empty for none)."""
        import psycopg

        with psycopg.connect(self.url_for(db=db), autocommit=True) as conn:
            cursor = conn.execute(sql.encode(), params or None)  # type: ignore[call-overload]
            return list(cursor.fetchall()) if cursor.description else []

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
)


class PgBouncer:
    """PgBouncer in transaction mode in front of ``server``, on a free loopback port.

    Clients log in without a password (``auth_type = trust``, loopback only); PgBouncer
    logs in to the server as the superuser with its password. As root it runs as the
    server's unprivileged user (PgBouncer refuses root).
    """

    def __init__(self, server: PostgresServer, pool_size: int = 10) -> None:
        assert PGBOUNCER is not None, "pgbouncer is not installed"
        self.server = server
        self.port = free_port()
        self.directory = server.directory / "pgbouncer"
        self.directory.mkdir(exist_ok=True)
        self.pool_size = pool_size
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def start(self, timeout_s: float = 15.0) -> PgBouncer:
        (self.directory / "users.txt").write_text(f'"{SUPERUSER}" "{PASSWORD}"\n')
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"postgres = host=127.0.0.1 port={self.server.port} dbname=postgres "
            f"user={SUPERUSER} password={PASSWORD}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.directory}\n"
            "auth_type = trust\n"
            f"auth_file = {self.directory / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 500\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.directory / 'pgbouncer.log'}\n"
        )
        user = self.server.user
        if user is not None:
            for path in (self.directory, *self.directory.iterdir()):
                os.chown(path, user.pw_uid, user.pw_gid)
        self.process = subprocess.Popen(
            [str(PGBOUNCER), str(self.directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **self.server._popen_kwargs(),
        )
        import psycopg

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "pgbouncer.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}: {log}")
            try:
                with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return self
            except psycopg.Error:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer on port {self.port} did not answer in {timeout_s}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
