"""`documents.verify`: fetch a document by id from the document store and check its SHA-256
(INTEGRATIONS.md#documentsverify).

The id comes from the input, is checked by the schema declared here and URL-quoted into the
route's `{documentId}`: the data chooses which document, never where. The body is hashed under
`max_bytes` and never kept, batch by batch in a thread for a large one (why:
docs/adr/0016-adapters-on-an-asynchronous-client.md). Always READ_ONLY. Output `{verified,
sha256, size, mediaType}`; 404 or too large is PERMANENT, other failures follow `actions.outcomes`
for a read; a 202 on an async route is ACCEPTED.
"""

import asyncio
import hashlib
import hmac
import re
from urllib.parse import quote

from orquestador import errors

from . import outcomes
from .base import ActionContext, ActionResult, Binding, Outcome
from .credentials import MissingCredential, credential_headers
from .options import Option, http_url, integer, seconds, string_list
from .transport import (
    DEFAULT_CONNECT_TIMEOUT,
    USER_AGENT,
    Stage,
    TransportError,
    fetch,
)

DEFAULT_MAX_BYTES = 10 * 1024 * 1024  # bytes
MAX_BYTES_LIMIT = 1024 * 1024 * 1024  # bytes
OFF_LOOP_BYTES = 1024 * 1024  # bytes hashed at once in a thread, off the loop (ADR 16)
# Starts with a letter or digit (so never "." or ".."), then a conservative set of characters.
DOCUMENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._~:-]{0,199}$"
SHA256_PATTERN = r"^[0-9a-fA-F]{64}$"
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}")

INPUT_SCHEMA = {
    "type": "object",
    "required": ["documentId", "sha256"],
    "properties": {
        "documentId": {"type": "string", "pattern": DOCUMENT_ID_PATTERN},
        "sha256": {"type": "string", "pattern": SHA256_PATTERN},
    },
}
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["verified", "sha256", "size", "mediaType"],
    "properties": {
        "verified": {"type": "boolean"},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "size": {"type": "integer", "minimum": 0},
        "mediaType": {"type": "string"},
    },
}


class StreamedDigest:
    """SHA-256 of a body streamed to it. Chunks are hashed in batches: a batch of OFF_LOOP_BYTES
    or more in a thread (hashlib lets go of the interpreter lock for it, so the event loop serves
    other calls meanwhile), the rest, under that size, on the loop, where it costs less than the
    hand-over (docs/adr/0016)."""

    __slots__ = ("_hash", "_pending", "_pending_bytes")

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    async def update(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= OFF_LOOP_BYTES:
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            await asyncio.to_thread(self._hash_all, batch)

    async def hexdigest(self) -> str:
        self._hash_all(self._pending)
        self._pending, self._pending_bytes = [], 0
        return self._hash.hexdigest()

    def _hash_all(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._hash.update(chunk)


class DocumentsVerifyAdapter:
    name = "documents.verify"
    fixed_effect = "READ_ONLY"
    # A route may set async = true: a 202 means the store verifies later and calls back with
    # the output.
    supports_async = True
    input_schema = INPUT_SCHEMA
    output_schema = OUTPUT_SCHEMA
    route_options = {
        "url": Option(
            http_url(placeholders=("documentId",), required=("documentId",)), required=True
        ),
        "max_bytes": Option(integer(minimum=1, maximum=MAX_BYTES_LIMIT), default=DEFAULT_MAX_BYTES),
        "allowed_media_types": Option(string_list(pattern=_MEDIA_TYPE, what="media type")),
        "connect_timeout_seconds": Option(seconds(maximum=60), default=DEFAULT_CONNECT_TIMEOUT),
    }

    async def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        options = binding.route.options
        document_id = ctx.input.get("documentId")
        expected = ctx.input.get("sha256")
        # The worker validated the input against the schema; checked again because the id is
        # about to become part of a URL.
        if not isinstance(document_id, str) or not re.fullmatch(DOCUMENT_ID_PATTERN, document_id):
            return outcomes.permanent("documentId is not a valid document id", errors.INPUT_INVALID)
        if not isinstance(expected, str) or not re.fullmatch(SHA256_PATTERN, expected):
            return outcomes.permanent("sha256 is not 64 hexadecimal digits", errors.INPUT_INVALID)
        try:
            headers = {
                **credential_headers(options.get("headers_from_env", {})),
                "Accept-Encoding": "identity",
                "User-Agent": USER_AGENT,
            }
        except MissingCredential as exc:
            return outcomes.permanent(f"{exc}; nothing was sent", errors.INTEGRATION_UNAVAILABLE)

        digest = StreamedDigest()
        try:
            reply = await fetch(
                binding,
                options["url"].replace("{documentId}", quote(document_id, safe="")),
                headers,
                max_bytes=options["max_bytes"],
                sink=digest.update,
                cancelled=ctx.cancelled,
            )
        except TransportError as exc:
            if exc.final and exc.stage is Stage.BODY:
                return outcomes.permanent(f"document over max_bytes ({options['max_bytes']} bytes)")
            return outcomes.from_transport_error(exc, outcomes.READ_ONLY)
        if binding.route.is_async and reply.status == 202:
            return ActionResult(outcome=Outcome.ACCEPTED)
        if reply.status == 404:
            return outcomes.permanent("document not found in the document store")
        if reply.status != 200:
            failed = outcomes.from_status(reply.status, outcomes.READ_ONLY, reply.retry_after)
            # A 2xx other than 200 carries no document: a store that answers that is misbehaving.
            return failed or outcomes.permanent(f"document store answered HTTP {reply.status}")

        sha256 = await digest.hexdigest()
        allowed = options.get("allowed_media_types")
        verified = hmac.compare_digest(sha256, expected.lower()) and (
            allowed is None or reply.media_type in allowed
        )
        return ActionResult(
            outcome=Outcome.SUCCEEDED,
            output={
                "verified": verified,
                "sha256": sha256,
                "size": reply.size,
                "mediaType": reply.media_type,
            },
        )
