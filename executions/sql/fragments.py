"""Pieces of SQL that several statements share, each written once under a name that says what it
does. Statements name them as placeholders (`{holder}`, `{lease_cleared}`, ...) and are composed
when their modules are imported (`composed`; `fenced` composes first, then writes the fence), from
this static text only, never from values. The pieces are private: only whole statements are
public, each with its purpose, `Locks:` and `Index:` comment.
"""

# The holder's execution row, found by its fence and locked for the rest of the holder's
# transaction (so a resume or an operator write waits for it).
_HOLDER_ROW = """SELECT e.id
  FROM execution AS e
 WHERE {fence}
   FOR NO KEY UPDATE"""

# SET items, as the statements' comments name them.
_LEASE_CLEARED = """lease_owner = NULL,
       lease_expires_at = NULL"""
_ERROR_RECORDED = """error_code = %(error_code)s,
       error_detail = %(error_detail)s"""
_ERROR_CLEARED = """error_code = NULL,
       error_detail = NULL"""
# A checkpoint's outcome as its settler gives it: status, output and error.
_OUTCOME_GIVEN = (
    """status = %(status)s,
       output = %(output)s,
       """
    + _ERROR_RECORDED
)

FRAGMENTS = {
    "{holder_row}": _HOLDER_ROW,
    "{holder}": "holder AS (\n" + _HOLDER_ROW + "\n)",
    "{lease_cleared}": _LEASE_CLEARED,
    "{error_recorded}": _ERROR_RECORDED,
    "{error_cleared}": _ERROR_CLEARED,
    "{outcome_given}": _OUTCOME_GIVEN,
}


def composed(template: str) -> str:
    """`template` with its fragment placeholders replaced (at import time, from FRAGMENTS)."""
    for placeholder, fragment in FRAGMENTS.items():
        template = template.replace(placeholder, fragment)
    return template
