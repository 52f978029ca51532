"""Prometheus metrics of the HTTP server (``/metrics``), in-process and proxy mode.

Every server owns its own ``CollectorRegistry``: two apps in one process (the
tests start several) never share counters. Names follow Prometheus
conventions (``_total`` counters, ``_seconds`` histograms); the ``source``
label of drafted/accepted is the draft source name (``lookup``, ``rules``,
``python``, ``ast``, ``motif``), tiers folded together.

``structspec status`` reads these names back (see ``snapshot``), so renaming a
metric here means changing ``snapshot`` too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

from structspec.engine.stats import GenerationStats

# ``*_created`` series double the page for no use here (process-wide setting).
disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Request latency buckets: completions take from tens of ms to minutes on CPU.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: One verification pass (or one relayed chunk): milliseconds, not seconds.
PASS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
#: The measures of ``structspec_model_cost`` (``completion.status.cost_measures``).
MODEL_COST_MEASURES = (
    "prompt_tokens_per_second",
    "decode_tokens_per_second",
    "window_tokens",
    "first_suggestion_seconds",
)
#: Window over which ``tokens_per_second`` is averaged.
RATE_WINDOW_S = 30.0


class Metrics:
    """The server's metrics in one registry. Thread-safe (prometheus_client is)."""

    def __init__(self, mode: str = "engine", model: str = "") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.info = Gauge(
            "structspec_info",
            "Server mode and model (value is always 1)",
            ["mode", "model"],
            registry=r,
        )
        self.info.labels(mode=mode, model=model).set(1)
        self.requests = Counter(
            "structspec_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "structspec_request_latency_seconds",
            "Time from request to last byte",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "structspec_time_to_first_token_seconds",
            "Time from request to the first generated text (streaming)",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "structspec_queue_wait_seconds",
            "Time a generation waited for the model",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("structspec_tokens", "Generated tokens", registry=r)
        self.prompt_tokens = Counter("structspec_prompt_tokens", "Prompt tokens", registry=r)
        self.reused_tokens = Counter(
            "structspec_reused_prompt_tokens", "Prompt tokens served from the KV cache", registry=r
        )
        self.passes = Counter("structspec_passes", "Verification passes of the model", registry=r)
        self.drafted = Counter(
            "structspec_drafted_tokens", "Draft tokens proposed, by source", ["source"], registry=r
        )
        self.accepted = Counter(
            "structspec_accepted_tokens",
            "Draft tokens accepted by the model, by source",
            ["source"],
            registry=r,
        )
        self.pass_latency = Histogram(
            "structspec_pass_latency_seconds",
            "Time of one verification pass",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.generations = Counter(
            "structspec_generations", "Finished generations by stop reason", ["reason"], registry=r
        )
        #: Set once the model's rates are known (``set_model_cost``): no sample before.
        self.model_cost = Gauge(
            "structspec_model_cost",
            "What the model costs on this machine: its measured rates and what they choose",
            ["measure"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "structspec_queue_depth", "Generations waiting for the model", registry=r
        )
        self.active = Gauge(
            "structspec_active_generations",
            "Generations running now (0 or 1 in-process)",
            registry=r,
        )
        self.rejected = Counter(
            "structspec_rejected", "Requests turned away, by reason", ["reason"], registry=r
        )
        self.tokens_per_second = Gauge(
            "structspec_tokens_per_second",
            f"Generated tokens per second over the last {RATE_WINDOW_S:.0f} s",
            registry=r,
        )
        self.tokens_per_second.set_function(self._rate)
        # Proxy mode.
        self.backend_errors = Counter(
            "structspec_backend_errors",
            "Backend requests that failed, by kind",
            ["kind"],
            registry=r,
        )
        self.chunks = Counter("structspec_proxy_chunks", "Streamed chunks relayed", registry=r)
        self.relay = Histogram(
            "structspec_proxy_relay_seconds",
            "Time from a chunk arriving from the backend to it being handed to the client",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self._events: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    # -- recording ---------------------------------------------------------
    def set_model_cost(self, cost: Mapping[str, float]) -> None:
        """What the model costs here, by measure (``MODEL_COST_MEASURES``)."""
        for measure, value in cost.items():
            self.model_cost.labels(measure=measure).set(value)

    def _note_tokens(self, n: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._events.append((now, n))
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._events and now - self._events[0][0] > RATE_WINDOW_S:
            self._events.popleft()

    def _rate(self) -> float:
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            if not self._events:
                return 0.0
            total = sum(n for _, n in self._events)
            span = max(now - self._events[0][0], 1.0)
        return total / span

    def observe_generation(self, stats: GenerationStats) -> None:
        """Count one finished generation (called from the engine thread)."""
        self.tokens.inc(stats.tokens)
        self._note_tokens(stats.tokens)
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.reused_tokens.inc(stats.reused_tokens)
        self.passes.inc(stats.passes)
        for name, s in stats.by_source().items():
            self.drafted.labels(source=name).inc(s.drafted)
            self.accepted.labels(source=name).inc(s.accepted)
        for trace in stats.trace:
            self.pass_latency.observe(trace.ms / 1000.0)
        self.generations.labels(reason=stats.stop_reason or "unknown").inc()

    def observe_proxy_tokens(self, n: int) -> None:
        """Tokens generated by a backend (from its ``usage``, or one per content chunk)."""
        self.tokens.inc(n)
        self._note_tokens(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# -- reading metrics back (structspec status) --------------------------------


@dataclass
class Snapshot:
    """A summary of one ``/metrics`` scrape, as shown by ``structspec status``."""

    mode: str
    model: str
    requests: dict[str, float]
    tokens: float
    prompt_tokens: float
    passes: float
    tokens_per_second: float
    queue_depth: float
    active: float
    drafted: dict[str, float]
    accepted: dict[str, float]
    rejected: dict[str, float]
    latency_p50_s: float | None
    latency_p95_s: float | None
    first_token_p50_s: float | None
    pass_p50_s: float | None
    relay_p50_s: float | None
    chunks: float
    #: ``structspec_model_cost`` by measure (empty: not known, or a proxy).
    model_cost: dict[str, float] = field(default_factory=dict)

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    def acceptance(self) -> dict[str, float]:
        return {k: (self.accepted.get(k, 0.0) / v if v else 0.0) for k, v in self.drafted.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "model": self.model,
            "requests": self.requests,
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "passes": self.passes,
            "tokens_per_pass": round(self.tokens_per_pass, 3),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "queue_depth": self.queue_depth,
            "active_generations": self.active,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": {k: round(v, 3) for k, v in self.acceptance().items()},
            "rejected": self.rejected,
            "latency_p50_s": _round(self.latency_p50_s),
            "latency_p95_s": _round(self.latency_p95_s),
            "time_to_first_token_p50_s": _round(self.first_token_p50_s),
            "pass_latency_p50_s": _round(self.pass_p50_s),
            "proxy_relay_p50_s": _round(self.relay_p50_s),
            "proxy_chunks": self.chunks,
            "model_cost": self.model_cost,
        }


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def _quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """Quantile from cumulative histogram buckets (upper bound of the bucket it falls in)."""
    if not buckets:
        return None
    ordered = sorted(buckets.items())
    total = ordered[-1][1]
    if total <= 0:
        return None
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= q * total:
            if bound == float("inf"):
                return prev_bound
            # Linear interpolation inside the bucket, as Prometheus' histogram_quantile does.
            width = count - prev_count
            frac = (q * total - prev_count) / width if width else 1.0
            return prev_bound + (bound - prev_bound) * frac
        prev_bound, prev_count = bound, count
    return prev_bound


def snapshot(text: str) -> Snapshot:
    """Parse a ``/metrics`` exposition (raises ``ValueError`` if it is not one)."""
    by_name: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        by_name.setdefault(family.name, []).extend(family.samples)

    def total(name: str, suffix: str = "_total") -> float:
        return sum(s.value for s in by_name.get(name, []) if s.name == name + suffix)

    def labelled(name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in by_name.get(name, []):
            if s.name == name + "_total":
                key = s.labels.get(label, "")
                out[key] = out.get(key, 0.0) + s.value
        return out

    def gauge(name: str) -> float:
        return sum(s.value for s in by_name.get(name, []) if s.name == name)

    def quantile(name: str, q: float) -> float | None:
        buckets: dict[float, float] = {}
        for s in by_name.get(name, []):
            if s.name == name + "_bucket" and "le" in s.labels:  # (a bucket without is none)
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
        return _quantile(buckets, q)

    if "structspec_info" not in by_name:
        raise ValueError("not a structspec /metrics page (no structspec_info)")
    info = next(iter(by_name["structspec_info"])).labels
    requests: dict[str, float] = {}
    for s in by_name.get("structspec_requests", []):
        if s.name == "structspec_requests_total":
            key = s.labels.get("status", "")
            requests[key] = requests.get(key, 0.0) + s.value
    return Snapshot(
        mode=info.get("mode", ""),
        model=info.get("model", ""),
        requests=requests,
        tokens=total("structspec_tokens"),
        prompt_tokens=total("structspec_prompt_tokens"),
        passes=total("structspec_passes"),
        tokens_per_second=gauge("structspec_tokens_per_second"),
        queue_depth=gauge("structspec_queue_depth"),
        active=gauge("structspec_active_generations"),
        drafted=labelled("structspec_drafted_tokens", "source"),
        accepted=labelled("structspec_accepted_tokens", "source"),
        rejected=labelled("structspec_rejected", "reason"),
        latency_p50_s=quantile("structspec_request_latency_seconds", 0.5),
        latency_p95_s=quantile("structspec_request_latency_seconds", 0.95),
        first_token_p50_s=quantile("structspec_time_to_first_token_seconds", 0.5),
        pass_p50_s=quantile("structspec_pass_latency_seconds", 0.5),
        relay_p50_s=quantile("structspec_proxy_relay_seconds", 0.5),
        chunks=total("structspec_proxy_chunks"),
        model_cost={
            s.labels.get("measure", ""): s.value
            for s in by_name.get("structspec_model_cost", [])
            if s.name == "structspec_model_cost"
        },
    )
