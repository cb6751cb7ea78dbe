"""The verification snippets docs/api.md gives receivers, run as written against the signatures
the sender makes (executions/webhooks/signing.py): the key is the whole `whsec_…` secret; a
stripped key, another body, an old timestamp or a rotated-out secret does not verify."""

import base64
import json
import re
import shutil
import subprocess
import time

import pytest

from executions.webhooks.signing import secret_new, signature_header
from tests.conftest import ROOT

API_DOC = ROOT / "docs" / "api.md"
BODY = b'{"id": "e1", "type": "execution.succeeded", "data": {"amount": "25.00 \xe2\x82\xac"}}'


def _snippet(marker: str, language: str) -> str:
    found = re.search(
        rf"<!-- {marker} -->\n```{language}\n(.*?)\n```", API_DOC.read_text(), re.DOTALL
    )
    assert found, f"docs/api.md has no {language} snippet after <!-- {marker} -->"
    return found.group(1)


def _cases() -> tuple[list[tuple[str, bytes, str]], list[bool]]:
    """(header, body, secret) and whether each should verify."""
    secret, previous = secret_new(), secret_new()
    now = int(time.time())
    rotated = signature_header(secrets=[secret, previous], timestamp=now, body=BODY)
    return (
        [
            (signature_header(secrets=[secret], timestamp=now, body=BODY), BODY, secret),
            (rotated, BODY, secret),  # during a rotation: the new secret's v1 is the second
            (rotated, BODY, previous),
            (signature_header(secrets=[secret], timestamp=now, body=BODY), BODY, secret[6:]),
            (signature_header(secrets=[secret], timestamp=now, body=BODY), BODY + b" ", secret),
            (signature_header(secrets=[secret], timestamp=now - 600, body=BODY), BODY, secret),
            (signature_header(secrets=[previous], timestamp=now, body=BODY), BODY, secret),
            (f"t={now}", BODY, secret),
        ],
        [True, True, True, False, False, False, False, False],
    )


def test_python_snippet__verifies_what_the_sender_signs_with_the_whole_secret():
    namespace: dict = {}
    exec(_snippet("verify-python", "python"), namespace)  # noqa: S102 (the doc's own snippet)
    cases, expected = _cases()
    assert [namespace["verified"](*case) for case in cases] == expected


def test_node_snippet__verifies_what_the_sender_signs_with_the_whole_secret():
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    cases, expected = _cases()
    program = _snippet("verify-node", "js") + (
        "\nconst cases = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));"
        "\nconsole.log(JSON.stringify(cases.map(([h, b, s]) =>"
        " verified(h, Buffer.from(b, 'base64'), s))));"
    )
    stdin = json.dumps([[h, base64.b64encode(b).decode(), s] for h, b, s in cases])
    done = subprocess.run(
        [node, "-e", program], input=stdin, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
