"""The Prometheus text format writer: escaping, numbers, and output the reference parser reads."""

import math

from prometheus_client.parser import text_string_to_metric_families

from executions.metrics.views import queue_families
from orquestador.exposition import Family, Sample, number, render
from tests.support.prometheus import scrape


def test_number__writes_what_go_parses():
    assert [number(v) for v in (0, 7, True, 0.25, 1e-05, math.inf, -math.inf)] == [
        "0",
        "7",
        "1",
        "0.25",
        "1e-05",
        "+Inf",
        "-Inf",
    ]
    assert number(math.nan) == "NaN"


def test_render__escapes_label_values_and_help():
    text = render(
        [
            Family(
                "orquestador_test_total",
                "counter",
                "A help with a \\ and a\nnewline.",
                [Sample(1, (("status", 'say "hi"\\\n'),))],
            )
        ]
    )
    assert text == (
        "# HELP orquestador_test_total A help with a \\\\ and a\\nnewline.\n"
        "# TYPE orquestador_test_total counter\n"
        'orquestador_test_total{status="say \\"hi\\"\\\\\\n"} 1\n'
    )
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"status": 'say "hi"\\\n'}
    assert scrape(text).value("orquestador_test_total", status='say "hi"\\\n') == 1


def test_queue_families__without_the_database_say_so_and_list_no_queue_gauges():
    found = scrape(render(queue_families(None, seconds=0.01)))
    assert found.value("orquestador_database_up") == 0
    assert set(found.types) == {"orquestador_database_up", "orquestador_metrics_read_seconds"}
