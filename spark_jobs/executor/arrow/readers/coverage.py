"""Which inputs the in-process readers take, and why not the others (the reason a step reports
when it runs on Spark instead).

Every kind (changes, append_only, snapshots, cdc) and format (Parquet, CSV, JSON lines, plain or
``.gz``/``.bz2``) is read in-process. Reader options are honoured where their effect on the Spark
path is known exactly: an option that only matters to Spark's type inference, or to values the
Spark path reads as strings anyway, changes nothing; the CSV separator is honoured; UTF-8 is the
only encoding. An option that changes how Spark splits lines, quotes, NULLs or parses dates keeps
the input on Spark, named in the reason.
"""
from __future__ import annotations

from spark_jobs.executor.sources.spark_types import declared_types
from spark_jobs.spec.model import InputSpec
from spark_jobs.spec.reader_options import ENGINE_SET

# Options with no effect on what the Spark path reads: inference only, or parsing of typed CSV
# fields (the Spark path reads CSV fields as strings and casts them itself), or quoting rules
# that only apply to the quoted fields the in-process CSV reader leaves to Spark.
_NO_EFFECT = {
    "csv": {"nanvalue", "positiveinf", "negativeinf", "locale", "timezone", "timestampntzformat",
            "enabledatetimeparsingfallback", "preferdate", "unescapedquotehandling",
            "chartoescapequoteescaping"},
    "json": {"prefersdecimal", "dropfieldifallnull"},
    "parquet": set(),
}
_UTF8 = {"utf8", "utf-8"}
_DEFAULT_FALSE = {"allowcomments", "allowunquotedfieldnames", "allownumericleadingzeros",
                  "allowbackslashescapinganycharacter", "allowunquotedcontrolchars"}
_DEFAULT_TRUE = {"allowsinglequotes", "allownonnumericnumbers"}


def _option_problem(fmt: str, key: str, value: object) -> str | None:
    name = key.lower()
    text = str(value).strip().lower()
    if name in {o.lower() for o in ENGINE_SET} or name in _NO_EFFECT.get(fmt, set()):
        return None  # the Spark path sets or ignores these too
    if name in ("encoding", "charset") and text in _UTF8:
        return None
    if fmt == "csv" and name in ("sep", "delimiter"):
        sep = "\t" if str(value) == "\\t" else str(value)
        if len(sep) == 1 and sep not in '"\\' and (sep == "\t" or not sep.isspace()):
            return None
    if fmt == "json" and (name in _DEFAULT_FALSE and text == "false" or name in _DEFAULT_TRUE and text == "true"):
        return None
    return f"reader option {key}={value!r}"


def unsupported(spec: InputSpec, timezone: str = "UTC") -> str | None:
    """Why ``spec``'s files cannot be read in-process (None: they can); ``timezone``: the
    session's, which Spark reads a timestamp string without a zone in."""
    source = spec.source
    if source is None:
        return f"input {spec.name!r} has no source"
    fmt = source.reader_format
    options = [p for p in (_option_problem(fmt, k, v) for k, v in (source.options or {}).items()) if p]
    if options:
        return f"input {spec.name!r} sets {', '.join(options)}: read by Spark"
    types = {c: t.simpleString() for c, t in declared_types(spec).items()}
    if fmt != "parquet" and timezone.upper() not in ("UTC", "Z", "GMT", "ETC/UTC", "+00:00") \
            and any(t in ("timestamp", "timestamp_ntz") for t in types.values()):
        return f"input {spec.name!r} reads timestamps from text in the session time zone {timezone}: read by Spark"
    if fmt == "json" and "binary" in types.values():
        return f"input {spec.name!r} has a binary column in JSON (base64): read by Spark"
    if spec.kind == "cdc" and source.cdc is not None:
        if source.cdc.sequence and types.get(source.cdc.sequence) in ("float", "double"):
            return f"input {spec.name!r} orders its records by a floating-point sequence: read by Spark"
        if any(types.get(k) in ("float", "double") for k in spec.key):
            return f"input {spec.name!r} has a floating-point key: its records are applied by key on Spark"
    return None
