"""A flow as large as the pictures must stay legible for: 20 states and 40 transitions, with
reads, both kinds of writes, an asynchronous call, waits and decisions with several targets; and
the registry that gives its capabilities their effects."""

from typing import Any

from actions.base import ActionResult, Binding, Contract, Route
from actions.registry import NO_OP, Registry
from tests.support.worker import ScriptedAdapter, ok

STATES = [
    "DRAFT",
    "SUBMITTED",
    "KYC_PENDING",
    "KYC_PASSED",
    "KYC_FAILED",
    "QUOTED",
    "AWAITING_APPROVAL",
    "APPROVED",
    "DECLINED",
    "RESERVED",
    "CHARGED",
    "CHARGE_FAILED",
    "SHIPPED",
    "DELIVERED",
    "RETURN_REQUESTED",
    "RETURNED",
    "REFUNDED",
    "CLOSED",
    "CANCELLED",
    "ON_HOLD",
]

# capability@version -> (effect, asynchronous)
CAPABILITIES = {
    "crm.lookup": ("READ_ONLY", False),
    "kyc.verify": ("READ_ONLY", True),
    "pricing.quote": ("READ_ONLY", False),
    "stock.reserve": ("IDEMPOTENT_WRITE", False),
    "stock.release": ("IDEMPOTENT_WRITE", False),
    "payments.charge": ("NON_IDEMPOTENT_WRITE", False),
    "payments.refund": ("NON_IDEMPOTENT_WRITE", False),
    "ledger.post": ("IDEMPOTENT_WRITE", False),
    "shipping.book": ("NON_IDEMPOTENT_WRITE", True),
    "mail.send": ("IDEMPOTENT_WRITE", False),
}


def _call(action_id: str, capability: str) -> dict[str, Any]:
    return {"id": action_id, "capability": capability, "version": 1, "input": {}}


def _wait(action_id: str, event: str, seconds: int) -> dict[str, Any]:
    return {
        "id": action_id,
        "wait": {
            "event": event,
            "payloadSchema": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "additionalProperties": False,
            },
            "timeoutSeconds": seconds,
            "onTimeout": {"payload": {"ok": False}},
        },
    }


def _to(target: str, rule: str = "done", outcome: str | None = None) -> dict[str, Any]:
    return {"id": rule, "when": True, "target": target, "outcome": outcome or target}


def _ok_or(ok_target: str, other: str, pointer: str) -> list[dict[str, Any]]:
    return [
        {
            "id": "ok",
            "when": {"eq": [{"from": pointer}, True]},
            "target": ok_target,
            "outcome": ok_target,
        },
        _to(other, "otherwise"),
    ]


def _transition(
    tid: str, sources: list[str], actions: list[dict], rules: list[dict]
) -> dict[str, Any]:
    return {
        "id": tid,
        "from": sources,
        "actions": actions,
        "decision": {"hitPolicy": "FIRST", "rules": rules},
    }


def big_flow(key: str = "order-lifecycle", version: int = 1) -> dict[str, Any]:
    """The 20-state, 40-transition flow."""
    t = _transition
    transitions = [
        t("submit", ["DRAFT"], [_call("customer", "crm.lookup")], [_to("SUBMITTED")]),
        t(
            "start-kyc",
            ["SUBMITTED"],
            [_call("kyc", "kyc.verify")],
            _ok_or("KYC_PASSED", "KYC_PENDING", "/actions/kyc/ok"),
        ),
        t(
            "kyc-callback",
            ["KYC_PENDING"],
            [_wait("kyc-answer", "kyc.answer", 86400)],
            _ok_or("KYC_PASSED", "KYC_FAILED", "/actions/kyc-answer/ok"),
        ),
        t("kyc-retry", ["KYC_FAILED"], [_call("kyc", "kyc.verify")], [_to("KYC_PENDING")]),
        t(
            "quote",
            ["KYC_PASSED"],
            [_call("price", "pricing.quote"), _call("notify", "mail.send")],
            [_to("QUOTED")],
        ),
        t("requote", ["QUOTED"], [_call("price", "pricing.quote")], [_to("QUOTED")]),
        t(
            "ask-approval",
            ["QUOTED"],
            [_call("notify", "mail.send")],
            [_to("AWAITING_APPROVAL")],
        ),
        t(
            "approval",
            ["AWAITING_APPROVAL"],
            [_wait("manager", "manager.approval", 172800)],
            _ok_or("APPROVED", "DECLINED", "/actions/manager/ok"),
        ),
        t("decline", ["AWAITING_APPROVAL", "QUOTED"], [], [_to("DECLINED")]),
        t(
            "reserve",
            ["APPROVED"],
            [_call("stock", "stock.reserve"), _call("journal", "ledger.post")],
            [_to("RESERVED")],
        ),
        t(
            "charge",
            ["RESERVED"],
            [
                _call("customer", "crm.lookup"),
                _call("charge", "payments.charge"),
                _call("journal", "ledger.post"),
                _call("receipt", "mail.send"),
            ],
            [
                {
                    "id": "paid",
                    "when": {"exists": "/actions/charge/id"},
                    "target": "CHARGED",
                    "outcome": "PAID",
                },
                _to("CHARGE_FAILED", "unpaid"),
            ],
        ),
        t(
            "charge-again",
            ["CHARGE_FAILED"],
            [_call("charge", "payments.charge")],
            [_to("CHARGED")],
        ),
        t(
            "give-up-charge",
            ["CHARGE_FAILED"],
            [_call("stock", "stock.release")],
            [_to("CANCELLED")],
        ),
        t(
            "ship",
            ["CHARGED"],
            [_call("book", "shipping.book"), _call("notify", "mail.send")],
            [_to("SHIPPED")],
        ),
        t(
            "deliver",
            ["SHIPPED"],
            [_wait("carrier", "carrier.delivered", 604800)],
            _ok_or("DELIVERED", "ON_HOLD", "/actions/carrier/ok"),
        ),
        t("close", ["DELIVERED"], [_call("journal", "ledger.post")], [_to("CLOSED")]),
        t(
            "request-return",
            ["DELIVERED"],
            [_call("notify", "mail.send")],
            [_to("RETURN_REQUESTED")],
        ),
        t(
            "receive-return",
            ["RETURN_REQUESTED"],
            [_wait("parcel", "return.received", 1209600)],
            _ok_or("RETURNED", "CLOSED", "/actions/parcel/ok"),
        ),
        t(
            "refund",
            ["RETURNED"],
            [_call("refund", "payments.refund"), _call("journal", "ledger.post")],
            [_to("REFUNDED")],
        ),
        t("close-refunded", ["REFUNDED"], [_call("notify", "mail.send")], [_to("CLOSED")]),
        t(
            "hold",
            ["SUBMITTED", "KYC_PASSED", "QUOTED", "APPROVED", "RESERVED", "SHIPPED"],
            [_call("notify", "mail.send")],
            [_to("ON_HOLD")],
        ),
        t(
            "release-hold",
            ["ON_HOLD"],
            [_call("customer", "crm.lookup")],
            [
                {
                    "id": "shipped",
                    "when": {"exists": "/actions/customer/shipment"},
                    "target": "SHIPPED",
                    "outcome": "SHIPPED",
                },
                {
                    "id": "paid",
                    "when": {"exists": "/actions/customer/payment"},
                    "target": "CHARGED",
                    "outcome": "CHARGED",
                },
                _to("SUBMITTED", "restart"),
            ],
        ),
        t(
            "cancel",
            ["DRAFT", "SUBMITTED", "KYC_PENDING", "KYC_PASSED", "KYC_FAILED", "QUOTED"],
            [],
            [_to("CANCELLED")],
        ),
        t(
            "cancel-reserved",
            ["APPROVED", "RESERVED"],
            [_call("stock", "stock.release")],
            [_to("CANCELLED")],
        ),
        t(
            "cancel-charged",
            ["CHARGED"],
            [
                _call("refund", "payments.refund"),
                _call("stock", "stock.release"),
                _call("journal", "ledger.post"),
            ],
            [_to("CANCELLED")],
        ),
        t("reopen", ["DECLINED", "CANCELLED"], [_call("customer", "crm.lookup")], [_to("DRAFT")]),
        t("archive", ["CLOSED", "DECLINED", "CANCELLED"], [], [_to("CLOSED", "archived")]),
        t("edit", ["DRAFT"], [], [_to("DRAFT", "edited")]),
        t(
            "escalate-kyc",
            ["KYC_FAILED"],
            [_wait("officer", "kyc.override", 259200)],
            _ok_or("KYC_PASSED", "DECLINED", "/actions/officer/ok"),
        ),
        t("expire-quote", ["QUOTED", "AWAITING_APPROVAL"], [], [_to("DRAFT", "expired")]),
        t("reprice", ["APPROVED"], [_call("price", "pricing.quote")], [_to("QUOTED")]),
        t("rebook", ["SHIPPED"], [_call("book", "shipping.book")], [_to("SHIPPED", "rebooked")]),
        t("lost", ["SHIPPED"], [_call("notify", "mail.send")], [_to("ON_HOLD", "lost")]),
        t("deny-return", ["RETURN_REQUESTED"], [_call("notify", "mail.send")], [_to("CLOSED")]),
        t("partial-refund", ["RETURNED"], [_call("refund", "payments.refund")], [_to("CLOSED")]),
        t("hold-refund", ["RETURNED", "REFUNDED"], [], [_to("ON_HOLD", "disputed")]),
        t(
            "resume-refund",
            ["ON_HOLD"],
            [_call("refund", "payments.refund")],
            [_to("REFUNDED", "refunded")],
        ),
        t("recharge", ["ON_HOLD"], [_call("charge", "payments.charge")], [_to("CHARGED")]),
        t(
            "resend-receipt",
            ["CHARGED", "CLOSED"],
            [_call("receipt", "mail.send")],
            [_to("CLOSED", "sent")],
        ),
        t(
            "audit",
            ["CLOSED"],
            [_call("customer", "crm.lookup"), _call("journal", "ledger.post")],
            [_to("CLOSED", "audited")],
        ),
    ]
    assert len(transitions) == 40, len(transitions)
    return {
        "key": key,
        "version": version,
        "initialState": "DRAFT",
        "states": STATES,
        "dataSchema": {"type": "object"},
        "transitions": transitions,
    }


def big_flow_registry(overrides: dict[str, ActionResult] | None = None) -> Registry:
    """Bindings for every capability of the big flow: each answers {}, or its override."""
    adapter = ScriptedAdapter(default=ok())
    bindings = {}
    for capability, (effect, is_async) in CAPABILITIES.items():
        answer = (overrides or {}).get(capability)
        options = {"async": True, "callback_secret_from_env": "CB"} if is_async else {}
        bindings[f"{capability}@1"] = Binding(
            contract=Contract(capability=capability, version=1, effect=effect),
            route=Route(capability=capability, version=1, adapter="test", options=options),
            adapter=adapter if answer is None else ScriptedAdapter(default=answer),
        )
    return Registry(bindings, simulation={"NO_OP@1": NO_OP}, simulation_mode=True)
