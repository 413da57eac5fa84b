"""The Spark reader options an input's ``source.options`` may set, per format.

Spark ignores an option it does not know (a misspelt ``delimeter`` silently reads the file with
``,``), and some options change which files are read (``path``, ``basePath``,
``pathGlobFilter``, ``recursiveFileLookup``, ``modifiedBefore``) or skip bad ones
(``ignoreCorruptFiles``): the engine lists, checks and records the files itself. So only the
options below, which say how to decode a file's bytes, are accepted (names are matched without
regard to case, as Spark does). Options the engine sets itself (``ENGINE_SET``: ``header``,
``mode``, ``multiLine``, ...) are accepted for every format and have no effect: the engine's
value wins (``spark_jobs/executor/sources/formats.py``).
"""
from __future__ import annotations

from typing import Any

from .errors import did_you_mean

_COMMON = "encoding charset lineSep locale timeZone dateFormat timestampFormat timestampNTZFormat " \
          "enableDateTimeParsingFallback"
ALLOWED: dict[str, tuple[str, ...]] = {
    "csv": tuple(f"""{_COMMON} sep delimiter quote escape comment nullValue emptyValue nanValue
        positiveInf negativeInf ignoreLeadingWhiteSpace ignoreTrailingWhiteSpace
        charToEscapeQuoteEscaping unescapedQuoteHandling maxColumns maxCharsPerColumn
        preferDate""".split()),
    "json": tuple(f"""{_COMMON} allowComments allowUnquotedFieldNames allowSingleQuotes
        allowNumericLeadingZeros allowBackslashEscapingAnyCharacter allowUnquotedControlChars
        allowNonNumericNumbers prefersDecimal dropFieldIfAllNull""".split()),
    "parquet": ("datetimeRebaseMode", "int96RebaseMode"),
}
ENGINE_SET = ("header", "mode", "columnNameOfCorruptRecord", "enforceSchema", "inferSchema", "multiLine",
              "mergeSchema")


def option_problems(fmt: str, options: dict[str, Any]) -> list[tuple[str, str]]:
    """(option, message) for every option ``fmt`` does not accept or whose value is not a scalar."""
    allowed = ALLOWED.get(fmt)
    if allowed is None:
        return []  # an unknown format is the schema's to report
    allowed = allowed + ENGINE_SET
    by_lower = {name.lower(): name for name in allowed}
    problems = []
    for key, value in options.items():
        if key.lower() not in by_lower:
            problems.append((key, f"reader option '{key}' is not accepted for format {fmt}; allowed: "
                                  f"{', '.join(allowed)}{did_you_mean(key, allowed)} (options that choose "
                                  f"or skip files, and those the engine sets, are refused)"))
        elif not isinstance(value, (str, int, float, bool)):
            problems.append((key, f"reader option '{key}' must be a string, number or true/false"))
    return problems
