"""One JSON object per log line, with the execution context the worker attaches, and the
`trace_id` and `span_id` of the current span when tracing is on (orquestador/tracing.py).

Formatting is on the worker's hot path at the default level (a few lines per execution), so the
encoder is built once, the timestamp's seconds are formatted once per second and a record's
event context (its attributes past a LogRecord's own) is found by the names it has, once per
set of names; in the worker (`lean_records`) each record is also made lean: nothing gathered
that no line carries."""

import functools
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from . import tracing

# Attributes every LogRecord has; anything else passed through `extra=` is event context.
_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
# What json.dumps(line, default=str, separators=(",", ":")) does, without its Python layers: one
# C encoder made once, without the markers of a circular check (a circular value recurses to a
# RecursionError, and is then encoded again by json.dumps's own layers, which fail it as before).
_c_encoder = json.encoder.c_make_encoder  # type: ignore[attr-defined]
_encode_fast = (
    None
    if _c_encoder is None  # an interpreter without the C accelerator
    else _c_encoder(
        None, str, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )
)
_encode_slow = json.JSONEncoder(default=str, separators=(",", ":")).encode

# Which attributes of a record are event context, by the names the record has (a log call site
# passes the same extras each time, so its records have the same names in the same order).
# Bounded; cleared whole when full.
_EXTRAS_CACHE_SIZE = 1024
_extras_kept: dict[tuple[str, ...], tuple[str, ...]] = {}


def _kept(names: tuple[str, ...]) -> tuple[str, ...]:
    kept = tuple(n for n in names if n not in _STANDARD and not n.startswith("_"))
    if len(_extras_kept) >= _EXTRAS_CACHE_SIZE:
        _extras_kept.clear()
    _extras_kept[names] = kept
    return kept


class JsonFormatter(logging.Formatter):
    # A builtin, so never bound to the instance; mypy takes it for a method without arguments.
    converter = time.gmtime  # type: ignore[assignment]
    # (whole second, its text): replaced whole, so a thread never reads half of it.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        # Lines are made on the worker's hot path: the steps are inline, not calls.
        second = int(record.created)
        cached = self._second
        if cached[0] != second:  # the seconds' text, formatted once per second
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            cached = self._second = (second, text)
        message = record.msg
        if record.args or type(message) is not str:
            message = record.getMessage()
        line = {
            "ts": f"{cached[1]}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "event": message,
        }
        fields = tracing.log_fields()  # the record's own trace_id (its execution's) comes after
        if fields:
            line.update(fields)
        # Every record alike, lean or not: the attributes that are not a LogRecord's own.
        attributes = record.__dict__
        names = tuple(attributes)
        kept = _extras_kept.get(names)
        if kept is None:
            kept = _kept(names)
        for name in kept:
            line[name] = attributes[name]
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if _encode_fast is None:
            return _encode_slow(line)
        try:
            return "".join(_encode_fast(line, 0))
        except RecursionError:  # a circular value (or a deep stack): as json.dumps has it
            return _encode_slow(line)


@functools.lru_cache(maxsize=256)
def _file_parts(pathname: str) -> tuple[str, str]:
    """(filename, module) of a record's path, as LogRecord computes them."""
    try:
        filename = os.path.basename(pathname)
        return filename, os.path.splitext(filename)[0]
    except (TypeError, ValueError, AttributeError):
        return pathname, "Unknown module"


class _LeanRecord(logging.LogRecord):
    """A LogRecord as `logging.LogRecord` makes one with `lean_records`' switches off: the same
    attributes in the same order and with the same values, the file name and module looked up
    once per path, no thread, process or process name asked for (None, as the switches leave
    them). The lines do not change (tests/unit/test_jsonlog.py compares both kinds)."""

    def __init__(
        self,
        name: str,
        level: int,
        pathname: str,
        lineno: int,
        msg: object,
        args: Any,
        exc_info: Any,
        func: str | None = None,
        sinfo: str | None = None,
        **kwargs: object,
    ) -> None:
        ct = time.time()
        self.name = name
        self.msg = msg
        if args and len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
            args = args[0]
        self.args = args
        self.levelname = logging.getLevelName(level)
        self.levelno = level
        self.pathname = pathname
        self.filename, self.module = _file_parts(pathname)
        self.exc_info = exc_info
        self.exc_text = None
        self.stack_info = sinfo
        self.lineno = lineno
        self.funcName = func  # type: ignore[assignment]  # None, as LogRecord leaves it
        self.created = ct
        self.msecs = int((ct - int(ct)) * 1000) + 0.0
        self.relativeCreated = (ct - logging._startTime) * 1000  # type: ignore[attr-defined]
        self.thread = None
        self.threadName = None
        self.processName = None
        self.process = None


class LineHandler(logging.StreamHandler):
    """A StreamHandler that writes and flushes each line in one write, under its lock: the same
    line and the same single write, without `flush` taking that lock once more, and, on a
    handler without filters, without the frames of `Handler.handle` around it (filter, acquire,
    emit, format, release: a few lines per execution at INFO)."""

    def handle(self, record: logging.LogRecord) -> Any:
        if self.filters:
            return super().handle(record)
        with self.lock:  # type: ignore[union-attr]  # made by createLock, never None
            self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            formatter = self.formatter
            line = formatter.format(record) if formatter is not None else self.format(record)
            stream = self.stream
            stream.write(line + self.terminator)
            stream.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            self.handleError(record)


def lean_records() -> None:
    """Stop every LogRecord gathering what no line of this formatter carries: the caller's file,
    line and function (a walk up the stack per record), the thread's and the process's names and
    ids. The logging HOWTO's "Optimization" names these switches; the lines do not change. The
    records are then made by `_LeanRecord`, which asks for none of it."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.setLogRecordFactory(_LeanRecord)
