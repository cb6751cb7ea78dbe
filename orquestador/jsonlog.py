"""One JSON object per log line, with the execution context the worker attaches, and the
`trace_id` and `span_id` of the current span when tracing is on (orquestador/tracing.py)."""

import json
import logging
import time

from . import tracing

# Attributes every LogRecord has; anything else passed through `extra=` is event context.
_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    # A builtin, so never bound to the instance; mypy takes it for a method without arguments.
    converter = time.gmtime  # type: ignore[assignment]

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
            **tracing.log_fields(),  # the record's own trace_id (its execution's) comes after
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))
