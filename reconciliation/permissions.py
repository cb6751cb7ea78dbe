"""The permissions of the operators' actions, as `user.has_perm` names (see models.py)."""

FETCH_PROVIDER_EVIDENCE = "reconciliation.fetch_provider_evidence"
RESOLVE_WRITE_HAPPENED = "reconciliation.resolve_write_happened"
RESOLVE_WRITE_NOT_HAPPENED = "reconciliation.resolve_write_not_happened"
ABANDON_EXECUTION = "reconciliation.abandon_execution"
