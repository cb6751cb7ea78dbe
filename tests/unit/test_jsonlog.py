"""One JSON object per log line (orquestador/jsonlog.py)."""

import asyncio
import io
import json
import logging
import sys
import threading
import uuid

import pytest

from orquestador import jsonlog

EXECUTION = uuid.UUID("8d3f6a52-5a1e-4c3b-9a57-0f0c2b1d9e11")


def _record(message: str = "action started", *, created: float, **extra: object):
    record = logging.getLogger("executions.worker").makeRecord(
        "executions.worker", logging.INFO, __file__, 1, message, (), None, extra=extra
    )
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    return record


@pytest.fixture
def restored_logging():
    saved = (
        logging._srcfile,
        logging.logThreads,
        logging.logProcesses,
        logging.logMultiprocessing,
    )
    factory = logging.getLogRecordFactory()
    yield
    (
        logging._srcfile,
        logging.logThreads,
        logging.logProcesses,
        logging.logMultiprocessing,
    ) = saved
    logging.setLogRecordFactory(factory)


def test_format__one_object_fields_in_order_extras_after():
    formatter = jsonlog.JsonFormatter()
    record = _record(created=1_796_174_453.0789, execution_id=EXECUTION, attempt=2)

    line = formatter.format(record)

    assert line == (
        '{"ts":"2026-12-02T01:20:53.078Z","level":"INFO","logger":"executions.worker",'
        f'"event":"action started","execution_id":"{EXECUTION}","attempt":2}}'
    )


def test_format__timestamp_follows_each_second_and_millisecond():
    formatter = jsonlog.JsonFormatter()
    stamps = [
        json.loads(formatter.format(_record(created=at)))["ts"]
        for at in (1_796_174_453.999, 1_796_174_454.0, 1_796_174_454.5, 1_796_174_453.25)
    ]

    assert stamps == [
        "2026-12-02T01:20:53.999Z",
        "2026-12-02T01:20:54.000Z",
        "2026-12-02T01:20:54.500Z",
        "2026-12-02T01:20:53.250Z",
    ]


def test_format__exception_and_unserialisable_values_still_one_line():
    formatter = jsonlog.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = _record(created=1_796_174_453.0, where=object)
    record.exc_info = exc_info

    line = formatter.format(record)

    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["where"] == str(object)
    assert "ValueError: boom" in parsed["exc"]


def test_lean_records__lines_unchanged(restored_logging):
    formatter = jsonlog.JsonFormatter()
    before = formatter.format(_record(created=1_796_174_453.5, token=1))

    jsonlog.lean_records()
    after = formatter.format(_record(created=1_796_174_453.5, token=1))

    assert after == before
    lean = _record(created=1_796_174_453.5)
    assert (lean.thread, lean.process, lean.processName) == (None, None, None)


@pytest.mark.parametrize(
    "args",
    [(), ("a", 1), ({"k": "v"},), ({},)],
    ids=["no args", "positional", "a mapping", "an empty mapping"],
)
def test_lean_records__a_lean_record_holds_what_a_log_record_holds(restored_logging, args):
    jsonlog.lean_records()
    made = ("executions.worker", logging.INFO, __file__, 7, "m %s", args, None, "f", None)

    lean = logging.getLogRecordFactory()(*made)
    standard = logging.LogRecord(*made)

    assert type(lean) is not logging.LogRecord and isinstance(lean, logging.LogRecord)
    timing = {"created", "msecs", "relativeCreated"}
    assert list(vars(lean)) == list(vars(standard))
    assert {k: v for k, v in vars(lean).items() if k not in timing} == {
        k: v for k, v in vars(standard).items() if k not in timing
    }


def test_lean_records__extras_and_a_set_message_read_as_before(restored_logging):
    formatter = jsonlog.JsonFormatter()
    before = formatter.format(_record(created=1_796_174_453.5, token=1, execution_id=EXECUTION))

    jsonlog.lean_records()
    lean = _record(created=1_796_174_453.5, token=1, execution_id=EXECUTION)
    lean.message = "set by another formatter"  # comes after the extras, and is never a field

    assert formatter.format(lean) == before
    assert json.loads(before)["token"] == 1


def test_line_handler__one_write_per_line_and_a_failure_handled():
    class Recording(io.StringIO):
        writes: list[str] = []

        def write(self, text):
            written = super().write(text)
            self.writes.append(text)
            return written

    stream = Recording()
    handler = jsonlog.LineHandler(stream)
    handler.setFormatter(jsonlog.JsonFormatter())
    handled = []
    handler.handleError = handled.append

    handler.handle(_record(created=1_796_174_453.5, token=1))
    handler.handle(_record("action succeeded", created=1_796_174_453.6, token=2))
    stream.close()  # a closed stream: the write fails, and is handled as StreamHandler does
    failing = _record(created=1_796_174_453.7)
    handler.handle(failing)

    assert [json.loads(w)["token"] for w in stream.writes] == [1, 2]
    assert all(w.endswith("}\n") for w in stream.writes)
    assert handled == [failing]


def test_format__a_circular_value_fails_as_json_dumps_does():
    formatter = jsonlog.JsonFormatter()
    loop: dict = {}
    loop["self"] = loop

    with pytest.raises(ValueError, match="Circular reference"):
        formatter.format(_record(created=1_796_174_453.0, where=loop))
    # The encoder is not left half-way: the next line is whole.
    assert json.loads(formatter.format(_record(created=1_796_174_453.0, token=3)))["token"] == 3


def test_format__records_of_other_names_each_keep_their_own_extras():
    formatter = jsonlog.JsonFormatter()
    first = json.loads(formatter.format(_record(created=1_796_174_453.0, token=1, attempt=2)))
    second = json.loads(formatter.format(_record(created=1_796_174_453.0, attempt=3)))
    made = logging.makeLogRecord({"msg": "m", "created": 1_796_174_453.0, "msecs": 0.0, "k": 1})

    assert (first["token"], first["attempt"]) == (1, 2)
    assert "token" not in second and second["attempt"] == 3
    assert json.loads(formatter.format(made))["k"] == 1


def test_line_handler__a_filter_still_decides():
    stream = io.StringIO()
    handler = jsonlog.LineHandler(stream)
    handler.setFormatter(jsonlog.JsonFormatter())
    handler.addFilter(lambda record: getattr(record, "token", None) != 2)

    for token in (1, 2, 3):
        handler.handle(_record(created=1_796_174_453.5, token=token))

    assert [json.loads(line)["token"] for line in stream.getvalue().splitlines()] == [1, 3]


class _Writes(io.StringIO):
    """A stream that keeps each write as it came."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


def _line_handler() -> tuple[jsonlog.LineHandler, _Writes]:
    stream = _Writes()
    handler = jsonlog.LineHandler(stream)
    handler.setFormatter(jsonlog.JsonFormatter())
    return handler, stream


def test_line_handler__lines_on_a_loop_written_whole_in_order_once_per_iteration():
    handler, stream = _line_handler()
    seen: list[list[str]] = []

    async def logs() -> None:
        for token in (1, 2, 3):
            handler.handle(_record(created=1_796_174_453.5, token=token))
        seen.append(list(stream.writes))  # nothing written within the iteration
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the iteration after: its flush has run
        seen.append(list(stream.writes))
        handler.handle(_record(created=1_796_174_453.6, token=4))

    asyncio.run(logs())

    assert seen[0] == []
    assert len(seen[1]) == 1  # the iteration's lines in one write
    assert [json.loads(line)["token"] for line in seen[1][0].splitlines()] == [1, 2, 3]
    assert seen[1][0].endswith("}\n")
    # The last line, logged as the loop ended, was flushed by a later iteration of its teardown.
    assert [json.loads(line)["token"] for line in stream.getvalue().splitlines()] == [1, 2, 3, 4]


def test_line_handler__a_line_off_the_loop_comes_after_those_buffered_and_flush_writes_them():
    handler, stream = _line_handler()
    done = threading.Event()

    async def logs() -> None:
        handler.handle(_record(created=1_796_174_453.5, token=1))
        # Another thread's line, while the loop's is still buffered.
        thread = threading.Thread(
            target=lambda: (handler.handle(_record(created=1_796_174_453.6, token=2)), done.set())
        )
        thread.start()
        thread.join()
        handler.handle(_record(created=1_796_174_453.7, token=3))
        handler.flush()  # as the logging module's shutdown does: what is buffered, now
        assert [json.loads(x)["token"] for x in stream.getvalue().splitlines()] == [1, 2, 3]

    asyncio.run(logs())

    assert done.is_set()
    assert [len(w.splitlines()) for w in stream.writes] == [2, 1]


@pytest.fixture
def one_line_handler():
    """A logger whose lines go to one LineHandler and nowhere else, as the settings have the
    worker's (pytest's own capture sits on the root logger, so this one does not propagate)."""
    logger = logging.getLogger("executions.worker.jsonlog-test")
    handler, stream = _line_handler()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler, stream
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def test_info__the_line_a_record_makes_without_the_record(one_line_handler, monkeypatch):
    logger, handler, stream = one_line_handler
    monkeypatch.setattr(logger, "handlers", [handler])  # the tests' capture handlers off it
    monkeypatch.setattr(jsonlog.time, "time", lambda: 1_796_174_453.0789)
    extra = {"execution_id": str(EXECUTION), "token": 1, "attempt": 2}
    made = []
    monkeypatch.setattr(logger, "makeRecord", lambda *a, **k: made.append(a))

    jsonlog.info(logger, "action started", extra)

    assert made == []  # no record
    assert stream.getvalue() == (
        '{"ts":"2026-12-02T01:20:53.078Z","level":"INFO",'
        '"logger":"executions.worker.jsonlog-test","event":"action started",'
        f'"execution_id":"{EXECUTION}","token":1,"attempt":2}}\n'
    )
    # The line a record of the same makes.
    record = _record("action started", created=1_796_174_453.0789, **extra)
    record.name = logger.name
    assert stream.getvalue() == jsonlog.JsonFormatter().format(record) + "\n"


def test_info__another_handler_gets_the_record_and_the_line_is_unchanged(one_line_handler):
    logger, _, stream = one_line_handler
    captured: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = captured.append  # type: ignore[method-assign]
    logger.addHandler(capture)
    try:
        jsonlog.info(logger, "action succeeded", {"execution_id": str(EXECUTION), "token": 1})
    finally:
        logger.removeHandler(capture)
    logger.setLevel(logging.WARNING)
    try:
        jsonlog.info(logger, "execution claimed", {"token": 2})  # a level off: no line
    finally:
        logger.setLevel(logging.NOTSET)

    assert [(r.getMessage(), r.token) for r in captured] == [("action succeeded", 1)]
    line = json.loads(stream.getvalue())
    assert (line["event"], line["token"], line["execution_id"]) == (
        "action succeeded",
        1,
        str(EXECUTION),
    )
