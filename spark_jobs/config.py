"""Configuration profiles (`config/<profile>.yaml`): Spark settings and the data root.

A profile is plain YAML; switching local -> cluster is a change of profile, never of code.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.policy import ExecutionPolicy, policy_from_profile
from spark_jobs.spec.loader import read_yaml
from spark_jobs.spec.paths import ALLOWED_ROOTS_KEY, STATE_DIR, VIEWS_DIR
from spark_jobs.spec.time import RetentionSettings, retention_settings
from spark_jobs.spec.yaml_limits import read_text

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PROJECT_ROOT / "config" / "local.yaml"
REMOTE_ENV = "DBSP_SPARK_REMOTE"  # overrides spark.remote (e.g. a Connect server on another port)


@dataclass(frozen=True)
class SparkSettings:
    mode: str = "local"  # local | connect | cluster
    master: str = "local[2]"
    remote: str | None = None  # sc://host:port for Spark Connect
    app_name: str = "dbsp"
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ViewsSettings:
    """Where and whether views are published as Delta tables after each commit (`views:`)."""

    root: str | None = None  # None: <data_root>/views
    enabled: bool = True
    storage_options: dict[str, str] = field(default_factory=dict)  # for deltalake (object stores)


@dataclass(frozen=True)
class Config:
    profile: str
    spark: SparkSettings
    data_root: str
    circuits_dir: str
    policy: ExecutionPolicy = field(default_factory=ExecutionPolicy)  # execution: and state: sections
    raw: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    state_root: str | None = None  # None: <data_root>/_dbsp
    views: ViewsSettings = field(default_factory=ViewsSettings)
    allowed_input_roots: tuple[str, ...] = ()  # inputs.allowed_roots: outside roots inputs may read
    retention: RetentionSettings = field(default_factory=RetentionSettings)  # state.retention defaults
    # connections: name -> libpq URI without a password (PGPASSWORD or ~/.pgpass supply it)
    connections: dict[str, str] = field(default_factory=dict)

    def with_data_root(self, data_root: str | None) -> "Config":
        """The same profile on another data root (an explicit ``state_root`` stays)."""
        return self if not data_root else replace(self, data_root=data_root)

    @property
    def compact_fraction(self) -> float:
        return self.policy.state.compact_fraction

    @property
    def keep_timesteps(self) -> int:
        return self.policy.state.keep_timesteps

    @property
    def session_timezone(self) -> str:
        """Spark's session time zone (``spark.conf``'s ``spark.sql.session.timeZone``), which an
        in-process step evaluates date and timestamp expressions in; UTC when the profile does
        not set it (every shipped profile does)."""
        return self.spark.conf.get("spark.sql.session.timeZone") or "UTC"

    def with_policy(self, policy: ExecutionPolicy) -> "Config":
        """The same profile with another execution policy (tests and the benchmark)."""
        return replace(self, policy=policy)

    @property
    def resolved_state_root(self) -> str:
        """Where every circuit's state store lives: ``state_root``, else ``<data_root>/_dbsp``."""
        return self.state_root or self.data_root.rstrip("/") + "/" + STATE_DIR

    @property
    def resolved_views_root(self) -> str:
        """Where published tables live: ``views.root``, else ``<data_root>/views``."""
        return self.views.root or self.data_root.rstrip("/") + "/" + VIEWS_DIR


def _resolve(path: str, base: Path) -> str:
    """Relative paths in a profile are relative to the project root; URIs stay as they are."""
    if "://" in path or os.path.isabs(path):
        return path
    return str((base / path).resolve())


def load_config(path: str | os.PathLike[str] | None = None, data_root: str | None = None) -> Config:
    """Load a profile. ``path`` defaults to $DBSP_CONFIG, then config/local.yaml.

    A bare profile name (``cluster``) means ``config/cluster.yaml``.
    """
    chosen = str(path or os.environ.get("DBSP_CONFIG") or DEFAULT_CONFIG)
    if not chosen.endswith((".yaml", ".yml")) and os.sep not in chosen:
        chosen = str(PROJECT_ROOT / "config" / f"{chosen}.yaml")
    raw = read_profile(chosen)
    try:
        return _config(raw, chosen, data_root)
    except (ValueError, TypeError, AttributeError) as exc:  # a value of the wrong shape deeper down
        raise ProfileError(f"{chosen}: {exc}") from None


class ProfileError(DbspError, ValueError):
    """A profile that cannot be used: the message names the file (and line) and what was expected."""
    exit_code = EXIT_FAILED


_SECTIONS = ("spark", "state", "views", "inputs", "execution", "connections")  # the profile keys that hold mappings


def read_profile(path: str) -> dict[str, Any]:
    """A profile's settings, read as safely as a circuit (bounded size, nesting and aliases, no
    tags); a missing file stays a ``FileNotFoundError``, anything else is a ``ProfileError``."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ProfileError(f"cannot read the profile {path}: {exc}") from None
    doc = read_yaml(text, path)
    if doc.problems:
        raise ProfileError("; ".join(str(p) for p in doc.problems))
    raw = doc.data if doc.data is not None else {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}:1: a profile is a mapping of settings (data_root, spark, state, ...); "
                           f"got a {type(raw).__name__}")
    for key in _SECTIONS:
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise ProfileError(f"{path}:{doc.line((key,))}: '{key}' must be a mapping; got {raw[key]!r}")
    conf = (raw.get("spark") or {}).get("conf")
    if conf is not None and not isinstance(conf, dict):
        raise ProfileError(f"{path}:{doc.line(('spark', 'conf'))}: 'spark.conf' must be a mapping of Spark "
                           f"settings; got {conf!r}")
    return raw


def _config(raw: dict[str, Any], chosen: str, data_root: str | None) -> Config:
    spark_raw = raw.get("spark") or {}
    spark = SparkSettings(
        mode=str(spark_raw.get("mode", "local")),
        master=str(spark_raw.get("master", "local[2]")),
        remote=os.environ.get(REMOTE_ENV) or spark_raw.get("remote"),
        app_name=str(spark_raw.get("app_name", "dbsp")),
        conf={str(k): str(v) for k, v in (spark_raw.get("conf") or {}).items()},
    )
    root = data_root or os.environ.get("DBSP_DATA_ROOT") or str(raw.get("data_root", "data"))
    return Config(
        profile=str(raw.get("profile", Path(chosen).stem)),
        spark=spark,
        data_root=_resolve(root, Path.cwd() if data_root else PROJECT_ROOT),
        circuits_dir=_resolve(str(raw.get("circuits_dir", "circuits")), PROJECT_ROOT),
        policy=policy_from_profile(raw),
        raw=raw,
        path=chosen,
        state_root=_state_root(raw),
        views=_views(raw),
        allowed_input_roots=_allowed_roots(raw),
        retention=_retention(raw.get("state") or {}),
        connections=_connections(raw.get("connections") or {}),
    )


def _connections(raw: dict[str, Any]) -> dict[str, str]:
    """``connections:`` of a profile: name -> a libpq URI or key=value string (DESIGN's
    ``{NAME: URI}``). A password in it is accepted, though ``PGPASSWORD``, ``~/.pgpass`` or
    ``DBSP_CONN_<NAME>`` keep it out of a file people commit; it is never printed (messages
    name a connection by ``connections.describe`` and pass server errors through ``redact``)."""
    out = {}
    for name, value in raw.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"connections.{name} must be a connection string (postgresql://user@host:5432/db); "
                             f"got <{type(value).__name__}>")
        out[str(name)] = value.strip()
    return out


def _retention(state: dict[str, Any]) -> RetentionSettings:
    """``state.retention`` of a profile: the defaults of every circuit's ``settings.retention``."""
    settings, problems = retention_settings(state.get("retention"))
    if problems:
        raise ValueError("state.retention: " + "; ".join(message for _, message in problems))
    return settings


def _views(raw: dict[str, Any]) -> ViewsSettings:
    """The profile's ``views:`` block ($DBSP_VIEWS_ROOT wins for the root)."""
    views = raw.get("views") or {}
    if not isinstance(views, dict):
        raise ValueError(f"profile key 'views' must be a mapping (root, enabled, storage_options); got {views!r}")
    root = os.environ.get("DBSP_VIEWS_ROOT") or views.get("root")
    enabled = views.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"profile key 'views.enabled' must be true or false; got {enabled!r}")
    return ViewsSettings(root=_resolve(str(root), PROJECT_ROOT).rstrip("/") if root else None, enabled=enabled,
                         storage_options={str(k): str(v) for k, v in (views.get("storage_options") or {}).items()})


def _allowed_roots(raw: dict[str, Any]) -> tuple[str, ...]:
    """``inputs.allowed_roots``: folders or URIs outside the data root that a circuit's input
    paths may name (absolute). Empty by default: inputs stay inside the data root."""
    roots = (raw.get("inputs") or {}).get("allowed_roots") or []
    if isinstance(roots, str) or not isinstance(roots, list):
        raise ValueError(f"{ALLOWED_ROOTS_KEY} must be a list of absolute paths or URIs, got {roots!r}")
    return tuple(_resolve(str(r), PROJECT_ROOT).rstrip("/") or "/" for r in roots)


def _state_root(raw: dict[str, Any]) -> str | None:
    """``state_root`` of the profile ($DBSP_STATE_ROOT wins); None means under the data root."""
    root = os.environ.get("DBSP_STATE_ROOT") or raw.get("state_root")
    return _resolve(str(root), PROJECT_ROOT).rstrip("/") if root else None
