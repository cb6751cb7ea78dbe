"""One JSON object per log line, with the execution context the worker attaches, and the
`trace_id` and `span_id` of the current span when tracing is on (orquestador/tracing.py).

Formatting is on the worker's hot path at the default level (a few lines per execution), so the
encoder is built once, the timestamp's seconds are formatted once per second and a record's
event context (its attributes past a LogRecord's own) is found by the names it has, once per
set of names; in the worker (`lean_records`) each record is also made lean: nothing gathered
that no line carries. The lines of every execution skip the record altogether (`info`), and
`LineHandler` writes a loop iteration's lines in one write (docs/adr/0023)."""

import asyncio
import functools
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

from . import tracing

# The event loop running in this thread, or None: asyncio's own C lookup, no exception raised.
_running_loop = asyncio.events._get_running_loop

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
        message = record.msg
        if record.args or type(message) is not str:
            message = record.getMessage()
        line = self._head(record.created, int(record.msecs), record.levelname, record.name, message)
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
        return _encoded(line)

    def line(self, created: float, levelname: str, name: str, message: str, extra: Any) -> str:
        """The line `format` makes of a record of these, `extra` its event context; no record."""
        milliseconds = int((created - int(created)) * 1000)  # as LogRecord.msecs
        line = self._head(created, milliseconds, levelname, name, message)
        line.update(extra)
        return _encoded(line)

    def _head(
        self, created: float, milliseconds: int, levelname: str, name: str, message: str
    ) -> dict[str, Any]:
        second = int(created)
        cached = self._second
        if cached[0] != second:  # the seconds' text, formatted once per second
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            cached = self._second = (second, text)
        line = {
            "ts": f"{cached[1]}.{milliseconds:03d}Z",
            "level": levelname,
            "logger": name,
            "event": message,
        }
        fields = tracing.log_fields()  # the record's own trace_id (its execution's) comes after
        if fields:
            line.update(fields)
        return line


def _encoded(line: dict[str, Any]) -> str:
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
    """A StreamHandler that writes whole lines, on an event loop's thread once per loop
    iteration: a line logged on a running loop is buffered, and the lines of the iteration are
    written in one write (then flushed) by a callback the first of them schedules, which runs
    in the loop's next iteration. A line logged off any loop is written at once, after the
    lines buffered before it, so lines keep the order they were logged in. `flush` (the
    logging module's shutdown at exit calls it, as `close` does) writes what is buffered; a
    process killed outright loses at most the lines of its last iteration.

    A write per line cost a system call each, a few lines per execution at INFO, and, with a
    thousand runs in flight on a busy machine, the process was preempted at each. On a handler
    without filters `handle` also skips the frames of `Handler.handle` around the emit (filter,
    acquire, emit, format, release)."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []  # whole lines, each with its terminator, in order
        self._flush_on: asyncio.AbstractEventLoop | None = None  # the loop a flush waits on

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
            self._put(line)
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            self.handleError(record)

    def line(self, line: str) -> None:
        """Write a line made without a record (`info`), as `emit` writes a record's."""
        with self.lock:  # type: ignore[union-attr]
            try:
                self._put(line)
            except Exception:  # as a failed emit, without a record to name
                self._failed()

    def _put(self, line: str) -> None:
        loop = _running_loop()
        if loop is None:
            self._write(line + self.terminator)
            return
        self._pending.append(line + self.terminator)
        if self._flush_on is not loop:
            if self._flush_on is not None:  # another loop's flush, still to run: now
                self._write("")
            self._flush_on = loop
            loop.call_soon(self._flush_soon)

    def _write(self, text: str) -> None:
        """Write the buffered lines, then `text`, in one write, and flush; under the lock."""
        pending = self._pending
        if pending:
            pending.append(text)
            text = "".join(pending)
            self._pending = []
        self._flush_on = None
        stream = self.stream
        if text:
            stream.write(text)
        if hasattr(stream, "flush"):
            stream.flush()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write("")

    def _flush_soon(self) -> None:
        """`flush`, as the loop's callback: a failure is said as a failed emit's, not raised
        into the loop (whose report of it would be one more line to flush)."""
        with self.lock:  # type: ignore[union-attr]
            try:
                self._write("")
            except Exception:
                self._failed()

    def _failed(self) -> None:
        self._pending = []
        self._flush_on = None
        if logging.raiseExceptions and sys.stderr:  # as Handler.handleError
            traceback.print_exc(file=sys.stderr)

    def close(self) -> None:
        self.flush()
        super().close()


def info(logger: logging.Logger, message: str, extra: Mapping[str, Any]) -> None:
    """`logger.info(message, extra=extra)` for the worker's lines of every execution, the same
    line without the record: when what the line goes through is one `LineHandler` with this
    formatter and no filter (the settings' logging), the line is made from `extra` directly and
    handed to the handler, skipping the record's making and the logging module's frames (about
    half of a line's cost). Anything else (a capturing test's handler, a filter, a formatter of
    its own) gets the record, through `logger.info`."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handler = _sole_line_handler(logger)
    if handler is None:
        logger.info(message, extra=extra)
        return
    formatter: JsonFormatter = handler.formatter  # type: ignore[assignment]  # checked as one
    handler.line(formatter.line(time.time(), "INFO", logger.name, message, extra))


def _sole_line_handler(logger: logging.Logger) -> "LineHandler | None":
    """The handler a line of `logger` at INFO goes to when it is one `LineHandler` with a
    `JsonFormatter` and no filter anywhere on its way; otherwise None."""
    if logger.filters:
        return None
    found = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None or type(handler) is not LineHandler:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    if (
        found is None
        or found.filters
        or found.level > logging.INFO
        or type(found.formatter) is not JsonFormatter
    ):
        return None
    return found


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
