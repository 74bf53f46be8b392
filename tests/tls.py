"""Certificates for TLS tests, made with openssl: a CA, a server certificate it signs for
127.0.0.1, and a second CA that signed nothing (what a wrong ``ssl_ca_certs`` looks like)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cronrace.testing import RedisServer, TLSFiles

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _new_ca(directory: Path, name: str) -> Path:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.crt"


def make_certificates(directory: Path) -> tuple[TLSFiles, Path]:
    """Return the server's files and the certificate of a CA that did not sign them.

    Skips the calling test when openssl is missing.
    """
    if OPENSSL is None:
        pytest.skip("openssl is not installed: cannot make certificates for the TLS tests")
    directory.mkdir(parents=True, exist_ok=True)
    ca = _new_ca(directory, "test-ca")
    other_ca = _new_ca(directory, "other-ca")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", ca.name, "-CAkey", "test-ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.cnf",
        cwd=directory,
    )  # fmt: skip
    files = TLSFiles(directory / "server.crt", directory / "server.key", ca)
    return files, other_ca


def start_tls_server(directory: Path) -> tuple[RedisServer, Path]:
    """Start a TLS-only redis-server (no plain port); skip when this build lacks TLS."""
    files, other_ca = make_certificates(directory / "certs")
    server = RedisServer(directory / "redis", appendonly=False, tls=files)
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        if "tls" in str(exc).lower() or "TLS" in str(exc):
            pytest.skip(f"this redis-server cannot serve TLS: {exc}")
        raise
    return server, other_ca
