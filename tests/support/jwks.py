"""An identity provider's JWKS endpoint on 127.0.0.1, serving the public halves of keys a test
generates and counting the fetches it answers; it can be stopped (an outage) and started again on
its port. `signer()` makes the tokens.Signer of a fresh key published under a kid.
"""

import functools
import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.support import tokens

PATH = "/.well-known/jwks.json"
ALGORITHMS = ("RS256", "ES256", "EdDSA")


def new_private_key(algorithm: str) -> Any:
    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


@functools.cache
def shared_private_key(algorithm: str, index: int = 0) -> Any:
    """One key per algorithm and index for the whole run: RSA keys take a while to make."""
    return new_private_key(algorithm)


def public_jwk(private_key: Any, kid: str, *, alg: bool = True, **extra: Any) -> dict[str, Any]:
    """The public JWK of `private_key`, with `use: sig`, and `alg` unless told not to."""
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk, algorithm = RSAAlgorithm.to_jwk(public, as_dict=True), "RS256"
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk, algorithm = ECAlgorithm.to_jwk(public, as_dict=True), "ES256"
    else:
        jwk, algorithm = OKPAlgorithm.to_jwk(public, as_dict=True), "EdDSA"
    jwk = {**jwk, "kid": kid, "use": "sig", **extra}
    if alg:
        jwk["alg"] = algorithm
    return jwk


def signer(algorithm: str, *, index: int = 0, kid: str | None = None) -> tokens.Signer:
    """A signer with the shared key of `algorithm` (and a stranger's key of the same kind)."""
    return tokens.Signer(
        key=shared_private_key(algorithm, index),
        algorithm=algorithm,
        kid=kid or f"{algorithm.lower()}-{index}",
        other=shared_private_key(algorithm, index + 1000),
    )


class JwksServer:
    """Serves `{"keys": [...]}` at PATH from what `publish` put there; `fetches` counts the GETs
    of PATH answered. `respond`, when set, answers instead: (status, headers, body)."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}
        self.fetches = 0
        self.respond: Callable[[str], tuple[int, dict[str, str], bytes]] | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    def publish(self, jwk_or_signer: dict[str, Any] | tokens.Signer) -> None:
        if isinstance(jwk_or_signer, tokens.Signer):
            jwk_or_signer = public_jwk(jwk_or_signer.key, str(jwk_or_signer.kid))
        with self._lock:
            self.keys[jwk_or_signer["kid"]] = jwk_or_signer

    def withdraw(self, kid: str) -> None:
        with self._lock:
            del self.keys[kid]

    def document(self) -> bytes:
        with self._lock:
            return json.dumps({"keys": list(self.keys.values())}).encode()

    def start(self) -> "JwksServer":
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server's name
                if jwks.respond is not None:
                    status, headers, body = jwks.respond(self.path)
                elif self.path == PATH:
                    status, headers, body = 200, {"Content-Type": "application/json"}, b""
                    body = jwks.document()
                else:
                    status, headers, body = 404, {}, b"not found"
                with jwks._lock:
                    jwks.fetches += 1
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that stopped reading (an answer too large): nothing to report

        self._server = Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering: connections to the port are refused until `start` again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "JwksServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def random_kid() -> str:
    return uuid.uuid4().hex
