"""The permissions of the operators' actions, as `user.has_perm` names.

`CODENAMES` is what models.py declares (and the migrations create); each write's service checks
its own permission, and the admin actions and case-page buttons are offered by the same names.
"""

APP = "reconciliation"

# (codename, label) of every permission beyond "view", in the order the admin lists them.
CODENAMES = [
    ("fetch_provider_evidence", "Can ask the provider whether a write happened"),
    ("resolve_write_happened", "Can resolve a case: the write happened"),
    ("resolve_write_not_happened", "Can resolve a case: the write did not happen"),
    ("abandon_execution", "Can abandon an execution in reconciliation"),
    ("compensate_execution", "Can resolve a case: compensate its writes"),
]

FETCH_PROVIDER_EVIDENCE = f"{APP}.fetch_provider_evidence"
RESOLVE_WRITE_HAPPENED = f"{APP}.resolve_write_happened"
RESOLVE_WRITE_NOT_HAPPENED = f"{APP}.resolve_write_not_happened"
ABANDON_EXECUTION = f"{APP}.abandon_execution"
COMPENSATE_EXECUTION = f"{APP}.compensate_execution"
PAUSE_ROUTE = f"{APP}.pause_route"  # declared on WorkerProcess (the Workers page)
