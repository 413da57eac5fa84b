"""String functions and LIKE, as Spark computes them on UTF8String.

Lengths and positions count code points (Python's ``str`` indexing does too); comparisons and
searches are on exact characters (Spark's default UTF8_BINARY collation); ``trim`` removes
spaces only, not all whitespace; ``substring`` takes 1-based and negative positions as
``UTF8String.substringSQL``; ``replace`` with an empty search string changes nothing; ``upper``
and ``lower`` map full Unicode case (``ß`` becomes ``SS``; the tables are Python's Unicode
version, Spark's are ICU's). LIKE translates the pattern as Spark's ``escapeLikeRegex`` (``%``,
``_``, the escape character before ``%``, ``_`` or itself, any other use of it is an error).
"""
from __future__ import annotations

import re
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from .casts import cast
from .runtime import ExpressionFailed, Literal, Node, Strict
from .sql_types import BOOLEAN, INT, NULL, STRING, NotCovered

_CONCAT_SOURCES = ("tinyint", "smallint", "int", "bigint", "decimal", "boolean", "date", "string")


def _string_arg(node: Node, function: str) -> Node:
    if node.dtype == STRING:
        return node
    if node.dtype == NULL:
        return cast(node, STRING)
    raise NotCovered(f"{function} of a {node.dtype} value: Spark's implicit cast to string is not covered")


def _int_arg(node: Node, function: str) -> Node:
    if node.dtype in (INT, NULL) or node.dtype.name in ("tinyint", "smallint"):
        return cast(node, INT)
    raise NotCovered(f"{function} with a {node.dtype} position or length is not covered")


def _constant(node: Node):
    """The value of a non-NULL literal argument (vectorized kernels take constants), else None."""
    return node.value if isinstance(node, Literal) else None


def _per_value(fn, out_type: pa.DataType):
    """A kernel applying a Python function to the values of the rows where all arguments are set."""
    def kernel(arrays, ok):
        columns = [a.to_pylist() for a in arrays]
        return pa.array([fn(*vals) if k else None for k, *vals in zip(ok, *columns)], out_type)
    return kernel


def case_map(name: str, arg: Node) -> Node:
    upper = name in ("upper", "ucase")
    arg = _string_arg(arg, name)
    if isinstance(arg, Strict) and arg.name in ("upper", "lower"):
        arg = arg.args[0]  # SimplifyCaseConversionExpressions: upper(lower(x)) is upper(x)

    def kernel(arrays, ok):
        a = arrays[0]
        if pc.all(pc.string_is_ascii(a)).as_py() in (True, None):
            return pc.ascii_upper(a) if upper else pc.ascii_lower(a)
        return pa.array([None if s is None else (s.upper() if upper else s.lower()) for s in a.to_pylist()],
                        pa.string())
    return Strict(STRING, [arg], kernel, name="upper" if upper else "lower")


def length(arg: Node) -> Node:
    arg = _string_arg(arg, "length")
    return Strict(INT, [arg], lambda arrays, ok: pc.utf8_length(arrays[0]), name="length")


def spark_substring(s: str, pos: int, length: int = 2**31 - 1) -> str:
    """``UTF8String.substringSQL``: 1-based; 0 is the first character; negative counts from the end."""
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = max(min(start + length, 2**31 - 1), -2**31)
    start = max(start, 0)
    if start >= end:
        return ""
    return s[start:end]


def substring(args: list[Node]) -> Node:
    if len(args) not in (2, 3):
        raise NotCovered("substring takes 2 or 3 arguments")
    nodes = [_string_arg(args[0], "substring")] + [_int_arg(a, "substring") for a in args[1:]]
    pos = _constant(nodes[1])
    length = _constant(nodes[2]) if len(nodes) == 3 else 2**31 - 1
    kernel = _per_value(spark_substring, pa.string())
    if pos is not None and pos >= 0 and length is not None and length >= 0:
        start = max(pos - 1, 0)
        stop = min(start + length, 2**31 - 1)
        kernel = lambda arrays, ok: pc.utf8_slice_codeunits(arrays[0], start, stop)  # noqa: E731 - code points
    return Strict(STRING, nodes, kernel, name="substring")


def left_right(name: str, args: list[Node]) -> Node:
    """``left(s, n)`` is ``substring(s, 1, n)``; ``right(s, n)`` is ``substring(s, -n, n)`` and
    empty for n <= 0 (Spark's replacements for the two)."""
    s, n = _string_arg(args[0], name), _int_arg(args[1], name)
    if name == "left":
        return Strict(STRING, [s, n], _per_value(lambda v, k: spark_substring(v, 1, k), pa.string()), name="left")
    return Strict(STRING, [s, n], _per_value(lambda v, k: "" if k <= 0 else spark_substring(v, -k, k), pa.string()),
                  name="right")


def concat(args: list[Node]) -> Node:
    """``concat``/``||``: NULL if any argument is; numbers, booleans and dates as their string."""
    nodes = []
    for a in args:
        if a.dtype.name not in _CONCAT_SOURCES and a.dtype != NULL:
            raise NotCovered(f"concat of a {a.dtype} value: its string form differs between Java and Python")
        nodes.append(cast(a, STRING))
    if not nodes:
        return Literal(STRING, "")

    def kernel(arrays, ok):
        if len(arrays) == 1:
            return arrays[0]
        return pc.binary_join_element_wise(*arrays, "", null_handling="emit_null")
    return Strict(STRING, nodes, kernel, name="concat", null_intolerant=False)


def trim(kind: str, args: list[Node]) -> Node:
    """``trim``/``ltrim``/``rtrim`` (spaces) and ``TRIM(BOTH|LEADING|TRAILING chars FROM s)``:
    ``args`` is ``[s]`` or ``[s, chars]``."""
    s = _string_arg(args[0], "trim")
    strip = {"both": str.strip, "leading": str.lstrip, "trailing": str.rstrip}[kind]
    arrow_trim = {"both": pc.utf8_trim, "leading": pc.utf8_ltrim, "trailing": pc.utf8_rtrim}[kind]
    if len(args) == 1:
        return Strict(STRING, [s], lambda arrays, ok: arrow_trim(arrays[0], characters=" "), name=f"trim:{kind}")
    chars = _string_arg(args[1], "trim")
    kernel = _per_value(lambda v, c: strip(v, c), pa.string())
    if _constant(chars) is not None:
        kernel = lambda arrays, ok: arrow_trim(arrays[0], characters=chars.value)  # noqa: E731
    return Strict(STRING, [s, chars], kernel, name=f"trim:{kind}", null_intolerant=False)


def predicate(name: str, args: list[Node]) -> Node:
    """``startswith``, ``endswith``, ``contains``: NULL if either side is; an empty needle matches."""
    s, needle = _string_arg(args[0], name), _string_arg(args[1], name)
    test = {"startswith": str.startswith, "endswith": str.endswith, "contains": str.__contains__}[name]
    kernel = _per_value(lambda v, n: test(v, n), pa.bool_())
    if _constant(needle) is not None:
        arrow_test = {"startswith": pc.starts_with, "endswith": pc.ends_with, "contains": pc.match_substring}[name]
        kernel = lambda arrays, ok: arrow_test(arrays[0], pattern=needle.value)  # noqa: E731
    return Strict(BOOLEAN, [s, needle], kernel, name=name)


def replace(args: list[Node]) -> Node:
    if len(args) == 2:
        args = [*args, Literal(STRING, "")]
    nodes = [_string_arg(a, "replace") for a in args]
    kernel = _per_value(lambda s, old, new: s if old == "" else s.replace(old, new), pa.string())
    search, replacement = _constant(nodes[1]), _constant(nodes[2])
    if search and replacement is not None:  # left to right, not overlapping, as Java's replace
        kernel = lambda arrays, ok: pc.replace_substring(arrays[0], search, replacement)  # noqa: E731
    return Strict(STRING, nodes, kernel, name="replace")


_RE2_SPECIAL = frozenset("\\.^$|?*+()[]{}")


def like_re2(pattern: str, escape: str) -> str:
    """The same pattern for Arrow's RE2 kernels (anchored, ``.`` matching newlines)."""
    like_regex(pattern, escape)  # raises for patterns Spark rejects
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            c, i = pattern[i + 1], i + 1
            out.append("\\" + c if c in _RE2_SPECIAL else c)
        elif c in "_%":
            out.append("." if c == "_" else ".*")
        else:
            out.append("\\" + c if c in _RE2_SPECIAL else c)
        i += 1
    return "(?s)\\A" + "".join(out) + "\\z"


@lru_cache(maxsize=1024)
def like_regex(pattern: str, escape: str) -> re.Pattern:
    """Spark's ``escapeLikeRegex``; ExpressionFailed for a pattern Spark rejects."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 >= len(pattern):
                raise ExpressionFailed("INVALID_FORMAT", f"the pattern {pattern!r} may not end with the escape "
                                                         "character")
            nxt = pattern[i + 1]
            if nxt not in ("_", "%", escape):
                raise ExpressionFailed("INVALID_FORMAT", f"the escape character is not allowed to precede "
                                                         f"{nxt!r} in {pattern!r}")
            out.append(re.escape(nxt))
            i += 2
            continue
        out.append("." if c == "_" else ".*" if c == "%" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def like(value: Node, pattern: Node, escape: str = "\\", ignore_case: bool = False) -> Node:
    value, pattern = _string_arg(value, "LIKE"), _string_arg(pattern, "LIKE")
    if ignore_case:
        value, pattern = case_map("lower", value), case_map("lower", pattern)
    if isinstance(pattern, Literal) and pattern.value is not None:
        try:
            like_regex(pattern.value, escape)
        except ExpressionFailed as exc:
            raise NotCovered(f"Spark rejects the LIKE pattern: {exc.detail}") from None

    def kernel(arrays, ok):
        values, patterns = arrays[0].to_pylist(), arrays[1].to_pylist()
        out = [bool(like_regex(p, escape).fullmatch(v)) if k else None for v, p, k in zip(values, patterns, ok)]
        return pa.array(out, pa.bool_())
    if _constant(pattern) is not None:
        regex = like_re2(pattern.value, escape)
        kernel = lambda arrays, ok: pc.match_substring_regex(arrays[0], regex)  # noqa: E731
    return Strict(BOOLEAN, [value, pattern], kernel, name=f"like:{escape}",
                  kernel_fails=not isinstance(pattern, Literal))
