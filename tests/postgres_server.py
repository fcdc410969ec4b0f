"""A throwaway PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary folder.

:class:`PostgresServer` finds the server binaries (``$PG_BINDIR``, else Debian's
``/usr/lib/postgresql/<version>/bin``, newest first, else ``pg_ctl`` on ``PATH``), creates a
cluster with trust authentication in a fresh temporary folder, and starts it listening on
a Unix socket in that folder only (no TCP port, so parallel test runs cannot collide).
PostgreSQL refuses to run as root: when the tests run as root (CI does), ``initdb`` and
``pg_ctl`` run as the ``postgres`` OS user (Debian's package creates it), and the folder is
given to that user.  :meth:`PostgresServer.stop` stops the server and deletes the folder.

Durability is switched off (``fsync``, ``synchronous_commit``, ``full_page_writes``): the
data is thrown away after the tests, and a loaded CI machine then spends no time flushing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SERVER_USER = "postgres"
"""The OS user the server runs as when the tests run as root."""
PORT = 5432
"""Only names the socket file (``.s.PGSQL.5432``): the server listens on no TCP port."""


def find_bindir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``."""
    candidates: list[Path] = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(Path(os.environ["PG_BINDIR"]))

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", path.parent.name))

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder (see the module docstring).

    Args:
        bindir: The folder of ``initdb`` / ``pg_ctl`` / ``postgres``.

    Raises:
        RuntimeError: From :meth:`start`: running as root without a ``postgres`` OS user,
            or ``initdb`` / ``pg_ctl`` failed (the message holds their output and the
            server log).
    """

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root: Path | None = None
        self.running = False

    # ------------------------------------------------------------------ paths
    @property
    def data(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "socket"

    @property
    def log(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string for ``dbname`` (superuser ``postgres``, no password)."""
        return f"host={self.socket_dir} port={PORT} user=postgres dbname={dbname}"

    # ------------------------------------------------------------------ running
    def _user(self) -> dict[str, Any]:
        """``subprocess`` keywords that run a command as the server's OS user when root."""
        if os.geteuid() != 0:
            return {}
        try:
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise RuntimeError(
                f"running as root, and PostgreSQL refuses to run as root; there is no "
                f"{SERVER_USER!r} OS user to run it as (Debian's postgresql package "
                f"creates one)") from None
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [],
                "env": {**os.environ, "HOME": str(self.root), "USER": SERVER_USER,
                        "LOGNAME": SERVER_USER}}

    def _run(self, *args: str) -> None:
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                              timeout=180, cwd=self.root, **self._user())
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise RuntimeError(f"{Path(args[0]).name} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}\n--- server log ---\n{log}")

    def start(self) -> PostgresServer:
        """Create the cluster and start the server; waits until it accepts connections."""
        self.root = Path(tempfile.mkdtemp(prefix="toolguard-pg-"))
        try:
            self.socket_dir.mkdir()
            user = self._user()
            if user:
                for path in (self.root, self.socket_dir):
                    os.chown(path, user["user"], user["group"])
            self._run(self.bindir / "initdb", "-D", str(self.data), "-U", "postgres",
                      "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
            options = " ".join([
                f"-p {PORT}", f"-k {self.socket_dir}", "-c listen_addresses=''",
                "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
                "-c max_connections=200", "-c dynamic_shared_memory_type=mmap",
                "-c max_parallel_workers_per_gather=0"])
            self._run(self.bindir / "pg_ctl", "-D", str(self.data), "-l", str(self.log),
                      "-o", options, "-w", "-t", "120", "start")
            self.running = True
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server and delete its folder.

        An immediate shutdown (no shutdown checkpoint, open connections cut): the data is
        deleted next, so nothing needs to reach the disk.
        """
        if self.root is None:
            return
        try:
            if self.running:
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self._run(self.bindir / "pg_ctl", "-D", str(self.data), "-m", "immediate",
                              "-w", "-t", "60", "stop")
                self.running = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its connection string."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


@contextlib.contextmanager
def running_server(bindir: Path) -> Iterator[PostgresServer]:
    """A started :class:`PostgresServer`, stopped and deleted on exit."""
    server = PostgresServer(bindir).start()
    try:
        yield server
    finally:
        server.stop()
