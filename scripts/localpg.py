"""A project-local PostgreSQL cluster for development, tests and benchmarks.

    python scripts/localpg.py start [--dir DIR] [--fast]   # create if missing, start on loopback
    python scripts/localpg.py setup [--dir DIR] --env-file FILE
                                   # start, create the database and both roles, write their URLs
    python scripts/localpg.py url [--dir DIR]              # the cluster's superuser URL
    python scripts/localpg.py stop [--dir DIR]             # stop it (only a cluster it created)

Idempotent: starting a running cluster or setting up an existing database changes nothing. It
only ever stops a cluster whose data folder carries the marker it wrote when it created it. The
server listens on 127.0.0.1 only, on a free port, with password (SCRAM) authentication and no
Unix socket. When run as root it runs the server as the unprivileged OS user `postgres`, creating
that user if missing, since PostgreSQL refuses to run as root.
"""

import argparse
import glob
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".local" / "pg"
MARKER = "ORQUESTADOR_LOCAL_CLUSTER"
SUPERUSER = "postgres"
OS_USER = "postgres"
DATABASE = "orquestador"
OWNER_ROLE = "orquestador_owner"
RUNTIME_ROLE = "orquestador_app"
START_TIMEOUT = 60  # seconds

# Throwaway clusters for tests trade durability for speed; benchmarks and development keep the
# defaults (fsync and synchronous_commit on).
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class LocalPgError(Exception):
    pass


def find_bin_dir() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    raise LocalPgError(
        "PostgreSQL server binaries (pg_ctl, initdb, postgres) were not found on PATH or in "
        "/usr/lib/postgresql/*/bin. Install them, e.g. on Debian or Ubuntu: "
        "`apt-get install postgresql`."
    )


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the unprivileged server user (nothing if not root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER],
            check=True,
        )
    return ["runuser", "-u", OS_USER, "--"]


def _give_to_server_user(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(OS_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _check_reachable(path: Path) -> None:
    """Fail early, and say why, when the server user cannot reach `path` (a private parent)."""
    prefix = _as_server_user()
    if prefix and subprocess.run([*prefix, "test", "-x", str(path)], check=False).returncode:
        raise LocalPgError(
            f"the server user {OS_USER!r} cannot reach {path}: a parent folder is private. "
            "Choose a --dir whose parent folders others may traverse (chmod o+x)."
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As PostgreSQL binds its own socket: a restart finds its port free again even while
        # connections of the previous run linger in TIME_WAIT, so clients reconnect to it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _state_path(base: Path) -> Path:
    return base / "cluster.json"


def _load_state(base: Path) -> dict:
    path = _state_path(base)
    if not path.exists():
        raise LocalPgError(f"no cluster was created in {base}; run `start` first.")
    return json.loads(path.read_text())


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _owned(base: Path) -> bool:
    state = _state_path(base)
    marker = base / "data" / MARKER
    if not (state.exists() and marker.exists()):
        return False
    return marker.read_text().strip() == json.loads(state.read_text())["marker"]


def init(base: Path, *, fast: bool) -> dict:
    data = base / "data"
    if _state_path(base).exists():
        if not _owned(base):
            raise LocalPgError(f"{base} holds a cluster this tool did not create; not touching it.")
        return _load_state(base)
    if data.exists() and any(data.iterdir()):
        raise LocalPgError(f"{data} is not empty and was not created by this tool.")
    bin_dir = find_bin_dir()
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)  # noqa: S103  (the server user must reach data/ inside it)
    _check_reachable(base)
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o700)
    _give_to_server_user(data)
    password = secrets.token_urlsafe(24)
    pwfile = base / "superuser.pw"
    _write_private(pwfile, password + "\n")
    _give_to_server_user(pwfile)
    try:
        subprocess.run(
            [
                *_as_server_user(),
                str(bin_dir / "initdb"),
                "--pgdata",
                str(data),
                "--username",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                "--locale",
                "C.UTF-8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    finally:
        pwfile.unlink()
    state = {
        "marker": secrets.token_hex(16),
        "port": _free_port(),
        "password": password,
        "bin_dir": str(bin_dir),
        "fast": fast,
    }
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": "''",
        "max_connections": "200",
        "shared_buffers": "'256MB'",
        **({k: v for k, v in FAST_SETTINGS.items()} if fast else {}),
    }
    with open(data / "postgresql.auto.conf", "a") as conf:
        conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
    (data / MARKER).write_text(state["marker"])
    _write_private(_state_path(base), json.dumps(state))
    return state


def _pg_ctl(state: dict, base: Path, *args: str, check: bool = True) -> int:
    cmd = [
        *_as_server_user(),
        str(Path(state["bin_dir"]) / "pg_ctl"),
        "--pgdata",
        str(base / "data"),
    ]
    return subprocess.run([*cmd, *args], check=check, stdout=subprocess.DEVNULL).returncode


def is_running(base: Path) -> bool:
    if not _state_path(base).exists():
        return False
    return _pg_ctl(_load_state(base), base, "status", check=False) == 0


def start(base: Path, *, fast: bool = False) -> dict:
    state = init(base, fast=fast)
    if is_running(base):
        return state
    if not _port_free(state["port"]):
        state["port"] = _free_port()
        _write_private(_state_path(base), json.dumps(state))
    log = base / "server.log"
    log.touch()
    _give_to_server_user(log)
    _pg_ctl(
        state,
        base,
        "start",
        "--wait",
        f"--timeout={START_TIMEOUT}",
        "--log",
        str(log),
        "-o",
        f"-p {state['port']}",
    )
    return state


def stop(base: Path) -> None:
    if not _state_path(base).exists():
        return
    if not _owned(base):
        raise LocalPgError(f"{base} holds a cluster this tool did not create; not touching it.")
    if is_running(base):
        _pg_ctl(_load_state(base), base, "stop", "--wait", "--mode=fast")


def url(
    state: dict, *, user: str = SUPERUSER, password: str | None = None, db: str = "postgres"
) -> str:
    secret = quote(password if password is not None else state["password"], safe="")
    return f"postgres://{user}:{secret}@127.0.0.1:{state['port']}/{db}"


def _wait_ready(admin_url: str) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            psycopg.connect(admin_url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def setup(base: Path, env_file: Path) -> None:
    """Start the cluster and create the database with its owner and runtime roles."""
    import psycopg
    from psycopg import sql

    state = start(base)
    admin = url(state)
    _wait_ready(admin)
    creds = state.setdefault("roles", {})
    for role in (OWNER_ROLE, RUNTIME_ROLE):
        creds.setdefault(role, secrets.token_urlsafe(24))
    _write_private(_state_path(base), json.dumps(state))
    with psycopg.connect(admin, autocommit=True) as conn:
        for role, password in creds.items():
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(OWNER_ROLE)
                )
            )
    with psycopg.connect(url(state, db=DATABASE), autocommit=True) as conn:
        # The owner owns the schema; nobody else may create in it (PostgreSQL 14 still grants
        # CREATE on public to PUBLIC by default).
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(OWNER_ROLE)))
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    lines = {
        "DATABASE_URL": url(state, user=RUNTIME_ROLE, password=creds[RUNTIME_ROLE], db=DATABASE),
        "MIGRATION_DATABASE_URL": url(
            state, user=OWNER_ROLE, password=creds[OWNER_ROLE], db=DATABASE
        ),
    }
    _write_private(env_file, "".join(f"{k}={v}\n" for k, v in lines.items()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["start", "setup", "url", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--fast", action="store_true", help="fsync off: for throwaway clusters")
    parser.add_argument("--env-file", type=Path)
    args = parser.parse_args(argv)
    base = args.dir.resolve()
    try:
        if args.command == "start":
            start(base, fast=args.fast)
            _wait_ready(url(_load_state(base)))
        elif args.command == "setup":
            if not args.env_file:
                parser.error("setup needs --env-file")
            setup(base, args.env_file)
        elif args.command == "url":
            print(url(_load_state(base)))
        elif args.command == "status":
            print("running" if is_running(base) else "stopped")
        else:
            stop(base)
    except (LocalPgError, subprocess.CalledProcessError) as exc:
        print(f"localpg: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
