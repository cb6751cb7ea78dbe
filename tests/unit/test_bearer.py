"""The one token rule and the one bearer comparison (orquestador/bearer.py)."""

import pytest

from orquestador.bearer import MIN_TOKEN_LENGTH, bearer_matches, token_problem

TOKEN = "t" * MIN_TOKEN_LENGTH


@pytest.mark.parametrize(
    ("token", "acceptable"),
    [
        ("t" * 32, True),
        ("t" * 31, False),
        ("t" * 20 + " " + "t" * 20, False),
        ("t" * 40 + "\n", False),
    ],
    ids=["32", "31", "space", "newline"],
)
def test_token_problem__names_the_variable(token, acceptable):
    problem = token_problem("METRICS_TOKEN", token)
    assert (problem is None) == acceptable
    if problem:
        assert problem.startswith("METRICS_TOKEN must be at least 32 characters")


@pytest.mark.parametrize(
    ("authorization", "token", "admitted"),
    [
        (f"Bearer {TOKEN}", TOKEN, True),
        (f"bearer   {TOKEN} ", TOKEN, True),
        (f"Bearer {TOKEN[:-1]}x", TOKEN, False),
        (f"Basic {TOKEN}", TOKEN, False),
        (TOKEN, TOKEN, False),
        (None, TOKEN, False),
        ("Bearer ", "", False),
        (None, "", False),
    ],
    ids=[
        "exact",
        "case-and-spaces",
        "one-off",
        "other-scheme",
        "no-scheme",
        "none",
        "empty",
        "unset",
    ],
)
def test_bearer_matches(authorization, token, admitted):
    assert bearer_matches(authorization, token) is admitted
