"""The fence every holder's statement carries, and the worker connections' session settings.

The fence is written once and composed into the statements that run as a holder after a claim,
when their modules are imported (`fenced`): the execution by id and request, the exact fencing
token, status RUNNING, the lease owner, and a lease that has not expired by database time. A
holder that matches no row gets `ExecutionSuperseded` from its caller; nothing is ever a silent
no-op. Why it is written with `IS NOT DISTINCT FROM`: docs/adr/0002, "How the statement does it".
"""

from .fragments import composed

# `IS NOT DISTINCT FROM` (never NULL here: the columns are NOT NULL or compared to a constant)
# is not indexable, so no statistics can lead the planner to execution_request_idx or a status
# index instead of the primary key: the fenced row is always found by `e.id`.
_FENCE = (
    "e.id = {execution_id} AND e.request_id IS NOT DISTINCT FROM {request_id}\n"
    "   AND e.fencing_token = {token}\n"
    "   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = {owner}\n"
    "   AND e.lease_expires_at > {now}"
)


def _fence(execution_id: str, request_id: str, token: str, owner: str, now: str) -> str:
    """The fence over the execution row `e`, from where a statement reads the holder's four
    coordinates (its parameters, or the columns of one item of a grouped write)."""
    return _FENCE.format(
        execution_id=execution_id, request_id=request_id, token=token, owner=owner, now=now
    )


# The fence, as each kind of statement reads the holder: one holder's parameters; one item of a
# grouped write (`item`, `req`); one entry of the lease renewal's arrays (`h`, clock read once).
FENCE = _fence("%(execution_id)s", "%(request_id)s", "%(token)s", "%(owner)s", "clock_timestamp()")


FENCES = {
    "{fence}": FENCE,
    "{fence_of_item}": _fence(
        "item.execution_id", "item.request_id", "item.token", "item.owner", "clock_timestamp()"
    ),
    "{fence_of_request_item}": _fence(
        "req.execution_id", "req.request_id", "req.token", "req.owner", "clock_timestamp()"
    ),
    "{fence_of_renewal}": _fence(
        "h.execution_id", "h.request_id", "h.token", "%(owner)s", "clock.now_at"
    ),
}


# Statements that compare a token without the fence: operator writes, guarded on the status and
# token they read under their own request-then-execution lock (reconciliation/).
OPERATOR_GUARDED = frozenset(
    {
        "EXECUTION_CANCEL",
        "EXECUTION_CANCEL_TO_RECONCILIATION",
        "EXECUTION_CANCEL_TO_COMPENSATION",
        "RECONCILE_REQUEUE",
        "RECONCILE_ABANDON",
        "RECONCILE_COMPENSATE",
        # A resume (an event, or a provider's callback) of a SUSPENDED execution, which no
        # holder has: guarded on the status and token read under its request-then-execution lock.
        "RESUME_EXECUTION",
    }
)


def fenced(template: str) -> str:
    """`template` composed of its fragments, then its fence placeholders replaced (at import
    time, from FENCES)."""
    template = composed(template)
    for placeholder, predicate in FENCES.items():
        template = template.replace(placeholder, predicate)
    return template


# Once per worker connection: one generic plan per statement (their best plans do not
# depend on parameter values; docs/adr/0009).
# Locks: nothing.
# Index: none.
WORKER_SESSION = "SET plan_cache_mode = force_generic_plan"


# Once per worker connection too: no sequential scan where an index can serve, whatever the
# statistics of the moment the generic plan was made (docs/adr/0009, "How the statements do it").
# Locks: nothing.
# Index: none.
WORKER_SCANS = "SET enable_seqscan = off"


# With it, on every worker connection: no JIT. The cost a disabled scan or sort adds (1e10)
# is far above jit_above_cost, so a statement that still scans or sorts (route_limit's pauses,
# read by every sweep; the claim's few small sorts) would compile at every execution: hundreds
# of milliseconds of server CPU each (docs/adr/0009).
# Locks: nothing.
# Index: none.
WORKER_JIT = "SET jit = off"


# Once more on the claiming connection: no sort node, so the claim always walks its index
# in claim order (docs/adr/0009).
# Locks: nothing.
# Index: none.
CLAIM_SESSION = "SET enable_sort = off"


# With it, on the claiming connection: no incremental sort either, so WORKER_FAIRNESS=tenant's
# claim walks execution_fair_idx in its own order rather than another index by scope, sorted.
# Locks: nothing.
# Index: none.
CLAIM_SORTS = "SET enable_incremental_sort = off"
