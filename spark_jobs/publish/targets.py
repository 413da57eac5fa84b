"""Which views are published, and where: one Delta table per output of a circuit.

Default location ``<views root>/<circuit>/<view>``; the profile sets the root (``views.root``,
default ``<data_root>/views``) and may switch publishing off (``views.enabled``); a circuit may
move one view (``outputs.<view>.publish.path``, relative to the root: a circuit cannot write
outside it) or switch it off (``publish: false``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from spark_jobs.config import Config
from spark_jobs.spec.keys import publish_location
from spark_jobs.spec.model import CircuitSpec

# deltalake (object_store) names some stores differently from Hadoop
_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


@dataclass(frozen=True)
class Target:
    """One published table."""

    circuit: str
    view: str
    uri: str  # a local path or an object store URI, as deltalake takes it
    key: tuple[str, ...] = ()  # MERGE by this key; () = the view as a bag of rows
    storage_options: dict[str, str] = field(default_factory=dict)
    root: str = ""  # the views root the table is under (ownership.py checks the place against it)

    @property
    def app_id(self) -> str:
        """The Delta transaction id under which this circuit's view records its timesteps."""
        return f"dbsp:{self.circuit}/{self.view}"


def deltalake_uri(path: str) -> str:
    """``path`` as deltalake addresses it: plain absolute paths, ``s3://`` for ``s3a://``."""
    if "://" not in path:
        return os.path.abspath(path[len("file:"):] if path.startswith("file:") else path)
    scheme, rest = path.split("://", 1)
    return f"{_SCHEMES.get(scheme.lower(), scheme)}://{rest}".rstrip("/")


def targets(config: Config, spec: CircuitSpec) -> list[Target]:
    """The tables the circuit's views are published to (none when the profile switches it off)."""
    if not config.views.enabled:
        return []
    root = config.resolved_views_root.rstrip("/")
    out = []
    for view, output in spec.outputs.items():
        if not output.publish.enabled:
            continue
        rel = publish_location(spec.name, view, output.publish.path)
        out.append(Target(spec.name, view, deltalake_uri(f"{root}/{rel}"), tuple(output.key),
                          dict(config.views.storage_options), deltalake_uri(root)))
    return out
