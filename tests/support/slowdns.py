"""A nameserver on a loopback address that never answers, and the command prefix that runs a
process with it as its only nameserver (its own mount namespace, /etc/resolv.conf bound over):
there every lookup of a name outside /etc/hosts holds the thread that makes it for the
resolver's timeout, as a receiver's slow DNS does. Needs root (port 53, mount); nothing leaves
the loopback range."""

import os
import random
import shutil
import socket
import threading
from pathlib import Path

LOOKUP_SECONDS = 2  # the resolver's timeout by default: what each lookup of a name takes here


class SilentNameserver:
    """Reads and counts queries on UDP port 53 of a free 127.x.y.z address; answers none."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rng = random.Random()  # an address, not a secret
        for _ in range(20):
            self.address = f"127.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}.53"
            try:
                self.sock.bind((self.address, 53))
                break
            except OSError:
                continue
        else:
            raise RuntimeError("no free loopback address for the nameserver")
        self.sock.settimeout(0.2)
        self.queries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="silent-dns", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.queries += 1

    def resolv_conf(self, folder: Path, seconds: int = LOOKUP_SECONDS) -> Path:
        """A resolv.conf naming only this nameserver, a lookup given up after `seconds`."""
        path = folder / "resolv.conf"
        path.write_text(f"nameserver {self.address}\noptions timeout:{seconds} attempts:1\n")
        return path

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def __enter__(self) -> "SilentNameserver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def usable() -> str | None:
    """Why this machine cannot run a process with its own resolver, or None."""
    if os.geteuid() != 0:
        return "needs root (a mount namespace, port 53)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    return None


def with_resolv_conf(path: Path) -> list[str]:
    """A command prefix: what follows it runs (exec'd, same pid) with `path` as its
    /etc/resolv.conf, in a mount namespace of its own (the machine's is untouched)."""
    script = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(path)]
