"""When the OTEL_* variables turn tracing on, and what the helpers do while it is off."""

import contextlib

import pytest

from orquestador import tracing

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        (ENDPOINT, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, False),  # no endpoint: off before any check
    ],
)
def test_tracing_wanted__follows_the_standard_variables(environ, wanted):
    assert tracing.tracing_wanted(environ) is wanted


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ],
)
def test_tracing_wanted__refuses_what_this_build_cannot_export_naming_it(environ, named):
    with pytest.raises(tracing.TracingConfigError, match=named):
        tracing.tracing_wanted(environ)


def test_setup__off_starts_nothing():
    assert tracing.setup(service="t", environ={}) is False
    assert not tracing.active()


def test_helpers__off_do_nothing():
    assert tracing.span("x") is tracing.span("y")  # one shared do-nothing context manager
    assert isinstance(tracing.span("x"), contextlib.nullcontext)
    assert tracing.carrier() is None
    assert tracing.log_fields() == {}
    with tracing.continued({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, "x") as s:
        assert s is None

    @tracing.traced("t")
    def double(value: int) -> int:
        return value * 2

    assert double(21) == 42


@pytest.mark.parametrize(
    ("stored", "trace_id"),
    [
        (
            {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        ({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, None),
        ({"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, None),
        ({"traceparent": "00-4bf92f35-00f067aa0ba902b7-01"}, None),
        ({"traceparent": 7}, None),
        ({}, None),
        (None, None),
    ],
)
def test_trace_id_of__reads_only_a_well_formed_traceparent(stored, trace_id):
    assert tracing.trace_id_of(stored) == trace_id
