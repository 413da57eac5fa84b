"""The pinned Great Expectations' expectations as data: names, arguments and argument types.

Validation (``spark_jobs/spec/expectation_rules.py``) checks every declared expectation against
this catalog without importing GE (seconds). The catalog is generated from the installed GE's
classes and kept in ``spark_jobs/spec/ge_catalog.json``; ``tests/test_expectation_rules.py``
regenerates it and fails when it differs (a GE upgrade), so the file never drifts:

    python -m spark_jobs.quality.catalog > spark_jobs/spec/ge_catalog.json

Each argument's pydantic annotation becomes a list of value kinds: ``column`` (a column name),
``columns`` (a list of them), ``string``, ``strings``, ``number`` (with GE's bounds, e.g.
``mostly`` in [0, 1]), ``integer``, ``boolean``, ``null``, ``date`` (an ISO date or timestamp
string), ``list``, ``dict``, or ``enum`` with its values. A ``dict`` that GE accepts beside
another kind is a suite parameter (``{"$PARAMETER": ...}``), which a circuit cannot supply: left out.
"""
from __future__ import annotations

import datetime
import enum
import json
import sys
import typing
from typing import Any

from spark_jobs.quality.expectations import _registry

_COLUMN_FIELDS = ("column", "column_A", "column_B")
_COLUMNS_FIELDS = ("column_list", "column_set")


def _kinds(name: str, annotation: Any) -> tuple[list[str], dict[str, Any]]:
    """(value kinds, extra constraints) of one argument's annotation."""
    if name in _COLUMN_FIELDS:
        return ["column"], {}
    if name in _COLUMNS_FIELDS:
        return ["columns"], {}
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(name, typing.get_args(annotation)[0])
    if origin is typing.Union:
        members = typing.get_args(annotation)
        kinds: list[str] = []
        extra: dict[str, Any] = {}
        for m in members:
            k, e = _kinds(name, m)
            kinds += [x for x in k if x not in kinds]
            extra.update(e)
        if "dict" in kinds and any(k not in ("dict", "null") for k in kinds):  # a suite parameter, never a value
            kinds.remove("dict")
        return kinds, extra
    if origin is typing.Literal:
        return ["enum"], {"values": list(typing.get_args(annotation))}
    if origin in (list, tuple, set, typing.Sequence) or annotation in (list, tuple, set):
        args = typing.get_args(annotation)
        return (["strings"] if args and args[0] in (str,) or (args and "StrictStr" in str(args[0])) else ["list"]), {}
    if annotation is type(None):
        return ["null"], {}
    if annotation is bool:
        return ["boolean"], {}
    if annotation is int:
        return ["integer"], {}
    if annotation is float:
        return ["number"], {}
    if isinstance(annotation, type) and issubclass(annotation, float):  # pydantic's confloat
        extra = {k: getattr(annotation, k) for k in ("ge", "le", "gt", "lt") if getattr(annotation, k, None) is not None}
        return ["number"], extra
    if annotation in (datetime.date, datetime.datetime):
        return ["date"], {}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ["enum"], {"values": [m.value for m in annotation]}
    if annotation is str or (isinstance(annotation, type) and issubclass(annotation, str)):
        return ["string"], {}
    if annotation is dict:
        return ["dict"], {}
    if isinstance(annotation, type) and hasattr(annotation, "__fields__"):  # a pydantic model (QuantileRange)
        return ["dict"], {}
    return ["other"], {}


def _kind_of(cls: type) -> str:
    from great_expectations.expectations.expectation import (ColumnAggregateExpectation, ColumnMapExpectation,
                                                             ColumnPairMapExpectation, MulticolumnMapExpectation)

    for base, label in ((ColumnMapExpectation, "column_map"), (ColumnPairMapExpectation, "column_pair_map"),
                        (MulticolumnMapExpectation, "multicolumn_map"), (ColumnAggregateExpectation, "column_aggregate")):
        if issubclass(cls, base):
            return label
    return "table"


def catalog_from_ge() -> dict[str, Any]:
    """Every expectation of the installed GE: its kind and its arguments."""
    import great_expectations as gx

    out: dict[str, Any] = {}
    for name, cls in sorted(_registry().items()):
        args = {}
        for field_name, info in sorted(cls.__fields__.items()):
            kinds, extra = _kinds(field_name, info.outer_type_ if field_name in ("row_condition",) else info.annotation)
            if field_name == "row_condition":
                kinds = ["string"]  # a Spark SQL condition: the only form a circuit may use
            args[field_name] = {"kinds": kinds, "required": bool(info.required), **extra}
        out[name] = {"kind": _kind_of(cls), "args": args}
    return {"great_expectations": gx.__version__, "expectations": out}


def main() -> None:
    json.dump(catalog_from_ge(), sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
