"""A real PgBouncer in transaction pooling mode in front of the test database, for process tests.

`PgBouncer(upstream_dsn, tmp_path)` writes a configuration into its own folder, starts Debian's
`pgbouncer` in the foreground as the unprivileged server user (the way scripts/localpg.py runs
PostgreSQL: PgBouncer refuses to run as root), listening on 127.0.0.1 on a free port, and
`dsn(upstream)` gives the same connection string through it. Only the process it started is
ever signalled. `pgbouncer_missing()` says why none can run here, for a skip;
`running_pgbouncer(upstream, pool_size=...)` is one in a folder of its own, removed afterwards.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg

from tests.conftest import ROOT

START_TIMEOUT = 20.0  # seconds for PgBouncer to accept connections
SERVER_USER = "postgres"  # the unprivileged user scripts/localpg.py runs PostgreSQL as


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


def pgbouncer_missing() -> str | None:
    """Why no PgBouncer can run here, or None."""
    if pgbouncer_binary() is None:
        return "pgbouncer is not installed (.ci/run installs Debian's pgbouncer package)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PgBouncer cannot be started unprivileged"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    """PgBouncer (pool_mode=transaction) in front of the database of `upstream_dsns`."""

    def __init__(self, upstream_dsns: list[str], folder: Path, *, pool_size: int = 5) -> None:
        parts = urlsplit(upstream_dsns[0])
        self.host, self.upstream_port = parts.hostname, parts.port or 5432
        self.dbname = parts.path.lstrip("/")
        self.port = _free_port()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        users = {}
        for dsn in upstream_dsns:
            user = urlsplit(dsn)
            users[unquote(user.username)] = unquote(user.password or "")
        (folder / "userlist.txt").write_text(
            "".join(f"{_quote(u)} {_quote(p)}\n" for u, p in users.items())
        )
        (folder / "pgbouncer.ini").write_text(
            f"""[databases]
{self.dbname} = host={self.host} port={self.upstream_port} dbname={self.dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {folder / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {folder / "pgbouncer.log"}
pidfile = {folder / "pgbouncer.pid"}
admin_users =
stats_users =
"""
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> "PgBouncer":
        prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, user=SERVER_USER)
            for entry in self.folder.iterdir():
                shutil.chown(entry, user=SERVER_USER)
            os.chmod(self.folder / "userlist.txt", 0o600)
            prefix = ["runuser", "-u", SERVER_USER, "--"]
        self.process = subprocess.Popen(
            [*prefix, pgbouncer_binary(), str(self.folder / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.05)

    def dsn(self, upstream: str) -> str:
        """`upstream` (a DSN on the upstream server) through this PgBouncer."""
        parts = urlsplit(upstream)
        netloc = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def connect(self, upstream: str) -> psycopg.Connection:
        # No prepared statements: PgBouncer 1.18 in transaction mode has none at the protocol level.
        return psycopg.connect(self.dsn(upstream), autocommit=True, prepare_threshold=None)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # our own child (runuser passes the signal on)
            try:
                self.process.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(START_TIMEOUT)

    def __enter__(self) -> "PgBouncer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_pgbouncer(upstream_dsn: str, *, pool_size: int) -> Iterator[PgBouncer]:
    """A PgBouncer in front of `upstream_dsn`'s database, its files in a folder of its own under
    .local/ (the unprivileged server user must reach them), removed when the block ends."""
    (ROOT / ".local").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer.", dir=ROOT / ".local"))
    os.chmod(folder, 0o755)  # noqa: S103 (the unprivileged server user must reach it)
    try:
        with PgBouncer([upstream_dsn], folder, pool_size=pool_size) as running:
            yield running
    finally:
        shutil.rmtree(folder, ignore_errors=True)
