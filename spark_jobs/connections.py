"""Layer 2, connections: where a PostgreSQL source or sink connects (``connection: NAME``), and how a password stays out of
every log, manifest and message.

A circuit names a connection, never its settings: the settings are looked up, in this order,

1. ``DBSP_CONN_<NAME>``: a libpq URI or key=value string (the CLI and local runs);
2. inside an Airflow task, the Airflow connection ``NAME`` (``BaseHook.get_connection``), so a
   DAG run uses the connection registered in Airflow (`make airflow` documents how);
3. ``AIRFLOW_CONN_<NAME>``: Airflow's own environment form of a connection (a URI);
4. the profile's ``connections: {NAME: postgresql://user@host:5432/db}`` (a password may be in
   it; better left to libpq's PGPASSWORD or ~/.pgpass, which it reads when the URI has none).

``NAME`` is upper-cased for the environment, ``-`` and ``.`` read as ``_``. A message about a
connection names it and its host, port, database and user (``describe``), never the password;
``redact`` removes one from any text that may carry a URI.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from spark_jobs.errors import DbspError, EXIT_REFUSED


class NoConnection(DbspError):
    """A circuit names a connection that is not configured anywhere."""
    exit_code = EXIT_REFUSED
    retryable = False


def env_name(name: str, prefix: str = "DBSP_CONN_") -> str:
    return prefix + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _airflow(name: str) -> str | None:
    if not os.environ.get("AIRFLOW_CTX_DAG_ID"):  # only inside a running task: the CLI never asks Airflow
        return None
    try:
        try:
            from airflow.sdk.bases.hook import BaseHook
        except ImportError:  # Airflow 2
            from airflow.hooks.base import BaseHook

        conn = BaseHook.get_connection(name)
    except Exception:  # noqa: BLE001 - not registered (or no Airflow here): the caller says what to set
        return None
    uri = conn.get_uri()
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", uri)


_PROFILE: dict[str, str] = {}  # the open profile's ``connections:`` (``use_profile``)


def use_profile(connections: dict[str, str]) -> None:
    """Make a profile's ``connections:`` the last place ``resolve`` looks."""
    _PROFILE.clear()
    _PROFILE.update(connections)


def _uri(value: str) -> str:
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", value.strip())


def resolve(name: str) -> str:
    """The connection string of ``name``; ``NoConnection`` saying where it was looked for."""
    value = os.environ.get(env_name(name))
    if value:
        return _uri(value)
    found = _airflow(name)  # inside a DAG run's task: the Airflow connection
    if found:
        return found
    value = os.environ.get(env_name(name, "AIRFLOW_CONN_"))
    if value and "://" in value:  # Airflow's JSON form is Airflow's to read (above, in a task)
        return _uri(value)
    if name in _PROFILE:
        return _uri(_PROFILE[name])
    raise NoConnection(f"connection {name!r} is not configured: set {env_name(name)} to its URI "
                       f"(postgresql://user:password@host:port/db), register an Airflow connection "
                       f"{name!r} (or set {env_name(name, 'AIRFLOW_CONN_')}), or add it to the profile's "
                       f"connections:")


def describe(conninfo: str) -> str:
    """host:port/db as user, without the password (for messages)."""
    if "://" in conninfo:
        parts = urlsplit(conninfo)
        user = f" as {parts.username}" if parts.username else ""
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}{user}"
    fields = dict(re.findall(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", conninfo))
    return (f"{fields.get('host', 'localhost')}:{fields.get('port', 5432)}/{fields.get('dbname', '')}"
            + (f" as {fields['user']}" if "user" in fields else ""))


_URI_PASSWORD = re.compile(r"(://[^:/@\s]+:)([^@\s]+)(@)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every password removed: in URIs, ``password=`` fields, and each of ``secrets``."""
    text = _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***\3", text))
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def password_of(conninfo: str) -> str:
    """The password of a connection string ('' if none), for ``redact``."""
    if "://" in conninfo:
        from urllib.parse import unquote

        return unquote(urlsplit(conninfo).password or "")
    found = _KV_PASSWORD.search(conninfo)
    return found.group(2).strip("'") if found else ""
