"""Stable error codes, shared by the API, the worker and the admin (docs/api.md#errors).

API errors render as `{"code", "detail"}`; execution error codes are stored in
`execution.error_code` and shown to clients as `errorCode`. Details shown to clients are safe
text: never raw provider responses, credentials or internal identifiers beyond the resource's own.
"""

# API error codes, with their HTTP status.
UNAUTHENTICATED = "UNAUTHENTICATED"  # 401
FORBIDDEN = "FORBIDDEN"  # 403: a permission missing from the token's scope
NOT_FOUND = "NOT_FOUND"  # 404: missing, or not the caller's
INVALID_BODY = "INVALID_BODY"  # 400
# A list's query: an unknown parameter, or a value outside its type or enumeration (names it).
INVALID_QUERY = "INVALID_QUERY"  # 400
# A list's cursor that this server did not make for this caller and these filters.
INVALID_CURSOR = "INVALID_CURSOR"  # 400
DATA_INVALID = "DATA_INVALID"  # 422
DATA_TOO_LARGE = "DATA_TOO_LARGE"  # 422
UNKNOWN_TRANSITION = "UNKNOWN_TRANSITION"  # 422
TRANSITION_NOT_ALLOWED = "TRANSITION_NOT_ALLOWED"  # 422
REVISION_CONFLICT = "REVISION_CONFLICT"  # 409
REQUEST_BLOCKED = "REQUEST_BLOCKED"  # 409
# An Idempotency-Key already used on this request with a different body.
IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"  # 422
FLOW_INVALID = "FLOW_INVALID"  # 422: a flow definition with problems, each with its path
FLOW_CONFLICT = "FLOW_CONFLICT"  # 409: this key and version is published with other content
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"  # 405
# The request line or the header fields are over the web server's limits (docs/api.md#limits).
HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"  # 431
# An event's payload breaks the wait's payloadSchema (with `problems`).
EVENT_INVALID = "EVENT_INVALID"  # 422
# The execution is not waiting for this event, and the event cannot be kept for a wait ahead.
NOT_WAITING = "NOT_WAITING"  # 409
INTERNAL_ERROR = "INTERNAL_ERROR"  # 500: a fault of ours, logged; the detail says nothing more
# 503 from a worker endpoint: the run passed WORKER_ENDPOINT_RUN_SECONDS and was told to stop.
RUN_TIME_LIMIT = "RUN_TIME_LIMIT"
# The database cannot be reached (refused, restarting, connection lost): nothing was changed.
DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"  # 503, with Retry-After

# Execution error codes (execution.error_code / checkpoint.error_code).
REQUEST_MODIFIED = "REQUEST_MODIFIED"
INTEGRATION_UNAVAILABLE = "INTEGRATION_UNAVAILABLE"
INPUT_INVALID = "INPUT_INVALID"
OUTPUT_INVALID = "OUTPUT_INVALID"
CONTRACT_MISMATCH = "CONTRACT_MISMATCH"
DECISION_NO_MATCH = "DECISION_NO_MATCH"
DECISION_AMBIGUOUS = "DECISION_AMBIGUOUS"
RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"
# Taken over after lease expiry more than WORKER_MAX_RECLAIMS times in a row without a checkpoint
# progressing (a poison execution): settled by the next claim instead of run again.
RECLAIMS_EXHAUSTED = "RECLAIMS_EXHAUSTED"
PERMANENT_FAILURE = "PERMANENT_FAILURE"
UNCERTAIN_WRITE = "UNCERTAIN_WRITE"
# A wait action's deadline passed without its event, and the wait has no onTimeout payload.
EVENT_TIMEOUT = "EVENT_TIMEOUT"
TRANSIENT_FAILURE = "TRANSIENT_FAILURE"  # one attempt's transient failure, before retries run out
# On a checkpoint: an operator established that this write did not happen and authorised one
# replay with the same external key (RECONCILIATION.md). The worker runs that one attempt even
# past the contract's max_attempts.
REPLAY_AUTHORIZED = "REPLAY_AUTHORIZED"
# On an execution: cancelled after one of its writes had happened (executions/queue/cancel.py); the
# request stays blocked and an operator decides what that write means.
CANCELLED_AFTER_WRITE = "CANCELLED_AFTER_WRITE"
# On an execution: a compensation failed for good (refused, its attempts used up, or it can no
# longer run under the catalog); it waits for an operator, its cause kept
# (docs/flow-format.md#compensation).
COMPENSATION_FAILED = "COMPENSATION_FAILED"
# The "compensate" resolution (RECONCILIATION.md): on a case, refused because the execution's
# succeeded writes cannot all be undone; on a checkpoint, an operator recorded that this
# uncertain write did not happen and had the others undone instead of replaying it.
NOT_COMPENSABLE = "NOT_COMPENSABLE"
RECORDED_NOT_HAPPENED = "RECORDED_NOT_HAPPENED"
# Why a cancellation is refused: the execution already ended (executions/queue/cancel.py).
NOT_CANCELLABLE = "NOT_CANCELLABLE"
# On an execution: an operator abandoned it in reconciliation; it ended FAILED and released its
# request without knowing whether the uncertain write happened (RECONCILIATION.md).
RECONCILIATION_ABANDONED = "RECONCILIATION_ABANDONED"

# Why the admin refuses an operator's resolution (reconciliation/services.py).
NOT_IN_RECONCILIATION = "NOT_IN_RECONCILIATION"  # nothing to resolve, or already resolved
NO_UNCERTAIN_CHECKPOINT = "NO_UNCERTAIN_CHECKPOINT"  # no RUNNING/UNKNOWN action to settle
REASON_REQUIRED = "REASON_REQUIRED"  # blank, or longer than the limit
# A choice the provider's answer about the attempt in doubt does not support (a replay with no
# answer about that attempt, or against "happened"; "happened" against "not found"), made
# without confirming its risk.
RISK_NOT_CONFIRMED = "RISK_NOT_CONFIRMED"
# The two-person rule (reconciliation/approvals.py): a replay of a non-idempotent write needs a
# proposal and a second operator's approval; one is pending already; the proposal no longer holds
# (the case changed under it, or it was rejected); the proposer tried to approve their own; or no
# approval is needed (the rule is off, or the write is not a non-idempotent one).
APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
NO_APPROVAL_NEEDED = "NO_APPROVAL_NEEDED"
PROPOSAL_PENDING = "PROPOSAL_PENDING"
PROPOSAL_STALE = "PROPOSAL_STALE"
SELF_APPROVAL = "SELF_APPROVAL"

# Webhooks (docs/api.md#webhooks): a target the rules refuse (the detail names the rule), and a
# tenant already holding the most subscriptions it may.
WEBHOOK_URL_REFUSED = "WEBHOOK_URL_REFUSED"  # 422
WEBHOOK_LIMIT_REACHED = "WEBHOOK_LIMIT_REACHED"  # 409

# Paths whose every answer is JSON `{"code", "detail"}`, refusals included, whoever makes them:
# Django's error views (orquestador/errorpages.py), the web server (orquestador/gunicornworker.py).
JSON_PREFIXES = ("/api/", "/internal/")

# Size limit of a request's data, as compact UTF-8 JSON (docs/api.md#limits).
MAX_DATA_BYTES = 256 * 1024  # bytes


class CodedError(Exception):
    """An expected refusal, as a value: a stable `code` from this module and safe `detail` text.

    Every refusal of the project is one (request data, decisions, updates, flow definitions,
    cancellations, operators' resolutions), so one handler renders them all: `extra` holds any
    further JSON-ready fields of the API's error body (a flow's `problems`).
    """

    def __init__(self, code: str, detail: str, *, extra: dict | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.extra = dict(extra or {})
