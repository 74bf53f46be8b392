"""The status page at ``/`` of the metrics server: the fleet at a glance, in plain HTML.

It shows what ``cronrace status`` shows (jobs with schedule, zone, next and last tick,
last outcome, lease holder and fence, paused, skipped and missed counts), the latest runs
across jobs and the live nodes; ``/status.json`` is the same view as JSON. The page is
rendered on the server, refreshes itself every few seconds (``<meta http-equiv=refresh>``),
loads nothing from anywhere (no script, no external asset) and escapes every value it
shows: job names, node ids and error texts are data, never markup.

Where the data comes from: the metrics server answers from its own threads, while the
agent's Redis connections belong to its event loop. A :class:`LoopBridge`, started as an
agent service, hands the page's reads to that loop (``anyio.from_thread.run`` with the
loop's token) and bounds them with a timeout; one view is shared by the requests of the
same second, so many open tabs cost Redis no more than one.

Buttons (pause, resume, trigger) appear only when the operator enables them. They post a
form carrying a per-process random token that only the page itself knows (another site
cannot read it), and the POST is refused unless the token matches and the browser's
``Origin`` / ``Sec-Fetch-Site`` (when sent) say the request came from this page.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from html import escape
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlencode

import anyio
import anyio.from_thread
import anyio.lowlevel
import orjson

import cronrace.web.timeline as timeline
from cronrace.errors import CronraceError
from cronrace.operate.fleetview import FleetView, look, relative, when

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from cronrace.agent.core import Agent

log = logging.getLogger("cronrace.web.statuspage")

T = TypeVar("T")

#: How long a view is reused by the requests that follow it.
VIEW_TTL_S = 1.0
#: How long a page's reads may take in the agent's loop before the page says so.
READ_TIMEOUT_S = 5.0
#: The largest form an action may post.
MAX_FORM_BYTES = 4096
ACTIONS = ("pause", "resume", "trigger")
#: Outcomes shown as good, bad or neutral.
GOOD = frozenset({"ok"})
BAD = frozenset({"error", "lease_lost", "abandoned", "missed", "cancelled"})

SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]


class AgentNotRunningError(CronraceError):
    """The agent's event loop is not running (starting, stopped, or not answering)."""


class LoopBridge:
    """Run coroutines in the agent's event loop from other threads.

    Start :meth:`serve` as an agent service (:meth:`cronrace.Agent.add_service`); while
    it runs, :meth:`call` works from any thread.
    """

    def __init__(self) -> None:
        self._token: anyio.lowlevel.EventLoopToken | None = None

    async def serve(self) -> None:
        """Publish the running loop's token until cancelled."""
        self._token = anyio.lowlevel.current_token()
        try:
            await anyio.sleep_forever()
        finally:
            self._token = None

    def call(self, func: Callable[[], Coroutine[Any, Any, T]], timeout_s: float) -> T:
        """Run ``func()`` in the agent's loop and return its result (from another thread).

        Raises:
            AgentNotRunningError: the loop is not running, or ``func`` took longer than
                ``timeout_s`` there.
        """
        token = self._token
        if token is None:
            raise AgentNotRunningError("the agent is not running (yet)")

        async def bounded() -> T:
            with anyio.fail_after(timeout_s):
                return await func()

        try:
            return anyio.from_thread.run(bounded, token=token)
        except TimeoutError:
            raise AgentNotRunningError(
                f"the agent's event loop did not answer within {timeout_s:g}s"
            ) from None
        except RuntimeError as exc:  # the loop closed between the check and the call
            raise AgentNotRunningError(f"the agent stopped: {exc}") from None


class StatusPage:
    """The WSGI side of the page; mount :meth:`handle` under ``/``.

    Args:
        agent: the agent whose fleet is shown (its namespace, through its Redis).
        actions: show pause, resume and trigger buttons and accept their POSTs.
        refresh_s: how often the page reloads itself.
        runs: how many of the latest runs to show.
    """

    def __init__(
        self, agent: Agent, *, actions: bool = False, refresh_s: int = 5, runs: int = 25
    ) -> None:
        self.agent = agent
        self.actions = actions
        self.refresh_s = refresh_s
        self.runs = runs
        self.bridge = LoopBridge()
        agent.add_service(self.bridge.serve)
        self._token = secrets.token_urlsafe(32)
        self._lock = threading.Lock()
        self._cached: tuple[float, FleetView] | None = None

    def view(self) -> FleetView:
        """The fleet's view, at most :data:`VIEW_TTL_S` old (from a server thread)."""
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < VIEW_TTL_S:
                return self._cached[1]
            view = self.bridge.call(
                lambda: look(self.agent.operator, runs=self.runs, history=timeline.SLOTS),
                READ_TIMEOUT_S,
            )
            self._cached = (time.monotonic(), view)
            return view

    def handle(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer ``GET /``, ``GET /status.json`` and ``POST /actions``."""
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/actions":
            if method != "POST":
                return _answer(start_response, "405 Method Not Allowed", "use POST\n")
            return self._act(environ, start_response)
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", "read-only\n")
        try:
            view = self.view()
        except (AgentNotRunningError, CronraceError, OSError) as exc:
            body = render_unavailable(str(exc), self.refresh_s)
            return _answer(start_response, "503 Service Unavailable", body, "text/html")
        except Exception as exc:  # noqa: BLE001 - a Redis error: the page says so, retries
            log.warning("status page could not read the fleet", extra={"error": str(exc)})
            body = render_unavailable(f"cannot read the fleet: {exc}", self.refresh_s)
            return _answer(start_response, "503 Service Unavailable", body, "text/html")
        if path == "/status.json":
            data = orjson.dumps(view.to_dict()).decode()
            return _answer(start_response, "200 OK", data, "application/json")
        query = parse_qs(environ.get("QUERY_STRING", ""))
        notice = _notice(query, view)
        token = self._token if self.actions else None
        base = environ.get("SCRIPT_NAME", "").rstrip("/")
        body = render(view, actions_token=token, refresh_s=self.refresh_s, notice=notice, base=base)
        return _answer(start_response, "200 OK", body, "text/html")

    def _act(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if not self.actions:
            return _answer(start_response, "403 Forbidden", "actions are disabled\n")
        problem = _cross_site(environ)
        if problem is not None:
            return _answer(start_response, "403 Forbidden", problem + "\n")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        kind = environ.get("CONTENT_TYPE", "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded" or not 0 < length <= MAX_FORM_BYTES:
            return _answer(start_response, "400 Bad Request", "expected a small form\n")
        form = parse_qs(environ["wsgi.input"].read(length).decode("utf-8", "replace"))
        token = form.get("token", [""])[0]
        op = form.get("op", [""])[0]
        job = form.get("job", [""])[0]
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            return _answer(start_response, "403 Forbidden", "stale or missing form token\n")
        if op not in ACTIONS:
            return _answer(start_response, "400 Bad Request", "unknown action\n")
        operation = getattr(self.agent, op)
        try:
            self.bridge.call(lambda: operation(job), READ_TIMEOUT_S)
        except CronraceError as exc:
            return _answer(start_response, "409 Conflict", f"{exc}\n")
        log.info("status page action", extra={"op": op, "job": job})
        with self._lock:
            self._cached = None
        base = environ.get("SCRIPT_NAME", "").rstrip("/")
        location = f"{base}/?" + urlencode({"did": op, "job": job})
        start_response("303 See Other", [("Location", location), *SECURITY_HEADERS])
        return [b""]


def _cross_site(environ: WSGIEnvironment) -> str | None:
    """Why a POST looks cross-site, or None (browsers send these; curl sends neither)."""
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    origin = environ.get("HTTP_ORIGIN")
    host = environ.get("HTTP_HOST", "")
    if origin is not None and origin.split("://", 1)[-1] != host:
        return "cross-origin request refused (Origin does not match Host)"
    return None


def _notice(query: dict[str, list[str]], view: FleetView) -> str | None:
    op, job = query.get("did", [""])[0], query.get("job", [""])[0]
    if op in ACTIONS and job in {row.job for row in view.jobs}:
        done = {"pause": "paused", "resume": "resumed", "trigger": "triggered"}[op]
        return f"{done} {job}"
    return None


def _answer(
    start_response: StartResponse, status: str, body: str, kind: str = "text/plain"
) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [
            ("Content-Type", f"{kind}; charset=utf-8"),
            ("Content-Length", str(len(data))),
            *SECURITY_HEADERS,
        ],
    )
    return [data]


# -- rendering (pure: a view in, a page out) -------------------------------------------------

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2125;background:#fff}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.6em 0 .4em}
.meta{color:#5a6169}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e3e6e8;vertical-align:top}
th{font-weight:600;background:#f5f6f7;white-space:nowrap}td.num{text-align:right}
code,.id{font-family:ui-monospace,monospace;font-size:.95em;white-space:nowrap}
.note{max-width:40em;overflow-wrap:anywhere;color:#37474f}
.o{display:inline-block;padding:0 .45em;border-radius:.6em;font-size:.9em;white-space:nowrap}
.good{background:#d8f3dc;color:#1b5e20}.bad{background:#fde2e1;color:#9b1c1c}
.neutral{background:#eceff1;color:#37474f}.paused{background:#fff3cd;color:#7a5b00}
.notice{background:#e7f1ff;padding:.5em .8em;border-radius:.3em}
.warn{background:#fff3cd;padding:.5em .8em;border-radius:.3em}
.err{max-width:40em;overflow-wrap:anywhere;color:#9b1c1c}
.problem{white-space:normal;overflow-wrap:anywhere;color:#9b1c1c}
form{display:inline}button{font:inherit;padding:.1em .6em;margin-right:.2em}
"""


def _outcome(outcome: str | None) -> str:
    if outcome is None:
        return "-"
    css = "good" if outcome in GOOD else "bad" if outcome in BAD else "neutral"
    return f'<span class="o {css}">{escape(outcome)}</span>'


def _time(tick_s: int | None, now_s: float) -> str:
    if tick_s is None:
        return "-"
    return f'<time datetime="{tick_s}">{escape(when(tick_s, now_s))}</time>'


def _buttons(job: str, paused: bool, token: str, base: str) -> str:
    forms = []
    for op in ("resume" if paused else "pause", "trigger"):
        forms.append(
            f'<form method="post" action="{escape(base)}/actions">'
            f'<input type="hidden" name="token" value="{escape(token)}">'
            f'<input type="hidden" name="op" value="{op}">'
            f'<input type="hidden" name="job" value="{escape(job)}">'
            f"<button>{op}</button></form>"
        )
    return "".join(forms)


def _jobs_table(view: FleetView, token: str | None, base: str) -> str:
    headers = [
        "job",
        "schedule",
        "zone",
        "next tick",
        "last tick",
        "outcome",
        "lease holder",
        "fence",
        "paused",
        "skipped",
        "missed",
    ]
    if token is not None:
        headers.append("actions")
    rows = []
    for job in view.jobs:
        paused = '<span class="o paused">paused</span>' if job.paused else "no"
        # A problem (nodes disagree on the job, no live node runs a stored schedule) is
        # said under the job's name, where it cannot be missed.
        problem = f'<br><small class="problem">{escape(job.problem)}</small>' if job.problem else ""
        cells = [
            f'<td class="id">{escape(job.job)}{problem}</td>',
            f"<td><code>{escape(job.schedule)}</code></td>",
            f"<td>{escape(job.timezone)}</td>",
            f"<td>{_time(job.next_tick_s, view.now_s)}</td>",
            f"<td>{_time(job.last_tick_s, view.now_s)}</td>",
            f"<td>{_outcome(job.last_outcome)}</td>",
            f'<td class="id">{escape(job.lease_owner or "-")}</td>',
            f'<td class="num">{job.lease_fence if job.lease_fence is not None else "-"}</td>',
            f"<td>{paused}</td>",
            f'<td class="num">{job.skipped}</td>',
            f'<td class="num">{job.missed}</td>',
        ]
        if token is not None:
            cells.append(f"<td>{_buttons(job.job, job.paused, token, base)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return _table(headers, rows, "no jobs registered")


def _runs_table(view: FleetView) -> str:
    headers = ["tick", "job", "outcome", "node", "fence", "duration", "error / detail"]
    rows = []
    for run in view.runs:
        note = run.error or ""
        if not note and run.detail is not None:
            note = orjson.dumps(run.detail, default=str).decode()
        if run.count > 1:
            note = f"{run.count} ticks {note}".strip()
        duration = f"{run.duration_s:.3f}s" if run.duration_s is not None else "-"
        css = "err" if run.error else "note"
        rows.append(
            "<tr>"
            f"<td>{_time(run.tick_s, view.now_s)}</td>"
            f'<td class="id">{escape(run.job)}</td>'
            f"<td>{_outcome(run.outcome.value)}</td>"
            f'<td class="id">{escape(run.node)}</td>'
            f'<td class="num">{run.fence or "-"}</td>'
            f'<td class="num">{duration}</td>'
            f'<td class="{css}">{escape(note[:500])}</td>'
            "</tr>"
        )
    return _table(headers, rows, "no runs recorded yet")


def _timeline_table(view: FleetView) -> str:
    rows = []
    for job in view.jobs:
        records = view.histories.get(job.job, ())
        lags = [lag for r in records if (lag := timeline.lag_s(r)) is not None]
        durations = [d for r in records if (d := r.duration_s) is not None]
        since = (
            f'<small class="meta">from {_time(records[-1].tick_s, view.now_s)}</small>'
            if records
            else '<small class="meta">no run yet</small>'
        )
        rows.append(
            "<tr>"
            f'<td class="id">{escape(job.job)}</td>'
            f"<td>{timeline.strip(job.job, records)}{since}</td>"
            f'<td class="num">{f"{max(lags):.3f}s" if lags else "-"}</td>'
            f'<td class="num">{f"{max(durations):.3f}s" if durations else "-"}</td>'
            "</tr>"
        )
    headers = [f"last {timeline.SLOTS} runs", "max start lag", "longest run"]
    return _table(["job", *headers], rows, "no jobs registered")


def _nodes_table(view: FleetView) -> str:
    rows = [
        "<tr>"
        f'<td class="id">{escape(node.node_id)}</td>'
        f"<td>{escape(relative(node.last_seen_ms / 1000 - view.now_s))}</td>"
        f"<td>{escape(relative(node.expires_ms / 1000 - view.now_s))}</td>"
        "</tr>"
        for node in view.nodes
    ]
    return _table(["node", "last heartbeat", "expires"], rows, "no live node")


def _table(headers: list[str], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p class="meta">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _page(title: str, refresh_s: int, body: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{int(refresh_s)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}{timeline.STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def render(
    view: FleetView,
    *,
    actions_token: str | None,
    refresh_s: int,
    notice: str | None = None,
    base: str = "",
) -> str:
    """The whole page for ``view``; buttons only when ``actions_token`` is given.

    Args:
        base: the path the page is mounted under (WSGI's ``SCRIPT_NAME``, e.g.
            ``/cronrace`` in an application), prefixed to the buttons' form action.
    """
    taken = when(int(view.now_s), view.now_s).split(" (")[0]
    mode = "pause, resume and trigger enabled" if actions_token else "read-only"
    parts = [
        f"<h1>cronrace · namespace <code>{escape(view.namespace)}</code></h1>",
        f'<p class="meta">{len(view.jobs)} job(s), {len(view.nodes)} live node(s) · '
        f"as of {escape(taken)} · refreshes every {int(refresh_s)}s · {mode}</p>",
    ]
    if notice:
        parts.append(f'<p class="notice">{escape(notice)}</p>')
    if not view.registered:
        parts.append(
            '<p class="warn">No agent has registered in this namespace yet: agents register '
            "their jobs when they first reach the store.</p>"
        )
    elif not view.nodes:
        parts.append('<p class="warn">No live node: nothing fires these jobs.</p>')
    parts += [
        "<h2>Jobs</h2>",
        _jobs_table(view, actions_token, base),
        "<h2>Run timeline</h2>",
        timeline.LEGEND,
        _timeline_table(view),
        "<h2>Latest runs</h2>",
        _runs_table(view),
        "<h2>Live nodes</h2>",
        _nodes_table(view),
    ]
    return _page(f"cronrace · {view.namespace}", refresh_s, "".join(parts))


def render_unavailable(reason: str, refresh_s: int) -> str:
    """The page shown while the fleet cannot be read (it retries by itself)."""
    body = (
        "<h1>cronrace</h1>"
        f'<p class="warn">The fleet cannot be read right now: {escape(reason)}.</p>'
        f'<p class="meta">This page tries again every {int(refresh_s)}s.</p>'
    )
    return _page("cronrace · unavailable", refresh_s, body)
