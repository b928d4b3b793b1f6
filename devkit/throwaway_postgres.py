"""Throwaway PostgreSQL servers for tests, benchmarks and CI.

Each server lives in its own temp dir (initdb + pg_ctl), listens only on a
free loopback port and keeps its unix socket inside that dir, so nothing
touches system paths. PostgreSQL refuses to run as root, so when we are
root every server command runs as a dedicated unprivileged OS user.

Both the tests and the benchmarks start these servers, so the module lives in ``devkit``, a
development package of its own beside both (the benchmarks do not depend on the tests); like
them it runs from a source checkout and is not part of the wheel or the image.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.sql import SQL, Identifier

DEFAULT_OS_USER = "dreampg"
SUPERUSER = "dream"
DEFAULT_DBNAME = "dream"
HOST = "127.0.0.1"
START_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 40
_REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres")
# Markers postgres logs when another process grabbed the port between our
# probe and its bind; only these justify retrying on a new port.
_PORT_CLASH_MARKERS = ("could not bind", "Address already in use")


class PostgresUnavailableError(RuntimeError):
    """PostgreSQL could not be found, initialised or started."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str
    data_dir: Path
    bin_dir: Path
    # None means the server runs as the current (non-root) user.
    os_user: str | None = None

    @property
    def url(self) -> str:
        return self._url_for(self.dbname)

    @property
    def base_dir(self) -> Path:
        return self.data_dir.parent

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    def create_database(self, name: str) -> str:
        """Create a fresh, empty database (dropping any old one); return its URL."""
        # Lazy: importing this module must not require (or load) psycopg.
        import psycopg  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        ident = sql.Identifier(name)
        with psycopg.connect(self._url_for("postgres"), autocommit=True) as conn:
            # FORCE kicks out lingering sessions so reruns never block.
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        return self._url_for(name)

    def _url_for(self, dbname: str) -> str:
        user, password = quote(self.user, safe=""), quote(self.password, safe="")
        return f"postgresql://{user}:{password}@{self.host}:{self.port}/{quote(dbname, safe='')}"


# --- discovery -------------------------------------------------------------


def _has_binaries(bindir: Path) -> bool:
    return all((bindir / name).is_file() for name in _REQUIRED_BINARIES)


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        out = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip())


def _version_key(bindir: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<ver>/bin: sort numerically so 15 beats 9.6.
    parts = bindir.parent.name.split(".")
    return tuple(int(p) if p.isdigit() else -1 for p in parts)


def find_pg_bindir() -> Path | None:
    """PG_BINDIR, then `pg_config --bindir`, then the newest Debian-style install."""
    env = os.environ.get("PG_BINDIR")
    candidates = [Path(env)] if env else []
    from_pg_config = _pg_config_bindir()
    if from_pg_config is not None:
        candidates.append(from_pg_config)
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key)
    candidates.extend(reversed(installed))
    return next((c for c in candidates if _has_binaries(c)), None)


# --- OS user handling ------------------------------------------------------


def _is_root() -> bool:
    return os.geteuid() == 0


def _ensure_os_user(name: str) -> None:
    if _user_exists(name):
        return
    cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    # Re-check rather than trust the exit code: a parallel worker may have won the race.
    if not _user_exists(name):
        raise PostgresUnavailableError(f"cannot create OS user {name!r}: {result.stderr.strip()}")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _resolve_os_user(os_user: str | None) -> str | None:
    if not _is_root():
        return None
    name = os_user or os.environ.get("DREAM_PG_OS_USER") or DEFAULT_OS_USER
    _ensure_os_user(name)
    return name


def _as_user(cmd: Sequence[str], os_user: str | None) -> list[str]:
    if os_user is None:
        return list(cmd)
    if shutil.which("runuser"):
        return ["runuser", "-u", os_user, "--", *cmd]
    return ["su", "-s", "/bin/sh", os_user, "-c", shlex.join(cmd)]


def _chown(path: Path, os_user: str | None) -> None:
    if os_user is not None:
        entry = pwd.getpwnam(os_user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(cmd: Sequence[str], os_user: str | None, cwd: Path, timeout: float) -> str:
    """Run a server command as the server user; raise with its output on failure."""
    try:
        # cwd inside our temp dir: the server user usually cannot enter root's cwd.
        result = subprocess.run(
            _as_user(cmd, os_user),
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PostgresUnavailableError(f"{cmd[0]} failed to run: {exc}") from exc
    if result.returncode != 0:
        raise PostgresUnavailableError(
            f"{Path(cmd[0]).name} exited {result.returncode}: {result.stdout}{result.stderr}"
        )
    return result.stdout


# --- lifecycle -------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _make_base_dir(base_dir: Path | None, os_user: str | None) -> Path:
    # mkdtemp under /tmp (or the caller's dir) keeps the path traversable for
    # the server user; 0o755 lets root and that user both reach the data dir.
    base = Path(tempfile.mkdtemp(prefix="dreampg-", dir=base_dir))
    base.chmod(0o755)
    _chown(base, os_user)
    for sub in ("data", "sock"):
        (base / sub).mkdir(mode=0o700)
        _chown(base / sub, os_user)
    return base


def _initdb(bindir: Path, base: Path, password: str, os_user: str | None) -> None:
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    _chown(pwfile, os_user)
    cmd = [
        str(bindir / "initdb"),
        "-D", str(base / "data"),
        "-U", SUPERUSER,
        "-A", "scram-sha-256",
        f"--pwfile={pwfile}",
        "--encoding=UTF8",
        "--locale=C",
        "--no-sync",
    ]  # fmt: skip
    try:
        _run(cmd, os_user, base, timeout=120)
    finally:
        pwfile.unlink(missing_ok=True)


def _pg_ctl_start(bindir: Path, base: Path, port: int, os_user: str | None) -> None:
    # Durability is pointless for a throwaway server; turning it off makes tests fast.
    options = (
        f"-c listen_addresses={HOST} -p {port} -k {shlex.quote(str(base / 'sock'))} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        "-c max_connections=500"
    )
    cmd = [
        str(bindir / "pg_ctl"),
        "-D", str(base / "data"),
        "-l", str(base / "postgres.log"),
        "-w", "-t", "60",
        "-o", options,
        "start",
    ]  # fmt: skip
    _run(cmd, os_user, base, timeout=90)


def _log_tail(base: Path) -> str:
    try:
        lines = (base / "postgres.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no server log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _port_clash(base: Path) -> bool:
    return any(marker in _log_tail(base) for marker in _PORT_CLASH_MARKERS)


def _start_on_free_port(bindir: Path, base: Path, os_user: str | None) -> int:
    """Start the server, retrying on a fresh port if ours was taken meanwhile."""
    for _ in range(START_ATTEMPTS - 1):
        port = free_port()
        try:
            _pg_ctl_start(bindir, base, port, os_user)
            return port
        except PostgresUnavailableError:
            if not _port_clash(base):
                raise
    port = free_port()
    _pg_ctl_start(bindir, base, port, os_user)
    return port


def _wait_and_create_db(server: PostgresServer) -> None:
    import psycopg  # noqa: PLC0415

    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            server.create_database(server.dbname)
            return
        except psycopg.OperationalError:
            # pg_ctl -w already waited for readiness; this only rides out
            # transient refusals (e.g. a heavily loaded CI box).
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start_postgres_server(
    base_dir: Path | None = None, os_user: str | None = None
) -> PostgresServer:
    """Initialise and start a fresh server; the caller must stop_postgres_server() it."""
    bindir = find_pg_bindir()
    if bindir is None:
        raise PostgresUnavailableError("PostgreSQL binaries (initdb, pg_ctl, postgres) not found")
    run_as = _resolve_os_user(os_user)
    base = _make_base_dir(base_dir, run_as)
    password = secrets.token_urlsafe(24)
    try:
        _initdb(bindir, base, password, run_as)
        port = _start_on_free_port(bindir, base, run_as)
        server = PostgresServer(
            HOST, port, SUPERUSER, password, DEFAULT_DBNAME, base / "data", bindir, run_as
        )
        _wait_and_create_db(server)
    except BaseException as exc:
        # Tear down even on Ctrl-C so no orphaned server keeps running.
        tail = _log_tail(base)
        _teardown(bindir, base, run_as)
        if not isinstance(exc, Exception):
            raise
        raise PostgresUnavailableError(f"{exc}\n--- server log tail ---\n{tail}") from exc
    return server


def _kill_postmaster(data_dir: Path) -> None:
    # Last resort if pg_ctl failed: SIGQUIT is postgres' immediate shutdown,
    # so no orphaned server outlives its deleted data dir.
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)
    except (OSError, ValueError, IndexError):
        pass


def _teardown(bindir: Path, base: Path, os_user: str | None) -> None:
    data = base / "data"
    if (data / "postmaster.pid").exists():
        cmd = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        try:
            _run(cmd, os_user, base, timeout=60)
        except PostgresUnavailableError:
            _kill_postmaster(data)
    shutil.rmtree(base, ignore_errors=True)


def stop_postgres_server(server: PostgresServer) -> None:
    """Stop the server immediately and delete its temp dir; safe to call twice."""
    _teardown(server.bin_dir, server.base_dir, server.os_user)


@contextmanager
def throwaway_postgres(
    base_dir: Path | None = None, os_user: str | None = None
) -> Iterator[PostgresServer]:
    """Yield a running server that is stopped and deleted on exit."""
    server = start_postgres_server(base_dir, os_user)
    try:
        yield server
    finally:
        stop_postgres_server(server)


# -- a crash of the server, and commits that survive it -------------------------------------

def pg_ctl(server: PostgresServer, *args: str) -> None:
    command = [str(server.bin_dir / "pg_ctl"), "-D", str(server.data_dir), *args]
    if server.os_user is not None:
        command = ["runuser", "-u", server.os_user, "--", *command]
    subprocess.run(command, cwd=server.base_dir, check=True, capture_output=True, timeout=90)


def stop_immediately(server: PostgresServer) -> None:
    """Kill the server as a crash would: no checkpoint, every connection cut."""
    pg_ctl(server, "-m", "immediate", "-w", "stop")


def start_again(server: PostgresServer) -> None:
    options = (f"-c listen_addresses={HOST} -p {server.port} -k {server.base_dir / 'sock'} "
               "-c fsync=off -c max_connections=200")
    pg_ctl(server, "-l", str(server.log_file), "-w", "-t", "60", "-o", options, "start")


def durable_database(server: PostgresServer, name: str = "outage") -> str:
    """A database whose commits survive an immediate stop.

    The throwaway server runs with ``synchronous_commit=off`` for speed, which lets an
    immediate stop drop commits already acknowledged; this database overrides it.
    """
    url = server.create_database(name)
    with psycopg.connect(server.url, autocommit=True) as connection:
        connection.execute(SQL("ALTER DATABASE {0} SET synchronous_commit = on")
                           .format(Identifier(name)))
    return url
