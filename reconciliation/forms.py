"""The operator's forms: a written reason, the action to settle, and (write happened) its output.

The services check all of this again; the forms exist to tell the operator what is wrong before
anything is attempted.
"""

from typing import Any

from django import forms

from executions.queue.operatorwrites import MAX_REASON_CHARS
from orquestador import strictjson


class ResolutionForm(forms.Form):
    """A resolution of one or more cases. `action_id` and `output` apply to one case only."""

    takes_output = False  # whether the form has an `output` the provider's record may prefill

    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        max_length=MAX_REASON_CHARS,
        strip=True,
        help_text="Required. Say what you checked and why this resolution is right; it is kept "
        "in the audit trail for good.",
    )

    def __init__(
        self,
        *args: Any,
        action_ids: list[str] | None = None,
        risks: dict[str, str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # The risk of this resolution where the provider's latest answer about the attempt in
        # doubt does not support it (explain.risk), by action.
        self.risks = {action_id: risk for action_id, risk in (risks or {}).items() if risk}
        if action_ids is not None:
            self.fields["action_id"] = forms.ChoiceField(
                choices=[(action_id, action_id) for action_id in action_ids],
                initial=action_ids[0] if len(action_ids) == 1 else None,
                label="Uncertain action",
            )
        if self.risks:
            self.fields["confirm_risk"] = forms.BooleanField(
                required=False,
                label="I have read the risk and choose this all the same",
                help_text="Required when the provider's answer about this attempt goes against "
                "the choice, or there is none.",
            )

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        risk = self.risks.get(cleaned.get("action_id") or "")
        if risk and not cleaned.get("confirm_risk"):
            self.add_error("confirm_risk", f"{risk} Confirm that you choose this all the same.")
        return cleaned


class WriteHappenedForm(ResolutionForm):
    takes_output = True
    output = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80, "spellcheck": "false"}),
        help_text="The action's output as a JSON object, as the provider reports it. It must "
        "validate against the capability's output schema.",
    )

    def clean_output(self) -> dict[str, Any]:
        try:
            value = strictjson.loads(self.cleaned_data["output"])
        except strictjson.JSONRefused as exc:
            raise forms.ValidationError(f"The output {exc.reason}.") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("The output must be a JSON object.")
        return value


class DecisionForm(ResolutionForm):
    """A second operator's decision on a proposed replay (approvals.py): approve or reject, with
    a reason. `risks` is keyed "" (the form settles the proposal's action, not a chosen one)."""

    proposal = forms.IntegerField(widget=forms.HiddenInput)
