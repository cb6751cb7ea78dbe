"""What a page must hold to keep the Content-Security-Policy (orquestador/csp.py) without a
violation: the header, no inline script and no inline event handler."""

import re

from orquestador.csp import HEADER, POLICY

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)
SCRIPT_URL = re.compile(r"""(?:href|src|action)\s*=\s*["']?\s*javascript:""", re.IGNORECASE)


def assert_policy_held(response) -> str:
    """The page's HTML, once its header and markup are checked."""
    assert response[HEADER] == POLICY, response.get(HEADER)
    script_src = next(d for d in POLICY.split("; ") if d.startswith("script-src "))
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    page = response.content.decode()
    assert INLINE_SCRIPT.findall(page) == []
    assert EVENT_HANDLER.findall(page) == []
    assert SCRIPT_URL.findall(page) == []
    return page
