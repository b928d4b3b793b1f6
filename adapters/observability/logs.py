"""Logging for the service's processes: text lines for a person, or one JSON object a line.

Only what the code passes as a log message is written: never request headers or bodies, so no
bearer token, API key or evidence text reaches a log unless a message names it (none does)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from adapters.observability import context
from adapters.observability.tracing import current_trace_id

# The loggers an operator reads at INFO: which process hosts which read model, and each request.
INFO_LOGGERS = ("adapters.store.projection_runtime", "uvicorn.error", "uvicorn.access")


class WithContext(logging.Filter):
    """Adds the process role and the request and run in progress to every record."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        record.request_id = context.request_id.get()
        record.scope = context.scope_id.get()
        record.run_id = context.run_id.get()
        record.trace_id = current_trace_id()
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line; fields that are unknown for a record are left out."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "role": getattr(record, "role", None),
            "pid": record.process,
            "logger": record.name,
            "request_id": getattr(record, "request_id", None),
            "trace_id": getattr(record, "trace_id", None),
            "scope": getattr(record, "scope", None),
            "run_id": getattr(record, "run_id", None),
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps({key: value for key, value in line.items() if value is not None},
                          ensure_ascii=False)


class TextLines(logging.Formatter):
    """``LEVEL: message``, with the request id when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request = getattr(record, "request_id", None)
        return f"{text} [request {request}]" if request else text


def configure_logging(role: str, log_format: str) -> None:
    """Send every log record of this process to stderr, formatted as ``log_format`` says."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(WithContext(role))
    handler.setFormatter(JsonLines() if log_format == "json"
                         else TextLines("%(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in INFO_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()  # uvicorn's own handlers would print each line twice
        logger.propagate = True
        logger.setLevel(logging.INFO)
    logging.getLogger("dream").setLevel(logging.INFO)
    record_only_what_lines_show()


def record_only_what_lines_show() -> None:
    """Log records skip what no line of this service shows: the calling file, line and
    function (a walk up the stack for every record) and the thread and process names, as the
    logging HOWTO's "Optimization" section describes. Every request's access line makes a
    record: 2-3.5 % of an idempotent replay's CPU was spent on these (performance notes)."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
