"""Tracing with OpenTelemetry, when its API is installed (``pip install cronrace[otel]``).

Configure a tracer provider as for any program (the SDK and an exporter, or the
``opentelemetry-instrument`` launcher), and cronrace reports:

- ``cronrace claims``: one span per wake-up, around the claims it sends in one pipeline and
  the decisions of those it won (``cronrace.claims``, ``cronrace.won``, ``cronrace.lost``);
- ``cronrace run <job>``: one span per run, a child of its wake-up's span, current while
  the handler runs (so the handler's own spans are its children), with the job, tick,
  fence, node, outcome, start lag and lease renewals as attributes; its status is an error
  for a run that did not end ``ok``.

The targets carry the run's context on as W3C Trace Context: the HTTP target sends
``traceparent`` (and ``tracestate``) headers, the stream target writes them as fields, the
command target sets ``TRACEPARENT`` (and ``TRACESTATE``), so the receiving side continues
the trace.

Without the API, or with the API but no tracer provider configured (nothing would record
a span), every call here returns one shared object that does nothing: no allocation,
nothing on a run's path but two method calls. Without the API nothing is imported either.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from types import ModuleType, TracebackType
from typing import Any

#: The instrumentation scope cronrace's spans are reported under.
TRACER_NAME = "cronrace"
#: Outcomes whose span status is not an error.
FINE = frozenset({"ok"})

_api: tuple[ModuleType, ModuleType] | bool | None = False  # False: not looked for yet


def _otel() -> tuple[ModuleType, ModuleType] | None:
    """The OpenTelemetry ``trace`` and ``propagate`` modules, or None when not installed.

    Imported on first use: a program that never runs a job never pays for the import.
    """
    global _api
    if _api is False:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = None
        else:
            _api = (trace, propagate)
    return _api  # type: ignore[return-value]


class _Off:
    """What every span is without the API: a context manager and a span that do nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def ended(self, outcome: str, error: str | None, renewals: int) -> None:
        """Note how the run ended."""

    def answered(self, won: int, lost: int) -> None:
        """Note how the claims were answered."""


OFF = _Off()


class _Span:
    """A recording span: what the runner and the race tell it, as attributes and status."""

    __slots__ = ("_span", "_trace")

    def __init__(self, trace: ModuleType, span: Any) -> None:
        self._trace, self._span = trace, span

    def ended(self, outcome: str, error: str | None, renewals: int) -> None:
        """Note how the run ended: its outcome, its error, how often its lease was renewed."""
        self._span.set_attribute("cronrace.outcome", outcome)
        self._span.set_attribute("cronrace.lease_renewals", renewals)
        if outcome not in FINE:
            status = self._trace.Status(self._trace.StatusCode.ERROR, error or outcome)
            self._span.set_status(status)

    def answered(self, won: int, lost: int) -> None:
        """Note how many of the wake-up's claims were won and lost."""
        self._span.set_attribute("cronrace.won", won)
        self._span.set_attribute("cronrace.lost", lost)


#: The last provider a tracer was taken from, and that tracer (providers are set once).
_tracer: tuple[Any, Any] = (None, None)
#: The API's placeholder provider, once found (no provider configured yet).
_placeholder: Any = None


def _recording(trace: ModuleType) -> Any:
    """cronrace's tracer, or None while no tracer provider is configured.

    Until a program sets one (``set_tracer_provider``, ``OTEL_PYTHON_TRACER_PROVIDER``, the
    launcher) the API's own placeholder answers, and every span it makes records nothing:
    making them cost a run's path tens of microseconds for nothing. Asked at every span,
    so a provider set after the agent started is used from then on.
    """
    global _tracer, _placeholder
    if _placeholder is not None and getattr(trace, "_TRACER_PROVIDER", _placeholder) is None:
        # Still none set: the API's own global says so. get_tracer_provider() looks for
        # OTEL_PYTHON_TRACER_PROVIDER in os.environ at every call until one is set (1.6 us
        # against 0.2, at every run); the variable is read at the first span, as the API
        # reads it then. Without that global (another API version) the API is asked.
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        _placeholder = provider
        return None
    if _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer(TRACER_NAME))
    return _tracer[1]


@contextmanager
def _current(
    tracer: Any, trace: ModuleType, name: str, attributes: dict[str, Any]
) -> Iterator[_Span]:
    # Exceptions are the run's outcome (told through ended()), or a cancellation: neither
    # is an exception event of the span.
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        yield _Span(trace, span)


def run_span(
    job: str, tick_s: int, fence: int, node: str, lag_s: float, trigger_id: str | None
) -> Any:
    """The span of one run, current while the handler runs (a context manager).

    The value it enters as takes :meth:`_Span.ended` once the outcome is known.
    """
    api = _otel()
    tracer = None if api is None else _recording(api[0])
    if api is None or tracer is None:
        return OFF
    attributes: dict[str, Any] = {
        "cronrace.job": job,
        "cronrace.tick": tick_s,
        "cronrace.fence": fence,
        "cronrace.node": node,
        "cronrace.lag_s": round(lag_s, 6),
    }
    if trigger_id is not None:
        attributes["cronrace.trigger_id"] = trigger_id
    return _current(tracer, api[0], f"cronrace run {job}", attributes)


def claims_span(node: str, claims: int) -> Any:
    """The span of one wake-up's claims and decisions (a context manager)."""
    api = _otel()
    tracer = None if api is None else _recording(api[0])
    if api is None or tracer is None:
        return OFF
    attributes = {"cronrace.node": node, "cronrace.claims": claims}
    return _current(tracer, api[0], "cronrace claims", attributes)


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current span's ``traceparent`` (and ``tracestate``) to ``carrier``.

    Nothing is added without the API, or outside a recording span. Returns ``carrier``.
    """
    api = _otel()
    if api is not None:
        api[1].inject(carrier)
    return carrier
