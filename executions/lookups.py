"""`one_of`: a column tested against a list of values as one array constant.

`Q(status__one_of=["PENDING", "RUNNING"])` is `status::text = ANY ('{PENDING,RUNNING}'::text[])`:
the same test as `status__in`, which PostgreSQL stores as an array of separate constants. It is
written for CHECK constraints, whose stored expressions PostgreSQL parses again in every
statement that writes the table: a vocabulary as one constant is a third of the text to parse
(docs/adr/0024-check-constraints-parsed-per-statement.md). The values are identifiers of a
vocabulary, so anything an array literal would have to quote (or would read as NULL) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db.models import CharField, Lookup

if TYPE_CHECKING:  # the stubs' names; _AsSqlType exists only there
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType

# What an element of an unquoted array literal may hold here (no separators, braces or quotes).
_PLAIN = re.compile(r"[A-Za-z0-9_.:-]+")


@CharField.register_lookup
class OneOf(Lookup):
    lookup_name = "one_of"
    prepare_rhs = False

    def get_prep_lookup(self) -> str:
        listed = isinstance(self.rhs, Iterable) and not isinstance(self.rhs, str)
        values = [str(value) for value in self.rhs] if listed else []
        # Unquoted, NULL in any case is a null element, not the word.
        if not values or any(not _PLAIN.fullmatch(v) or v.upper() == "NULL" for v in values):
            raise ValueError(f"one_of takes a non-empty list of plain words, not {self.rhs!r}")
        return "{" + ",".join(values) + "}"

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs}::text = ANY ({rhs}::text[])", (*lhs_params, *rhs_params)
