"""JSON lines read in-process, value for value as the Spark path reads them (``formats.plan_json``).

Spark reads each line that is not blank (``trim``: spaces only) with ``from_json`` (Jackson, with
Spark's reader options: single-quoted strings and ``NaN``/``Infinity`` allowed; a value of the
wrong JSON type, a number that does not fit, a syntax error: the line is corrupt, and the values
that did convert are kept, as Spark's partial results are) and lists its keys with
``json_object_keys`` (a stricter parser: no ``NaN``, control characters allowed in strings), which
the check of unexpected keys reads. Each JSON value becomes the declared type as Spark's
``JacksonParser`` converts it (``convert``): numbers by their exact text, strings for dates and
timestamps by Spark's own string grammar (``text_values``), then its legacy fallbacks.

What Python's ``json`` module cannot tell apart from Jackson's reading raises ``NotLocal`` and
the step runs on Spark: single quotes, ``+INF`` and the like, a byte-order mark inside the file,
very deep nesting, a number longer than Jackson reads, a fraction, object or array read into a
string column (Jackson writes its own text of it).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from spark_jobs.executor.arrow.compiler import decimals
from spark_jobs.executor.arrow.compiler.sql_types import INTEGRAL_BOUNDS, SparkType
from spark_jobs.executor.engine import NotLocal
from spark_jobs.errors import DbspError

from . import text_values as tv

MAX_NUMBER_CHARS = 1000  # Jackson's StreamReadConstraints.maxNumberLength
MAX_DEPTH = 500  # well inside both Jackson's limit (1000) and Python's recursion limit
GREGORIAN_START_DAY = -141427  # 1582-10-15: day numbers before it are rebased from the Julian calendar
_INTEGRAL = {**INTEGRAL_BOUNDS, "tinyint": (-128, 255)}  # Jackson's getByteValue takes 128..255 as unsigned
_SPECIAL_STRINGS = {"NaN": math.nan, "+INF": math.inf, "+Infinity": math.inf, "Infinity": math.inf,
                    "-INF": -math.inf, "-Infinity": -math.inf}


class Failed(DbspError):
    """A JSON value Spark's reader cannot convert to its column's type: the line is corrupt
    (internal: the reader turns it into the file's refusal)."""


class Number(str):
    """A JSON number token, kept as its text (``integer`` says which token it was)."""

    integer = False


class Integer(Number):
    integer = True


class Constant(Number):
    """``NaN``, ``Infinity``, ``-Infinity`` written bare (Jackson's non-numeric numbers)."""


class Pairs(list):
    """A JSON object as its (key, value) pairs in order, duplicates kept (each is converted)."""

    def keys(self) -> list[str]:
        return [k for k, _ in self]

    def get(self, key: str, default: Any = None) -> Any:
        found = default
        for k, v in self:
            if k == key:
                found = v
        return found


def _number(cls: type) -> Callable[[str], Number]:
    def make(text: str) -> Number:
        if len(text) > MAX_NUMBER_CHARS:
            raise NotLocal(f"a JSON number of {len(text)} digits: past Jackson's limit, read by Spark")
        return cls(text)
    return make


def _decoder(strict: bool, checked: bool = True) -> json.JSONDecoder:
    """Python's JSON parser keeping every number's text (``checked``: Jackson's length limit)."""
    number, integer = (_number(Number), _number(Integer)) if checked else (Number, Integer)
    return json.JSONDecoder(object_pairs_hook=Pairs, parse_float=number, parse_int=integer,
                            parse_constant=Constant, strict=strict)


# a line of at most MAX_NUMBER_CHARS characters cannot hold a number past the limit
_SHORT, _STRICT, _LENIENT = _decoder(True, checked=False), _decoder(True), _decoder(False)


@dataclass
class Line:
    """One line as Spark's two parsers see it: the value ``from_json`` reads (None: corrupt), the
    top-level keys ``json_object_keys`` lists (None: not an object to it), and ``empty``: JSON
    whitespace only (``from_json`` gives a NULL row, which Spark reads as a row of NULLs)."""

    value: Pairs | None
    keys: list[str] | None
    empty: bool = False


def _has_constant(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        raise NotLocal("a JSON line nested deeper than the in-process reader follows")
    if isinstance(value, Constant):
        return True
    if isinstance(value, Pairs):
        return any(_has_constant(v, depth + 1) for _, v in value)
    if isinstance(value, list):
        return any(_has_constant(v, depth + 1) for v in value)
    return False


def parse_line(line: str, where: str) -> Line:
    """How Spark's JSON reader sees one non-blank line (``where`` names it in a ``NotLocal``).
    Both of Spark's parsers read the first JSON value of a line and ignore what follows it."""
    if line.startswith("\ufeff"):
        raise NotLocal(f"{where} starts with a byte-order mark: Spark's JSON parser reads it")
    if line.count("[") + line.count("{") > MAX_DEPTH:
        raise NotLocal(f"{where} nests JSON deeper than the in-process reader follows")
    stripped = line.strip(" \t\n\r")
    if not stripped:
        return Line(None, None, empty=True)
    try:
        value, _ = (_SHORT if len(stripped) <= MAX_NUMBER_CHARS else _STRICT).raw_decode(stripped)
    except json.JSONDecodeError:
        return _unparsed(stripped, where)
    except RecursionError:
        raise NotLocal(f"{where} nests JSON deeper than the in-process reader follows") from None
    if not isinstance(value, Pairs):
        return Line(None, None)
    constants = ("NaN" in stripped or "Infinity" in stripped) and _has_constant(value)
    return Line(value, None if constants else value.keys())


def _unparsed(stripped: str, where: str) -> Line:
    """A line Python's strict parser refuses: corrupt for Spark too, unless it uses what only
    Jackson reads (then ``NotLocal``); keys from the lenient parse ``json_object_keys`` does
    (control characters allowed in strings)."""
    if "'" in stripped or "INF" in stripped or "+Infinity" in stripped:
        raise NotLocal(f"{where} may use JSON that only Spark's parser reads (single quotes, +INF)")
    try:
        lenient, _ = _LENIENT.raw_decode(stripped)
    except (json.JSONDecodeError, RecursionError):
        return Line(None, None)
    keys = lenient.keys() if isinstance(lenient, Pairs) and not _has_constant(lenient) else None
    return Line(None, keys)


# ---- values -----------------------------------------------------------------------------------

def _surrogates_replaced(s: str) -> str:
    """A Java string's UTF-8 bytes: a lone surrogate becomes '?'."""
    return s.encode("utf-8", "replace").decode("utf-8") if any(0xD800 <= ord(c) <= 0xDFFF for c in s) else s


def _text(value: Any) -> str:
    """A non-string JSON value read into a string column: the text Jackson copies."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Integer):
        return str(int(value))
    raise NotLocal("a JSON fraction, object or array read into a string column: Spark writes its own text of it")


def _exact(value: Number) -> Fraction:
    return Fraction(int(value)) if value.integer else Fraction(value)


def converter(t: SparkType) -> Callable[[Any], Any]:
    """The value Spark's JSON reader gives a (non-null) JSON value in a column of type ``t``, as
    ``records`` stores it; ``Failed`` where it cannot convert it."""
    if t.name == "string":
        return lambda v: _surrogates_replaced(v) if _plain_string(v) else _text(v)
    if t.is_integral:
        return lambda v: _integral(v, _INTEGRAL[t.name], t.name == "tinyint")
    if t.is_decimal:
        return lambda v: _decimal(v, t.precision, t.scale)
    simple = {"boolean": _boolean, "double": _double, "float": _float, "date": _date, "timestamp": _timestamp,
              "timestamp_ntz": _timestamp_ntz}.get(t.name)
    if simple is None:
        raise NotLocal(f"a JSON column of type {t} is read by Spark")
    return simple


def struct_converter(fields: dict[str, SparkType]) -> Callable[[Any], Any]:
    """The converter of a JSON object read as a struct of ``fields`` (a Debezium ``after``)."""
    convert = {name: converter(t) for name, t in fields.items()}
    return lambda v: _struct(v, convert)


def _plain_string(v: Any) -> bool:
    return isinstance(v, str) and not isinstance(v, Number)


def _boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise Failed


def _integral(v: Any, bounds: tuple[int, int], byte: bool) -> int:
    if not isinstance(v, Integer):
        raise Failed
    n = int(v)
    if not bounds[0] <= n <= bounds[1]:
        raise Failed
    return n - 256 if byte and n > 127 else n  # Jackson's getByteValue takes 128..255 as unsigned


def _special(v: Any) -> float:
    if isinstance(v, Constant):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[str(v)]
    if _plain_string(v) and v in _SPECIAL_STRINGS:
        return _SPECIAL_STRINGS[v]
    raise Failed


def _double(v: Any) -> float:
    if isinstance(v, Number) and not isinstance(v, Constant):
        try:
            return float(_exact(v)) if v.integer else float(v)
        except OverflowError:
            return math.inf if int(v) > 0 else -math.inf
    return _special(v)


def _float(v: Any) -> float:
    if isinstance(v, Number) and not isinstance(v, Constant):
        exact = _exact(v)
        out = tv._nearest_float32(abs(exact))
        return -out if exact < 0 or (exact == 0 and v.startswith("-") and not v.integer) else out
    return _special(v)


def _decimal(v: Any, precision: int, scale: int) -> int:
    if isinstance(v, Number) and not isinstance(v, Constant):
        text = str(v)
    elif _plain_string(v) and v:
        text = v.replace(",", "")  # the en-US decimal parser drops grouping commas
        if not text or tv.java_trim(text) != text:  # new BigDecimal(String) does not trim
            raise Failed
    else:
        raise Failed
    parsed = tv.decimal_parts(text)
    if parsed is None:
        raise Failed
    value = decimals.rescale(parsed[0], parsed[1], scale)
    if abs(value) >= 10 ** precision:
        raise Failed
    return value


def _date(v: Any) -> int:
    if not _plain_string(v) or not v:
        raise Failed
    days = tv.date_text(v)
    if days is None:
        days = tv.date_text(v.replace("GMT", ""))
    if days is None:  # Spark 1.5 wrote day numbers
        digits = v[1:] if v[:1] in "+-" else v
        if not digits or not digits.isdecimal():
            raise Failed
        days = int(v)
        if not -2 ** 31 <= days < 2 ** 31:
            raise Failed
        if days < GREGORIAN_START_DAY:
            raise NotLocal("a JSON date written as a day number before 1582-10-15: Spark rebases it")
    return days


def _timestamp(v: Any) -> int:
    if isinstance(v, Integer):
        n = int(v)
        if not -2 ** 63 <= n < 2 ** 63:
            raise Failed
        micros = (n * 1_000_000 + 2 ** 63) % 2 ** 64 - 2 ** 63  # Scala's long multiplication wraps
        return micros
    if not _plain_string(v) or not v:
        raise Failed
    micros = tv.timestamp_text(v)
    if micros is None:
        micros = tv.timestamp_text(v.replace("GMT", ""))
    if micros is None:
        raise Failed
    return micros


def _timestamp_ntz(v: Any) -> int:
    if not _plain_string(v) or not v:
        raise Failed
    micros = tv.timestamp_text(v, zoned=False, allow_zone=False)
    if micros is None:
        raise Failed
    return micros


def _struct(v: Any, fields: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    if not isinstance(v, Pairs):
        raise Failed
    out: dict[str, Any] = {}
    for key, value in v:
        convert = fields.get(key)
        if convert is not None:
            out[key] = None if value is None else convert(value)
    return out


def convert_object(obj: Pairs, converters: dict[str, Callable[[Any], Any]]) -> tuple[dict[str, Any], bool]:
    """The declared fields of a top-level object and whether one failed (the line is corrupt;
    the values that converted are kept, Spark's partial result)."""
    out: dict[str, Any] = {}
    failed = False
    for key, value in obj:
        convert = converters.get(key)
        if convert is None:
            continue
        if value is None:
            out[key] = None
            continue
        try:
            out[key] = convert(value)
        except Failed:
            failed = True
    return out, failed
