"""A throwaway local PostgreSQL server with logical replication on, for tests and trying things out.

Why our own: a PostgreSQL input reads a logical replication slot, so its tests need a real server
with ``wal_level=logical``, and CI starts from a clean machine. The server binaries come from the
pinned ``pgserver`` wheel in ``requirements.lock`` (PostgreSQL 16 with ``pgoutput``), so
``make install`` brings them; ``DBSP_PG_BIN`` or Debian's ``/usr/lib/postgresql/*/bin`` are used
instead when set or when the wheel is absent. The server listens on 127.0.0.1 on a free port,
keeps its data in a fresh temporary folder, and asks for a password over TCP (SCRAM), so the
"no password in logs" rules are tested against a real one. PostgreSQL refuses to run as root:
as root it runs as ``nobody``.

    python -m spark_jobs.local_postgres start     # prints the connection URI (with its password)
    python -m spark_jobs.local_postgres stop DIR
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.errors import DbspError, EXIT_FAILED

BIN_ENV = "DBSP_PG_BIN"
USER = "dbsp"
DATABASE = "postgres"
# max_replication_slots: one slot per circuit a test module starts (each input keeps its own)
SETTINGS = {"wal_level": "logical", "max_replication_slots": "64", "max_wal_senders": "20",
            "listen_addresses": "'127.0.0.1'", "fsync": "off",
            "full_page_writes": "off", "shared_buffers": "32MB", "max_connections": "40"}


class NoServer(DbspError, RuntimeError):
    """No PostgreSQL server could be started here (the message says why)."""
    exit_code = EXIT_FAILED


def server_bin() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: ``$DBSP_PG_BIN``, the pgserver
    wheel's, or Debian's newest; None when there is none."""
    found = []
    if os.environ.get(BIN_ENV):
        found.append(Path(os.environ[BIN_ENV]))
    spec = importlib.util.find_spec("pgserver")  # found, not imported: its import writes to a runtime dir
    if spec is not None and spec.submodule_search_locations:
        found.append(Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin")
    found += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in found:
        if all((folder / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


@dataclass
class LocalPostgres:
    """A running server: where it keeps its data, and how to connect."""

    run_dir: str
    port: int
    password: str
    bin: str

    @property
    def uri(self) -> str:
        """The connection URI, password included: hand it over, never print it into a log."""
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        stop(self.run_dir, self.bin)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> dict:
    """subprocess arguments that run a command as a non-root user when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "nobody", "group": "nogroup" if _group_exists("nogroup") else "nobody"}


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _run(args: list[str], timeout: float, **kwargs) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        raise NoServer(f"{Path(args[0]).name} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")


def _reachable_by_others(path: Path) -> bool:
    """Can a user other than the owner reach and run ``path`` (every folder above it o+x)?"""
    p = path.resolve()
    for part in [p, *p.parents]:
        if not part.stat().st_mode & stat.S_IXOTH:
            return False
    return True


def _runnable(folder: Path) -> Path:
    """``folder``, or as root (the server runs as ``nobody``) a copy of its installation in a
    world-readable temporary folder when ``nobody`` cannot reach it (a clone under /root)."""
    if os.geteuid() != 0 or _reachable_by_others(folder / "postgres"):
        return folder
    # the wheel's binaries find their libraries at $ORIGIN/../../../pgserver.libs: copy the
    # folder three levels up from bin/ with the layout below it (site-packages/{pgserver,pgserver.libs})
    install, top = folder.parent, folder.parent.parent.parent
    rel = install.relative_to(top)
    digest = hashlib.sha256(str(install.resolve()).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"dbsp-pg-install-{digest}"
    if not (copy / rel / "bin" / "postgres").is_file():
        partial = Path(tempfile.mkdtemp(prefix="dbsp-pg-install-"))
        os.chmod(partial, 0o755)
        shutil.copytree(install, partial / "i" / rel, symlinks=True)
        libs = top / (rel.parts[0] + ".libs")
        if libs.is_dir():
            shutil.copytree(libs, partial / "i" / libs.name, symlinks=True)
        for d in [partial / "i", *(partial / "i" / rel).parents]:
            if d.is_dir():
                os.chmod(d, 0o755)
        try:
            os.rename(partial / "i", copy)
        except OSError:  # another process copied it first
            pass
        shutil.rmtree(partial, ignore_errors=True)
    return copy / rel / "bin"


def start(run_dir: str | None = None, timeout: float = 90) -> LocalPostgres:
    """Initialise and start a server in ``run_dir`` (a new temporary folder by default)."""
    folder = server_bin()
    if folder is None:
        raise NoServer("no PostgreSQL server binaries: install the pinned `pgserver` wheel (make install), "
                       f"Debian's postgresql package, or point {BIN_ENV} at a folder with initdb and postgres")
    folder = _runnable(folder)
    run = Path(run_dir or tempfile.mkdtemp(prefix="dbsp-pg-"))
    run.mkdir(parents=True, exist_ok=True)
    data, sock = run / "data", run / "sock"
    sock.mkdir(exist_ok=True)
    password = secrets.token_urlsafe(16)
    pwfile = run / "pw"
    pwfile.write_text(password + "\n")
    who = _as_server_user()
    if who:  # the server's user must own its folders and reach them
        os.chmod(run, 0o755)
        for p in (run, sock, pwfile):
            shutil.chown(p, who["user"], who["group"])
    port = _free_port()
    _run([str(folder / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(pwfile), "--auth-local=trust",
          "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"], timeout, **who)
    pwfile.unlink()
    with open(data / "postgresql.conf", "a", encoding="utf-8") as fh:
        fh.writelines(f"{k} = {v}\n" for k, v in {**SETTINGS, "port": str(port),
                                                   "unix_socket_directories": f"'{sock}'"}.items())
    _run([str(folder / "pg_ctl"), "-D", str(data), "-l", str(run / "server.log"), "-w", "-t", str(int(timeout)),
          "start"], timeout + 10, **who)
    (run / "port").write_text(str(port))
    (run / "bin").write_text(str(folder))
    return LocalPostgres(str(run), port, password, str(folder))


def stop(run_dir: str, bin_dir: str | None = None, timeout: float = 60) -> None:
    """Stop the server of ``run_dir`` (fast shutdown) and remove its folder."""
    run = Path(run_dir)
    folder = bin_dir or ((run / "bin").read_text().strip() if (run / "bin").exists() else None)
    if folder and (run / "data" / "postmaster.pid").exists():
        subprocess.run([str(Path(folder) / "pg_ctl"), "-D", str(run / "data"), "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=timeout, **_as_server_user())
    shutil.rmtree(run, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_jobs.local_postgres", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("start", help="start a server; prints its folder and connection URI")
    p.add_argument("--dir", help="the server's folder (default: a new temporary one)")
    p = sub.add_parser("stop", help="stop the server of a folder and remove the folder")
    p.add_argument("dir")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "start":
            server = start(args.dir)
            print(server.run_dir)
            print(server.uri)
        else:
            stop(args.dir)
    except NoServer as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
