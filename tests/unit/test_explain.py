"""What a case says about itself, as pure functions: lookup statuses, the case summary,
the suggestion the evidence supports, and the risk of choosing against it or without it."""

from types import SimpleNamespace

import pytest

from reconciliation import explain


@pytest.mark.parametrize(
    ("lookup", "status"),
    [
        (None, "not asked"),
        ({"happened": True}, "happened"),
        ({"happened": False}, "not found"),
        ({"happened": None}, "error"),
    ],
)
def test_lookup_status(lookup, status):
    assert explain.lookup_status(lookup) == status


def test_summary_fields__read_the_data_at_each_pointer():
    definition = {"caseSummary": ["/customer/name", "/amount", "/missing", "/note"]}
    data = {"customer": {"name": "Ada"}, "amount": 12.5, "note": "x" * 200}
    fields = [(label, str(value)) for label, value in explain.summary_fields(definition, data)]
    assert fields[:3] == [("customer / name", "Ada"), ("amount", "12.5"), ("missing", "—")]
    assert len(fields[3][1]) == explain.SUMMARY_VALUE_CHARS and fields[3][1].endswith("…")
    assert explain.summary_fields({}, data) == []


# suggest() asks whether there is an uncertain action, and at which attempt it is.
UNCERTAIN = [SimpleNamespace(attempt=1)]


@pytest.mark.parametrize(
    ("lookup", "can_lookup", "resolution", "ask"),
    [
        ({"happened": True, "outputValid": True}, True, explain.WRITE_HAPPENED, False),
        ({"happened": True, "outputValid": False}, True, None, False),
        ({"happened": False}, True, explain.WRITE_NOT_HAPPENED, False),
        ({"happened": None, "detail": "503"}, True, None, True),
        (None, True, None, True),
        (None, False, None, False),
    ],
)
def test_suggest__follows_the_evidence_and_preselects_nothing_when_inconclusive(
    lookup, can_lookup, resolution, ask
):
    suggestion = explain.suggest(uncertain=UNCERTAIN, lookup=lookup, can_lookup=can_lookup)
    assert (suggestion.resolution, suggestion.ask_provider) == (resolution, ask)
    assert suggestion.headline and suggestion.consequence


def test_suggest__a_later_attempt_not_asked_about__asks_about_it():
    later = [SimpleNamespace(attempt=2)]
    suggestion = explain.suggest(uncertain=later, lookup=None, can_lookup=True)
    assert (suggestion.resolution, suggestion.ask_provider) == (None, True)
    assert suggestion.headline == "Ask the provider about attempt 2, or check with it directly."
    assert "has not been asked about attempt 2" in suggestion.consequence


def test_suggest__with_nothing_uncertain__abandon():
    suggestion = explain.suggest(uncertain=[], lookup=None, can_lookup=False)
    assert suggestion.resolution == explain.ABANDON


@pytest.mark.parametrize(
    ("resolution", "lookup", "risky"),
    [
        (explain.WRITE_NOT_HAPPENED, {"happened": True}, True),
        (explain.WRITE_HAPPENED, {"happened": False}, True),
        (explain.WRITE_NOT_HAPPENED, {"happened": False}, False),
        (explain.WRITE_HAPPENED, {"happened": True}, False),
        (explain.WRITE_NOT_HAPPENED, None, True),  # not asked about this attempt
        (explain.WRITE_NOT_HAPPENED, {"happened": None}, True),  # an answer that settled nothing
        (explain.WRITE_HAPPENED, None, False),
        (explain.WRITE_HAPPENED, {"happened": None}, False),
        (explain.ABANDON, {"happened": True}, False),
        (explain.ABANDON, None, False),
    ],
)
def test_risk__where_the_provider_s_answer_does_not_support_the_choice(resolution, lookup, risky):
    assert (explain.risk(resolution, lookup) is not None) == risky
