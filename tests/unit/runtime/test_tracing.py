"""Tracing: a span per wake-up's claims and per run, seen by the SDK's in-memory exporter;
the run's context carried on by the targets; nothing at all without the API."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cronrace import RunContext
from cronrace.runtime import tracing
from cronrace.sidecar.streams import StreamTarget
from cronrace.sidecar.targets import CommandTarget, HttpTarget
from cronrace.specs.targets import CommandSpec, HttpSpec, StreamSpec
from cronrace.testing import FakeClock, memory_agent

EXPORTER = InMemorySpanExporter()


class Gate(SimpleSpanProcessor):
    """Exports only while a test of this module runs: the provider outlives the test."""

    open = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            super().on_end(span)


GATE = Gate(EXPORTER)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one), cleared per test."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(GATE)
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    GATE.open = True
    yield EXPORTER
    GATE.open = False
    EXPORTER.clear()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def traceparent(span: Any) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_wake_up_and_its_runs_are_spans_with_the_run_s_facts(
    spans: InMemorySpanExporter,
) -> None:
    clock = FakeClock(start_s=1_800_000_005)
    agent = memory_agent(clock)
    current: dict[str, int] = {}

    async def fine(ctx: RunContext) -> None:
        current[ctx.job] = trace.get_current_span().get_span_context().span_id

    def blocking(ctx: RunContext) -> None:  # in a worker thread: the context goes with it
        current[ctx.job] = trace.get_current_span().get_span_context().span_id

    def broken(ctx: RunContext) -> None:
        raise RuntimeError("disk full")

    agent.add_job(fine, "@every 10s", name="fine")
    agent.add_job(blocking, "@every 10s", name="blocking")
    agent.add_job(broken, "@every 10s", name="broken")
    async with agent:
        await clock.advance(5)  # one tick of each, due at the same instant: one wake-up
    records = {r.job: r for job in ("fine", "blocking", "broken") for r in await agent.history(job)}

    [claims] = named(spans, "cronrace claims")
    assert claims.attributes == {
        "cronrace.node": agent.node_id,
        "cronrace.claims": 3,
        "cronrace.won": 3,
        "cronrace.lost": 0,
    }
    runs = {span.attributes["cronrace.job"]: span for span in named(spans, "cronrace run")}
    assert set(runs) == {"fine", "blocking", "broken"}
    for job, span in runs.items():
        assert span.name == f"cronrace run {job}"
        assert span.parent is not None
        assert span.parent.span_id == claims.context.span_id  # decided in that wake-up
        assert span.context.trace_id == claims.context.trace_id
        attributes = dict(span.attributes or {})
        assert attributes.pop("cronrace.lag_s") >= 0
        assert attributes == {
            "cronrace.job": job,
            "cronrace.tick": 1_800_000_010,
            "cronrace.fence": records[job].fence,
            "cronrace.node": agent.node_id,
            "cronrace.outcome": records[job].outcome.value,
            "cronrace.lease_renewals": 0,
        }
    # The run's span is the handler's current span, async or in a worker thread.
    assert current == {job: runs[job].context.span_id for job in ("fine", "blocking")}
    assert runs["fine"].status.status_code is StatusCode.UNSET
    assert runs["broken"].status.status_code is StatusCode.ERROR
    assert "disk full" in (runs["broken"].status.description or "")


async def test_a_trigger_s_run_span_names_the_trigger(spans: InMemorySpanExporter) -> None:
    clock = FakeClock(start_s=1_800_000_000)
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: None, "@daily", name="daily")
    async with agent:
        trigger_id = await agent.trigger("daily")
        while not named(spans, "cronrace run"):
            await clock.advance(0.1)
    [run] = named(spans, "cronrace run")
    assert run.attributes is not None
    assert run.attributes["cronrace.trigger_id"] == trigger_id


def test_targets_carry_the_run_s_trace_context_on(spans: InMemorySpanExporter) -> None:
    ctx = RunContext(job="export", tick_s=1_800_000_000, fence=7, node_id="n")
    http = HttpTarget(HttpSpec(url="http://127.0.0.1:9/hook"))
    command = CommandTarget(CommandSpec(argv=["true"]))
    stream = StreamTarget(StreamSpec(key="exports"), agent_store=lambda: None)  # type: ignore[arg-type, return-value]
    assert "traceparent" not in http.headers(ctx)  # no run, no span: nothing to continue
    with tracing.run_span("export", 1_800_000_000, 7, "n", 0.0, None):
        expected = traceparent(trace.get_current_span())
        assert http.headers(ctx)["traceparent"] == expected
        assert stream.fields(ctx)["traceparent"] == expected
        assert command.environment(ctx)["TRACEPARENT"] == expected
        assert http.headers(ctx)["X-Cronrace-Fence"] == "7"  # beside, not instead


async def test_a_stream_entry_written_by_a_run_carries_its_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    clock = FakeClock(start_s=1_800_000_000)
    agent = memory_agent(clock)
    target = StreamTarget(StreamSpec(key="exports"), agent_store=lambda: agent.store)
    agent.add_job(target, "@every 10s", name="export")
    async with agent:
        await clock.advance(10)
    [run] = named(spans, "cronrace run export")
    [(_id, fields)] = await agent.store.client.xrange("exports")  # type: ignore[attr-defined]
    assert fields[b"traceparent"].decode() == traceparent(run)


def test_without_the_api_nothing_is_imported_or_made() -> None:
    """A process where ``import opentelemetry`` fails, as without ``cronrace[otel]``."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # the import fails, as when not installed
        import anyio
        from cronrace.runtime import tracing
        from cronrace.testing import FakeClock, memory_agent

        assert tracing.run_span("j", 1, 1, "n", 0.0, None) is tracing.OFF
        assert tracing.claims_span("n", 3) is tracing.OFF
        assert tracing.inject({}) == {}

        async def main():
            clock = FakeClock(start_s=1_800_000_000)
            agent = memory_agent(clock)
            ran = []
            agent.add_job(lambda ctx: ran.append(ctx.tick_s), "@every 10s", name="j")
            async with agent:
                await clock.advance(20)
            assert ran == [1_800_000_010, 1_800_000_020], ran

        anyio.run(main)
        print("ran untraced")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ran untraced" in done.stdout


def test_with_the_api_but_no_provider_no_span_is_made() -> None:
    """The API installed, no tracer provider set: nothing would record, nothing is made;
    a provider set later is used from then on."""
    script = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from cronrace.runtime import tracing

        assert tracing.run_span("j", 1, 1, "n", 0.0, None) is tracing.OFF
        assert tracing.claims_span("n", 3) is tracing.OFF
        trace.set_tracer_provider(TracerProvider())
        with tracing.run_span("j", 1, 1, "n", 0.0, None) as span:
            assert span is not tracing.OFF
            assert trace.get_current_span().is_recording()
        print("spans once a provider is set")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "spans once a provider is set" in done.stdout
