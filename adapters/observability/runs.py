"""Dream runs and model calls as metrics: the executor's reports, and a timed generator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from adapters.observability.metrics import (
    MODEL_CALLS,
    MODEL_SECONDS,
    MODEL_TOKENS,
    RUN_ATTEMPTS,
    RUN_PHASE_SECONDS,
    timed,
)
from adapters.observability.tracing import span
from application.generation import (
    GenerationFailedError,
    GenerationInput,
    GenerationOutputError,
    GenerationResult,
    Generator,
    TransientGenerationError,
)

QUEUE_WAIT = "queue_wait"


@contextmanager
def _both(first: AbstractContextManager[Any], second: AbstractContextManager[Any]
          ) -> Iterator[None]:
    with first, second:
        yield


class Traced:
    """The executor's :class:`~application.ports.ExecutionObserver` with metrics off: each
    phase a span (when tracing is on), nothing counted."""

    def phase(self, name: str, operation: str, trigger: str) -> AbstractContextManager[None]:
        return span(f"dream.{name}", {"dream.operation": operation})

    def waited(self, seconds: float, operation: str, trigger: str) -> None:
        pass

    def ended(self, operation: str, trigger: str, status: str, outcome: str) -> None:
        pass


class RunMetrics(Traced):
    """The executor's observer with metrics on: each phase also timed, each end counted."""

    def phase(self, name: str, operation: str, trigger: str) -> AbstractContextManager[None]:
        return _both(timed(RUN_PHASE_SECONDS, name, operation, trigger),
                     super().phase(name, operation, trigger))

    def waited(self, seconds: float, operation: str, trigger: str) -> None:
        RUN_PHASE_SECONDS.labels(QUEUE_WAIT, operation, trigger).observe(max(0.0, seconds))

    def ended(self, operation: str, trigger: str, status: str, outcome: str) -> None:
        RUN_ATTEMPTS.labels(operation, trigger, status, outcome).inc()


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, TransientGenerationError):
        return "transient_error"
    if isinstance(error, GenerationOutputError):
        return "invalid_output"
    if isinstance(error, GenerationFailedError):
        return "failed"
    return "error"


class TimedGenerator:
    """A generator whose every call is counted by outcome, timed, and its tokens added up.
    Labelled by the generator's kind (``DREAM_GENERATOR``: offline, openai), never by model
    or run."""

    def __init__(self, generator: Generator, kind: str) -> None:
        self.generator = generator
        self.kind = kind

    @property
    def config_id(self) -> str:
        return self.generator.config_id

    def generate(self, request: GenerationInput) -> GenerationResult:
        started, failure = time.perf_counter(), None
        try:
            result = self.generator.generate(request)
        except BaseException as error:
            failure = error
            raise
        finally:
            MODEL_SECONDS.labels(self.kind).observe(time.perf_counter() - started)
            MODEL_CALLS.labels(self.kind, _outcome(failure)).inc()
        for direction, tokens in (("input", result.usage.input_tokens),
                                  ("output", result.usage.output_tokens)):
            if tokens:
                MODEL_TOKENS.labels(self.kind, direction).inc(tokens)
        return result
