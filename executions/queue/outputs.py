"""Whether an output may be recorded for an action: a JSON object of at most MAX_OUTPUT_BYTES
that its contract's output schema accepts.

Two writers ask: an asynchronous provider's callback (callbacks.py) and an operator who records
that an uncertain write happened (reconciliation/services.py), so the rule is written once here.
"""

import json
from typing import Any

from orquestador.display import clip
from orquestador.schemas import contract_errors

MAX_OUTPUT_BYTES = 64 * 1024  # bytes of compact JSON, for an output recorded from outside
OUTPUT_PROBLEM_CHARS = 200  # characters of one problem reported
OUTPUT_PROBLEMS = 5  # problems reported at most


def json_size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def output_errors(output: Any, schema: dict[str, Any]) -> list[str]:
    """Why `output` is not a valid output for `schema`; empty when it is."""
    if not isinstance(output, dict):
        return ["the output must be a JSON object"]
    if json_size(output) > MAX_OUTPUT_BYTES:
        return [f"the output is larger than {MAX_OUTPUT_BYTES} bytes"]
    return [
        clip(f"{path or '(root)'}: {message}", OUTPUT_PROBLEM_CHARS)
        for path, message in contract_errors(schema, output, limit=OUTPUT_PROBLEMS)
    ]
