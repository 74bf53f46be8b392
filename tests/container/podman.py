"""Podman for the image tests: what it needs, a base image made from Debian, the build.

No registry but the package indexes can be reached here, so ``python:3.12-slim`` cannot be
pulled: the Dockerfile's ``PYTHON_IMAGE`` build argument is given a base made on this
machine from Debian's packages (``debootstrap --variant=minbase bookworm``, Python 3.11.2 in
a virtual environment first on ``PATH``, as the official image has its own ``python`` and
``pip``), imported once and kept in podman's image storage for the next runs; a change of
its recipe makes it again. The image itself is built from the repository's Dockerfile as
it is, with build arguments and build options only (``--network host``, and the host's CA
bundle handed to pip: where a proxy re-signs TLS, pip in the build trusts what the host
trusts).

What cannot work here is an environmental problem (:class:`Unavailable`: the tests skip
with its one line); a build that fails once the index is reachable is the project's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/cronrace-test-base:bookworm"
IMAGE = "localhost/cronrace-test:sidecar"
#: The label every container of these tests carries (``podman ps -a --filter label=...``).
LABEL = "cronrace.test=container"
#: The sandbox's hard limits are below podman's defaults: ask for what it allows.
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
#: One build at a time on a machine (xdist workers share podman's storage).
LOCK_FILE = Path(tempfile.gettempdir()) / "cronrace-test-image.lock"

#: The base image: a change of any of these (or of the host's CA bundle) makes it again.
VENV = "/opt/python"
BASE_PACKAGES = "python3,python3-venv"
BASE_PRUNE = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
)
BASE_CHANGES = (
    f"ENV=PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD=["python"]',
)
#: Where pip looks for its trust: the system bundle, which the base takes from the host.
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PIP_CONF = f"[global]\ncert = {CA_BUNDLE}\n"
INDEX_URL = "https://pypi.org/simple/pip/"


class Unavailable(Exception):
    """Podman cannot build or run the image on this machine, for a reason that is not ours."""


@dataclass
class Built:
    """The image the tests run (by ID: a run beside this one may move the tag), and what
    building it took."""

    image: str
    size_bytes: int
    base_made_s: float | None  # None: the base was already in podman's storage
    build_s: float


class Podman:
    """The ``podman`` command with the options this sandbox needs (runc, cgroupfs)."""

    def __init__(self, executable: str) -> None:
        self.argv = [executable, "--cgroup-manager", "cgroupfs"]
        if shutil.which("runc") is not None:  # crun refuses this sandbox's cgroups and rlimits
            self.argv += ["--runtime", "runc"]

    def __call__(
        self, *args: str, timeout_s: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.argv, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args[:3])} ... exited {done.returncode}: {_errors(done)}"
            )
        return done

    def remove(self, *names: str) -> None:
        """``podman rm -f``: a container of ours is gone, running or not (finalizers)."""
        if names:
            self("rm", "-f", "--ignore", "-t", "0", *names, timeout_s=60, check=False)


def _errors(done: subprocess.CompletedProcess[str]) -> str:
    """The last lines of a podman command's output, without its systemd complaints.

    Podman schedules health checks with systemd timers; there is no systemd here, and every
    command on a container with a HEALTHCHECK says so (harmless: the tests run the check).
    """
    lines = [line for line in (done.stderr + done.stdout).splitlines() if "systemd" not in line]
    return "\n".join(lines[-15:])


def find_podman() -> Podman:
    """Podman, able to run a container here; :class:`Unavailable` says why not."""
    if os.geteuid() != 0:
        raise Unavailable("not root: the image tests run podman as root")
    executable = shutil.which("podman")
    if executable is None:
        raise Unavailable("podman not installed (scripts/test.sh installs it as root)")
    return Podman(executable)


def _apt_mirror() -> str:
    """The Debian mirror apt is configured with (debootstrap fetches from it)."""
    sources = sorted(Path("/etc/apt").glob("sources.list.d/*.sources"))
    for path in sources:
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt").glob("sources.list.d/*.list")]:
        if path.is_file():
            for line in path.read_text().splitlines():
                fields = line.split()
                if fields[:1] == ["deb"] and "security" not in line:
                    return next(f for f in fields[1:] if "://" in f)
    return "http://deb.debian.org/debian"


def _run_env(argv: list[str], what: str, timeout_s: float) -> None:
    """Run a step of making the base; its failure is the environment's."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{what}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise Unavailable(f"{what} exited {done.returncode}: {last[0]}")


def _host_ca_bundle() -> Path | None:
    """The CA bundle the host's pip trusts (where a proxy re-signs TLS, it holds its CA)."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return Path(os.environ[name])
    return Path(CA_BUNDLE) if Path(CA_BUNDLE).is_file() else None


def _recipe() -> str:
    bundle = _host_ca_bundle()
    trust = hashlib.sha256(bundle.read_bytes()).hexdigest() if bundle is not None else ""
    recipe = ("bookworm", "minbase", BASE_PACKAGES, VENV, BASE_PRUNE, BASE_CHANGES, PIP_CONF)
    return hashlib.sha256(repr((*recipe, trust)).encode()).hexdigest()[:16]


def ensure_base_image(podman: Podman) -> float | None:
    """Make the base image unless podman's storage has it with this recipe.

    Returns how long making it took (None: it was there). About a minute: debootstrap
    downloads and unpacks Debian's minimal system and Python from apt's mirror. The base
    trusts what the host trusts (its CA bundle, pip told to use it), so that pip in the
    build reaches the index as pip on the host does; the Dockerfile needs no change for it.
    """
    recipe = _recipe()
    found = podman(
        "image", "inspect", "--format", '{{index .Labels "cronrace.recipe"}}', BASE_IMAGE,
        check=False,
    )  # fmt: skip
    if found.returncode == 0 and found.stdout.strip() == recipe:
        return None
    if shutil.which("debootstrap") is None:
        raise Unavailable("debootstrap not installed: no base image (scripts/test.sh installs it)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cronrace-base-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "root"
        mirror = _apt_mirror()
        _run_env(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
             str(root), mirror],
            f"debootstrap bookworm from {mirror}", 900,
        )  # fmt: skip
        _run_env(["chroot", str(root), "python3", "-m", "venv", VENV], "python3 -m venv", 120)
        for path in BASE_PRUNE:
            shutil.rmtree(root / path, ignore_errors=True)
        bundle = _host_ca_bundle()
        if bundle is not None:
            shutil.copyfile(bundle, root / CA_BUNDLE.lstrip("/"))
            (root / "etc" / "pip.conf").write_text(PIP_CONF)
        tar = subprocess.run(
            ["tar", "-C", str(root), "-c", "."], capture_output=True, check=True, timeout=300
        )
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        imported = subprocess.run(
            [*podman.argv, "import", *changes, "--change", f"LABEL=cronrace.recipe={recipe}",
             "-", BASE_IMAGE],
            input=tar.stdout, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        if imported.returncode != 0:
            raise Unavailable(f"podman import: {imported.stderr.decode(errors='replace')[-300:]}")
    return time.monotonic() - started


def _index_reachable() -> None:
    """The package index answers the host: without it the build cannot install anything."""
    bundle = _host_ca_bundle()
    context = ssl.create_default_context(cafile=str(bundle) if bundle is not None else None)
    try:
        with urllib.request.urlopen(INDEX_URL, timeout=15, context=context):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise Unavailable(f"the package index does not answer ({INDEX_URL}): {exc}") from exc


@contextlib.contextmanager
def _one_build_at_a_time() -> Iterator[dict[str, Any]]:
    """Hold the machine's build lock; yield the note in it, written back on leaving."""
    with LOCK_FILE.open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            lock.seek(0)
            try:
                note = dict(json.loads(lock.read() or "{}"))
            except ValueError:
                note = {}
            yield note
            lock.seek(0)
            lock.truncate()
            lock.write(json.dumps(note))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_image(podman: Podman) -> Built:
    """Build the repository's Dockerfile, as it is, on the local base.

    Build options only: ``--network host`` (pip reaches the index), ``--format docker`` (the
    OCI format has no HEALTHCHECK: podman would drop it), ``--layers=false`` (no cache of
    intermediate images piling up run after run: every run builds from the base, about 15 s),
    a label to find it by. Once per run: the workers of one run share it. Whatever podman
    can't do here raises :class:`Unavailable`; a build that fails once the index answers
    fails the test.
    """
    probe = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
    if probe.returncode != 0:
        last = _errors(probe).splitlines()[-1:] or ["(no output)"]
        raise Unavailable(f"podman info exited {probe.returncode}: {last[0]}")
    # Workers of one run (xdist) share the image: the first builds it and notes what that
    # took in the lock file; the others, waiting on the lock, find the note and the image.
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    with _one_build_at_a_time() as note:
        reuse = note.get("run") == run
        if reuse and podman("image", "exists", note["image"], check=False).returncode == 0:
            return Built(note["image"], note["size_bytes"], note["base_made_s"], note["build_s"])
        base_made_s = ensure_base_image(podman)
        tried = podman("run", "--rm", *ULIMITS, BASE_IMAGE, "true", check=False, timeout_s=120)
        if tried.returncode != 0:
            last = _errors(tried).splitlines()[-1:] or ["(no output)"]
            raise Unavailable(f"podman cannot run a container here: {last[0]}")
        _index_reachable()
        started = time.monotonic()
        done = podman(
            "build", "--layers=false", "--format", "docker", "--network", "host",
            "--label", LABEL, "--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}", "-t", IMAGE,
            str(ROOT), timeout_s=900, check=False,
        )  # fmt: skip
        build_s = time.monotonic() - started
        if done.returncode != 0:
            raise AssertionError(f"podman build exited {done.returncode}:\n{_errors(done)}")
        # Images of earlier runs, untagged now, go (but not those of a run that may still be
        # going on beside this one, in another clone: its containers name its image by ID).
        podman("image", "prune", "-f", "--filter", f"label={LABEL}", "--filter", "until=1h")
        found = podman("image", "inspect", "--format", "{{.Id}} {{.Size}}", IMAGE).stdout.split()
        note.clear()
        note.update(run=run, image=found[0], size_bytes=int(found[1]), build_s=build_s)
        note.update(base_made_s=base_made_s)
        return Built(found[0], int(found[1]), base_made_s, build_s)
