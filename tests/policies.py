"""Execution policies for tests: the profile's, with a few thresholds changed (never a patched module)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from spark_jobs.config import Config, load_config
from spark_jobs.policy import ExecutionPolicy


def policy(**sections: dict[str, Any] | Any) -> ExecutionPolicy:
    """The default policy with fields changed: ``policy(engine="arrow", state={"sort_min_rows": 0})``
    (a mapping changes fields of that section)."""
    base = ExecutionPolicy()
    changes = {name: replace(getattr(base, name), **value) if isinstance(value, dict) else value
               for name, value in sections.items()}
    return replace(base, **changes)


def config(data_root: Any, **sections: dict[str, Any] | Any) -> Config:
    """The default profile on ``data_root`` with ``policy(**sections)``."""
    return load_config(data_root=str(data_root)).with_policy(policy(**sections))


def sorted_small(data_root: Any, **sections: Any) -> Config:
    """Traces this small are compacted into sorted files anyway, so sorted lookups get tested."""
    state = {"sort_min_rows": 0, **sections.pop("state", {})}
    return config(data_root, state=state, **sections)


def make_input_folders(rt) -> None:
    """Create every input folder of an opened circuit: a step refuses an input whose folder does
    not exist (a misspelt path must not read as "no changes"); an empty folder is no change. For
    tests whose circuits step before every input has received a file."""
    import os

    for spec in rt.compiled.spec.inputs.values():
        if spec.source is not None and not os.path.isabs(spec.source.path) and "://" not in spec.source.path:
            os.makedirs(os.path.join(str(rt.config.data_root), spec.source.path), exist_ok=True)
