"""Prometheus metrics: the agent's events as counters, gauges and histograms.

:class:`PrometheusObserver` turns the agent's events into metrics in a registry of its own
(several agents in one process do not collide); ``cronrace.web.probes`` serves them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cronrace.model.policies import Outcome
from cronrace.runtime.observer import Observer

if TYPE_CHECKING:
    from cronrace.agent.core import Agent

# A `*_created` series per counter and histogram doubles what Prometheus stores and no
# alert or dashboard of ours reads it. The switch is process-wide in prometheus-client.
disable_created_metrics()  # type: ignore[no-untyped-call]


LAG_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
DURATION_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
RATIO_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.5, 2.0, 5.0)
#: How many run records of each job the start-up seeding of the last success reads.
SEED_RECORDS = 50

#: Decision outcomes that mean a tick did not run, and the reason label they count under.
_SKIP_REASONS = {
    Outcome.SKIPPED_OVERLAP: "overlap",
    Outcome.SKIPPED_PAUSED: "paused",
    Outcome.NOT_REPLICATED: "not_replicated",
    Outcome.MISSED: "missed",
    Outcome.STALE: "stale",
}


@dataclass(slots=True)
class _JobSeries:
    """One job's label children of the per-run metrics, looked up once."""

    fire_lag: Any
    run_duration: Any
    interval_ratio: Any
    last_interval_ratio: Any
    lease_losses: Any
    runs: dict[Outcome, Any] = field(default_factory=dict)
    #: Looked up at the first success: a label child exists (at 0) as soon as it is made.
    last_success: Any = None


class PrometheusObserver(Observer):
    """Count what the agent does; see the module docstring for the endpoints.

    Args:
        registry: where the metrics live; default: a new registry with the process and
            platform collectors.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
        self.registry = registry
        self._job_series: dict[str, _JobSeries] = {}
        self.definition_disagreements_jobs = Gauge(
            "cronrace_definition_disagreements",
            "Jobs that live nodes define differently (they fire the union of the ticks).",
            registry=registry,
        )
        self.claims_total = Counter(
            "cronrace_claims",
            "Tick claims sent, by result (won: this node runs the tick's decision; taken_over: "
            "a claim whose winner went silent undecided, taken over by this node).",
            ["result"],
            registry=registry,
        )
        self.claims_skipped_total = Counter(
            "cronrace_claims_skipped",
            "Due ticks this node planned and left to the tick's other racers (racers = k): "
            "no claim sent.",
            registry=registry,
        )
        self.members = Gauge(
            "cronrace_members",
            "Live nodes in this node's view of the fleet (the racers are chosen among them).",
            registry=registry,
        )
        self.runs_total = Counter(
            "cronrace_runs",
            "Runs by outcome (ok, error, cancelled, lease_lost, abandoned).",
            ["job", "outcome"],
            registry=registry,
        )
        self.skipped_ticks_total = Counter(
            "cronrace_skipped_ticks",
            "Ticks decided without a run, by reason (overlap, paused, missed, stale, ...).",
            ["job", "reason"],
            registry=registry,
        )
        self.queued_ticks_total = Counter(
            "cronrace_queued_ticks",
            "Ticks queued behind a running run (overlap queue_one).",
            ["job"],
            registry=registry,
        )
        self.fire_lag = Histogram(
            "cronrace_fire_lag_seconds",
            "Delay between a tick's scheduled instant and its handler's start.",
            ["job"],
            buckets=LAG_BUCKETS_S,
            registry=registry,
        )
        self.run_duration = Histogram(
            "cronrace_run_duration_seconds",
            "How long handlers ran.",
            ["job"],
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.interval_ratio = Histogram(
            "cronrace_run_interval_ratio",
            "Run duration divided by the schedule's interval (above 1: runs overlap ticks).",
            ["job"],
            buckets=RATIO_BUCKETS,
            registry=registry,
        )
        self.last_interval_ratio = Gauge(
            "cronrace_last_run_interval_ratio",
            "The last run's duration divided by the schedule's interval.",
            ["job"],
            registry=registry,
        )
        self.lease_renewals_total = Counter(
            "cronrace_lease_renewals",
            "Lease renewals, by result (ok, failed).",
            ["job", "result"],
            registry=registry,
        )
        self.lease_losses_total = Counter(
            "cronrace_lease_losses",
            "Runs cancelled because their lease was lost.",
            ["job"],
            registry=registry,
        )
        self.redis_errors_total = Counter(
            "cronrace_redis_errors",
            "Failed store calls (Redis or PostgreSQL), by operation.",
            ["operation"],
            registry=registry,
        )
        self.records_dropped_total = Counter(
            "cronrace_records_dropped",
            "Run records given up unwritten (the outbox full, or the store away at exit).",
            ["job", "outcome"],
            registry=registry,
        )
        self.running = Gauge(
            "cronrace_running_runs", "Handlers running on this node now.", registry=registry
        )
        self.ready_gauge = Gauge(
            "cronrace_ready",
            "1 when the store is reachable and its scripts or schema are ready.",
            registry=registry,
        )
        self.redis_refusals_total = Counter(
            "cronrace_redis_refusals",
            "Calls the store refused for good, by command and cause (authentication, "
            "permission, tls, schema): not an outage; fix the ACL or grants, the password "
            "or the CA.",
            ["command", "cause"],
            registry=registry,
        )
        self.loop_lag = Gauge(
            "cronrace_event_loop_lag_seconds",
            "How late the agent's event loop is now (or was at its last wake-up).",
            registry=registry,
        )
        self.loop_stalls_total = Counter(
            "cronrace_event_loop_stalls",
            "Times the event loop woke later than the liveness threshold.",
            registry=registry,
        )
        self.info = Gauge(
            "cronrace_agent_info",
            "Always 1; labels name this agent's node and namespace.",
            ["node", "namespace"],
            registry=registry,
        )
        self.last_success = Gauge(
            "cronrace_last_success_timestamp_seconds",
            "When a run of the job last ended ok (UTC epoch seconds), once one is known: "
            "read from the job's history at start-up, or a run of this node. Absent while "
            "none is (see cronrace_watched_since_timestamp_seconds).",
            ["job"],
            registry=registry,
        )
        self.watched_since = Gauge(
            "cronrace_watched_since_timestamp_seconds",
            "Since when this node has scheduled the job (UTC epoch seconds): with no success "
            "known, the alerts count the intervals from here.",
            ["job"],
            registry=registry,
        )

    def describe(self, node_id: str, namespace: str) -> None:
        """Publish the node id and namespace as ``cronrace_agent_info`` labels."""
        self.info.labels(node=node_id, namespace=namespace).set(1)

    def watch_schedule(self, agent: Agent) -> None:
        """Export each job's next tick and interval, read from ``agent`` at scrape time."""
        self.registry.register(ScheduleCollector(agent))

    async def seed_last_success(self, agent: Agent) -> None:
        """Start watching each job, and read its last success from the store.

        An agent service, run once the agent is connected. Each job's watch starts now
        (``cronrace_watched_since_timestamp_seconds``), before the store is read, so a job
        that never succeeded still alerts when that read fails. The last success is the
        newest ``ok`` record among the last :data:`SEED_RECORDS`, so a job that broke with
        the deploy that restarted this node still alerts; with none among them no success
        is known, and the gauge stays absent: it never reports a success that did not happen.
        """
        started_s = agent.clock.time()
        for name in agent.jobs:
            self.watched_since.labels(job=name).set(started_s)
        found = await agent.store.histories(list(agent.jobs), SEED_RECORDS)  # one round trip
        for name, records in found.items():
            ok = [
                r.finished_ms / 1000 for r in records if r.outcome is Outcome.OK and r.finished_ms
            ]
            if not ok:
                continue
            current = self.registry.get_sample_value(
                "cronrace_last_success_timestamp_seconds", {"job": name}
            )
            if current is None:  # a run may have ended ok meanwhile: it knows better
                self.last_success.labels(job=name).set(max(ok))

    # -- Observer hooks ------------------------------------------------------------------

    def claims(self, won: int, lost: int) -> None:
        if won:
            self.claims_total.labels(result="won").inc(won)
        if lost:
            self.claims_total.labels(result="lost").inc(lost)

    def claims_taken_over(self, count: int) -> None:
        self.claims_total.labels(result="taken_over").inc(count)

    def claims_skipped(self, count: int) -> None:
        self.claims_skipped_total.inc(count)

    def membership(self, members: int) -> None:
        self.members.set(members)

    def decision(self, job: str, outcome: Outcome, count: int = 1) -> None:
        if outcome in _SKIP_REASONS:
            self.skipped_ticks_total.labels(job=job, reason=_SKIP_REASONS[outcome]).inc(count)
        elif outcome is Outcome.QUEUED:
            self.queued_ticks_total.labels(job=job).inc(count)
        else:  # abandoned: a run that ended without anyone recording it
            self.runs_total.labels(job=job, outcome=outcome.value).inc(count)

    def _of_job(self, job: str) -> _JobSeries:
        # labels() costs ~2 us a call (validation, a lock): every run used seven of them.
        series = self._job_series.get(job)
        if series is None:
            series = self._job_series[job] = _JobSeries(
                fire_lag=self.fire_lag.labels(job=job),
                run_duration=self.run_duration.labels(job=job),
                interval_ratio=self.interval_ratio.labels(job=job),
                last_interval_ratio=self.last_interval_ratio.labels(job=job),
                lease_losses=self.lease_losses_total.labels(job=job),
            )
        return series

    def run_started(self, job: str, lag_s: float) -> None:
        self.running.inc()
        self._of_job(job).fire_lag.observe(max(0.0, lag_s))

    def run_finished(self, job: str, outcome: Outcome, duration_s: float, ratio: float) -> None:
        self.running.dec()
        series = self._of_job(job)
        runs = series.runs.get(outcome)
        if runs is None:
            runs = series.runs[outcome] = self.runs_total.labels(job=job, outcome=outcome.value)
        runs.inc()
        series.run_duration.observe(duration_s)
        series.interval_ratio.observe(ratio)
        series.last_interval_ratio.set(ratio)
        if outcome is Outcome.OK:
            if series.last_success is None:
                series.last_success = self.last_success.labels(job=job)
            series.last_success.set_to_current_time()
        if outcome is Outcome.LEASE_LOST:
            series.lease_losses.inc()

    def renewal(self, job: str, ok: bool) -> None:
        self.lease_renewals_total.labels(job=job, result="ok" if ok else "failed").inc()

    def redis_error(self, operation: str) -> None:
        self.redis_errors_total.labels(operation=operation).inc()

    def record_dropped(self, job: str, outcome: Outcome) -> None:
        self.records_dropped_total.labels(job=job, outcome=outcome.value).inc()

    def ready(self, ready: bool) -> None:
        self.ready_gauge.set(1 if ready else 0)

    def redis_refused(self, command: str, cause: str) -> None:
        self.redis_refusals_total.labels(command=command, cause=cause).inc()

    def loop_watched(self, lag_s: Callable[[], float]) -> None:
        # Read at scrape time, from the metrics thread: it shows a loop blocked right now.
        self.loop_lag.set_function(lag_s)

    def loop_stalled(self, lag_s: float) -> None:
        self.loop_stalls_total.inc()

    def definition_disagreements(self, jobs: int) -> None:
        self.definition_disagreements_jobs.set(jobs)


class ScheduleCollector(Collector):
    """``cronrace_next_tick_timestamp_seconds`` and ``cronrace_schedule_interval_seconds``.

    Read from the agent's scheduler when Prometheus scrapes (from the server's thread:
    ``dict.copy`` is atomic under the GIL, and the scheduler only ever replaces values),
    so the tick loop pays nothing for them.
    """

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterable[GaugeMetricFamily]:
        next_tick = GaugeMetricFamily(
            "cronrace_next_tick_timestamp_seconds",
            "The job's next scheduled tick on this node (UTC epoch seconds); with racers = k "
            "only the jobs this node races.",
            labels=["job"],
        )
        interval = GaugeMetricFamily(
            "cronrace_schedule_interval_seconds",
            "The gap between the job's next two ticks (alerts: no success in 2 intervals).",
            labels=["job"],
        )
        scheduler = self.agent.scheduler
        ticks = scheduler.next_tick.copy() if scheduler is not None else {}
        for name, job in self.agent.jobs.items():
            tick_s = ticks.get(name)
            if tick_s is None:
                continue
            next_tick.add_metric([name], tick_s)
            interval.add_metric([name], job.schedule.interval_s(tick_s - 1))
        yield next_tick
        yield interval


# -- the HTTP endpoint ---------------------------------------------------------------------
