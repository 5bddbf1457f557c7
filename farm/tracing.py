"""OpenTelemetry traces of rollouts: a trace per job, spans for its stages, each LLM call and each tool call.

Off unless configured: tracing starts when the OpenTelemetry SDK and OTLP/HTTP exporter are installed (the
`otel` extra) and either an OTLP endpoint is set the standard way (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the exporter reads the other OTEL_EXPORTER_OTLP_* variables too) or
FARM_OTEL=1 (the exporter's default endpoint, http://localhost:4318). OTEL_SDK_DISABLED=true, or FARM_OTEL=0,
keeps it off. Off, every function here is a cheap no-op.

The stages of one job run in different worker processes, so the trace's context travels in the job record:
the API opens the job's root span (`rollout`) when it records the job and stores its W3C `traceparent` in
the job spec and its trace id in the job's metadata (so it is on the result and every trace, and the
viewer shows it); each stage's span (`stage init|run|eval`) is a child of that context, and the LLM and
tool calls a stage makes are children of the stage's span.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

TRACER_NAME = "rollout-farm"
TRACE_ID = "trace_id"
"""The metadata key of a job's trace id (32 hex digits), copied onto its result and traces."""
TRACEPARENT = "traceparent"
"""The gateway session metadata key of the span its model calls are children of (a harness's run stage)."""

_lock = threading.Lock()
_state: dict[str, Any] = {}


class Recorder(Protocol):
    def __call__(self, **attributes: Any) -> None: ...


def _truthy(value: str | None) -> bool | None:
    if value is None or not value.strip():
        return None
    return value.strip().lower() in {"1", "true", "yes", "on"}


def configured() -> bool:
    """Tracing was asked for (by the standard OTEL_* variables or FARM_OTEL) and not disabled."""
    if _truthy(os.environ.get("OTEL_SDK_DISABLED")):
        return False
    farm = _truthy(os.environ.get("FARM_OTEL"))
    if farm is not None:
        return farm
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def _tracer() -> Any | None:
    """The farm's tracer once this process set tracing up; None when tracing is off (or cannot start)."""
    if "tracer" in _state:
        return _state["tracer"]
    with _lock:
        if "tracer" not in _state:
            _state["tracer"] = _setup() if configured() else None
    return _state["tracer"]


def _setup() -> Any | None:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "tracing is configured but the OpenTelemetry SDK is missing (pip install 'rollout-farm[otel]')"
        )
        return None
    service = os.environ.get("OTEL_SERVICE_NAME") or "rollout-farm"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    delay_ms = int(os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "1000"))  # the SDK's default is 5 s
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=delay_ms))
    _state["provider"] = provider
    return provider.get_tracer(TRACER_NAME)


def flush(timeout_ms: int = 5000) -> None:
    """Export what this process has buffered (a process about to exit, or a test)."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush(timeout_ms)


def start_rollout(job_id: str, attributes: dict[str, Any]) -> tuple[Any, str, str] | None:
    """Opens job `job_id`'s root span; returns (span, traceparent, trace id), or None when tracing is off.
    End the span with `end_rollout` once the job is recorded (a job id that already existed: drop it)."""
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    span = tracer.start_span("rollout", attributes={"farm.job_id": job_id, **_clean(attributes)})
    carrier: dict[str, str] = {}
    from opentelemetry import trace

    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return span, carrier["traceparent"], format(span.get_span_context().trace_id, "032x")


def end_rollout(opened: tuple[Any, str, str] | None) -> None:
    if opened is not None:
        opened[0].end()


@contextlib.contextmanager
def stage_span(traceparent: str | None, stage: str, attributes: dict[str, Any]) -> Iterator[None]:
    """The span of one stage of a job, child of the job's root span (from its stored traceparent), current
    while the stage runs so its LLM and tool calls nest under it. A stage that raises marks it an error."""
    tracer = _tracer()
    if tracer is None or not traceparent:
        yield
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    with tracer.start_as_current_span(f"stage {stage}", context=parent, attributes=_clean(attributes)):
        yield


@contextlib.contextmanager
def call_span(name: str, attributes: dict[str, Any]) -> Iterator[Recorder]:
    """A span for one LLM or tool call under the current stage's span (nothing outside a traced stage);
    yields a function that adds attributes once the outcome is known."""
    tracer = _tracer()
    if tracer is None:
        yield _ignore
        return
    from opentelemetry import trace

    if not trace.get_current_span().get_span_context().is_valid:
        yield _ignore
        return
    with tracer.start_as_current_span(name, attributes=_clean(attributes)) as span:

        def record(**more: Any) -> None:
            span.set_attributes(_clean(more))

        yield record


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (a traced stage's), for work this process hands to another
    (the gateway's model calls of a harness); None when tracing is off or no span is current."""
    if _tracer() is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def finished_span(
    traceparent: str,
    name: str,
    start_s: float,
    end_s: float,
    attributes: dict[str, Any],
    error: str | None = None,
) -> None:
    """A span timed by its caller (`start_s`/`end_s`: epoch seconds), child of `traceparent`, opened and ended
    at once: the gateway records a model call once it is answered, so the call pays nothing while it runs.
    `error` marks it failed with that description. Nothing when tracing is off."""
    tracer = _tracer()
    if tracer is None:
        return
    from opentelemetry.trace import Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    span = tracer.start_span(name, context=parent, attributes=_clean(attributes), start_time=_ns(start_s))
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=_ns(max(end_s, start_s)))


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def _ignore(**_: Any) -> None:
    return None


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: str, bool, int, float (None dropped, others as text)."""
    return {
        k: v if isinstance(v, str | bool | int | float) else str(v)
        for k, v in attributes.items()
        if v is not None
    }
