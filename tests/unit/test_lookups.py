"""`one_of` (executions/lookups.py): a vocabulary as one array constant."""

import pytest
from django.db.models import CheckConstraint, Q

from executions.models import Execution


def _sql(condition: Q) -> str:
    query = Execution.objects.filter(condition).query
    sql, params = query.sql_with_params()
    return sql % tuple(repr(p) for p in params)


def test_one_of__is_one_array_constant():
    sql = _sql(Q(status__one_of=["PENDING", "RUNNING"]))
    assert "::text = ANY ('{PENDING,RUNNING}'::text[])" in sql


@pytest.mark.parametrize("values", [[], ["A,B"], ["{A}"], ['A"'], ["A B"], ["null"], "PENDING"])
def test_one_of__refuses_what_an_array_literal_would_quote(values: object):
    with pytest.raises(ValueError, match="one_of"):
        _sql(Q(status__one_of=values))


def test_one_of__is_what_the_status_check_is_made_of():
    (check,) = [
        c
        for c in Execution._meta.constraints
        if isinstance(c, CheckConstraint) and c.name == "execution_status_valid"
    ]
    assert "status__one_of" in str(check.condition)
