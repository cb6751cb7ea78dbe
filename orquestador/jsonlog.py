"""One JSON object per log line, with the execution context the worker attaches, and the
`trace_id` and `span_id` of the current span when tracing is on (orquestador/tracing.py).

Formatting is on the worker's hot path at the default level (a few lines per execution), so the
encoder is built once and the timestamp's seconds are formatted once per second."""

import json
import logging
import time

from . import tracing

# Attributes every LogRecord has; anything else passed through `extra=` is event context.
_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
# One encoder for every line: json.dumps with arguments builds a new one at each call.
_encode = json.JSONEncoder(default=str, separators=(",", ":")).encode


class JsonFormatter(logging.Formatter):
    # A builtin, so never bound to the instance; mypy takes it for a method without arguments.
    converter = time.gmtime  # type: ignore[assignment]
    # (whole second, its text): replaced whole, so a thread never reads half of it.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": f"{self._seconds(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
            **tracing.log_fields(),  # the record's own trace_id (its execution's) comes after
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode(line)

    def _seconds(self, created: float) -> str:
        """`created` to the second, as UTC text; formatted once per second."""
        second = int(created)
        cached = self._second
        if cached[0] != second:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            cached = self._second = (second, text)
        return cached[1]


def lean_records() -> None:
    """Stop every LogRecord gathering what no line of this formatter carries: the caller's file,
    line and function (a walk up the stack per record), the thread's and the process's names and
    ids. The logging HOWTO's "Optimization" names these switches; the lines do not change."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
