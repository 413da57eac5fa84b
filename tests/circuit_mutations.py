"""Hostile and malformed variants of the example circuits, for the mutation tests.

Each ``Mutation`` is a circuit text (or raw bytes) made from an example by one change to its YAML
tree or text, with the kind of change and what a correct validator must do with it:
``invalid`` mutations must be refused; the others (a valid variant is possible: a wrong type
where any scalar is allowed) must either be refused cleanly or compile. ``node`` is the input,
node or output the change is in, when a problem about it must name it.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from spark_jobs.spec.loader import read_yaml

CIRCUITS = Path(__file__).resolve().parent.parent / "circuits"


@dataclass(frozen=True)
class Mutation:
    kind: str
    source: str  # the example circuit's file name
    what: str  # the change, for failure messages
    text: str | bytes | Callable[[], str]  # a callable: made when first needed (most are sampled away)
    invalid: bool = True  # must be refused
    node: str | None = None  # a problem must name this input/node/output (None: any or none)

    @property
    def content(self) -> str | bytes:
        return self.text() if callable(self.text) else self.text


def examples() -> list[Path]:
    return sorted(CIRCUITS.glob("*.yaml")) + sorted((CIRCUITS / "examples").glob("*.yaml"))


def tree_of(text: str) -> dict[str, Any]:
    """The circuit's data as the project reads it (YAML 1.2 booleans: ``on:`` stays a key)."""
    return read_yaml(text, "x").data


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=200)


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every key and list-item path of the tree (not the root)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path + (i,)
            yield from _paths(v, path + (i,))


def _get(data: Any, path: tuple) -> Any:
    for k in path:
        data = data[k]
    return data


def _set(data: Any, path: tuple, value: Any) -> Any:
    data = copy.deepcopy(data)
    _get(data, path[:-1])[path[-1]] = value
    return data


def _lazy(change: Callable[..., Any], *args: Any) -> Callable[[], str]:
    """The text of ``change(*args)``, made when it is asked for."""
    return lambda: dump(change(*args))


def _delete(data: Any, path: tuple) -> Any:
    data = copy.deepcopy(data)
    del _get(data, path[:-1])[path[-1]]
    return data


def owner(path: tuple) -> str | None:
    """The input/node/output a path is in, as problems name it (``rec.body`` for body nodes)."""
    if len(path) < 2 or path[0] not in ("inputs", "nodes", "outputs") or not isinstance(path[1], str):
        return None
    label, rest = path[1], path[2:]
    while path[0] == "nodes" and len(rest) >= 2 and rest[0] == "body":
        label, rest = f"{label}.{rest[1]}", rest[2:]
    return label


# values of the wrong type, one per YAML type; a value of the original's own type is skipped
WRONG_VALUES: list[Any] = [["x", 1], {"k": "v"}, 42, -1, 3.5, None, True, "some text"]
# fields whose values are free text or free mappings: another scalar may still be valid
_LENIENT = {"description", "settings", "policy", "options", "expectations", "min_value", "max_value", "value",
            "mostly", "value_set", "column", "strict_min", "strict_max", "kwargs"}


def _same_type(a: Any, b: Any) -> bool:
    return type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                  and not isinstance(a, bool) and not isinstance(b, bool))


def wrong_types(name: str, data: dict) -> Iterator[Mutation]:
    for path in _paths(data):
        old = _get(data, path)
        for value in WRONG_VALUES:
            if _same_type(old, value):
                continue
            lenient = any(isinstance(p, str) and p in _LENIENT for p in path) or (
                path[0] == "outputs" and len(path) == 2 and value in ({"k": "v"}, None))
            yield Mutation("wrong_type", name, f"{path} = {value!r}", _lazy(_set, data, path, value),
                           invalid=value is not None and (not lenient and not isinstance(path[-1], int)
                                                          or isinstance(old, (dict, list))),
                           node=owner(path))


def missing_fields(name: str, data: dict) -> Iterator[Mutation]:
    for path in _paths(data):
        if isinstance(path[-1], int):
            continue
        # a problem may rightly name who refers to what is gone, not its owner: no node asked for
        yield Mutation("missing_field", name, f"del {path}", _lazy(_delete, data, path), invalid=False)


def unknown_fields(name: str, data: dict) -> Iterator[Mutation]:
    mappings = [()] + [p for p in _paths(data) if isinstance(_get(data, p), dict)]
    for path in mappings:
        if path and path[-1] in ("settings", "options", "schema", "aggregates", "columns", "body", "inputs", "nodes",
                                 "outputs", "ops") or "expectations" in path:  # GE's own arguments
            continue
        target = copy.deepcopy(data)
        _get(target, path)["bogus_field"] = 1
        yield Mutation("unknown_field", name, f"{path}.bogus_field", dump(target), node=owner(path + ("x",)))


# names that are not identifiers, collide with the engine's columns, or hide in quoting
BAD_NAMES = ["", " ", "a b", "a'b", 'a"b', "a`b", "a.b", "a-b", "1abc", "a\nb", "a\tb",
             "x" * 300, "a;b", "${HOME}", "{{x}}", "../x", "a/b"]
RESERVED_COLUMNS = ["_weight", "__dbsp", "__rows", "__lw"]  # bad column names, fine names of nodes and inputs
ODD_NAMES = ["é", "ñode", "select", "SELECT", "null", "true", "_", "window_start", "iteration", "NaN"]


def _inputs_nodes(data: dict) -> tuple[list[str], list[str]]:
    inputs = list(data.get("inputs") or {}) if isinstance(data.get("inputs"), dict) else []
    nodes = list(data.get("nodes") or {}) if isinstance(data.get("nodes"), dict) else []
    return inputs, nodes


def hostile_names(name: str, data: dict) -> Iterator[Mutation]:
    """A new node, and a renamed input column, for every bad and odd name."""
    inputs, _ = _inputs_nodes(data)
    first = inputs[0]
    schema = data["inputs"][first].get("schema") or {}
    column = next(iter(schema), None)
    for bad in BAD_NAMES + RESERVED_COLUMNS + ODD_NAMES:
        invalid = bad in BAD_NAMES
        named = bad if invalid and bad.strip() and "\n" not in bad else None
        target = copy.deepcopy(data)
        target["nodes"][bad] = {"op": "distinct", "input": first}
        yield Mutation("bad_name", name, f"node named {bad!r}", dump(target), invalid=invalid, node=named)
        if column is not None:
            target = copy.deepcopy(data)
            cols = target["inputs"][first]["schema"]
            target["inputs"][first]["schema"] = {**{bad: cols[column]}, **cols}
            yield Mutation("bad_name", name, f"column named {bad!r}", dump(target),
                           invalid=invalid or bad in RESERVED_COLUMNS, node=first if bad not in ODD_NAMES else None)
        target = copy.deepcopy(data)
        target["inputs"][bad] = copy.deepcopy(data["inputs"][first])
        yield Mutation("bad_name", name, f"input named {bad!r}", dump(target), invalid=invalid, node=named)
    # an input and a node, or two nodes spelled apart only by case
    target = copy.deepcopy(data)
    target["nodes"][first] = {"op": "distinct", "input": first}
    yield Mutation("duplicate_name", name, f"node named like input {first!r}", dump(target), node=first)
    target = copy.deepcopy(data)
    target["nodes"][first.upper()] = {"op": "distinct", "input": first}
    yield Mutation("duplicate_name", name, f"node {first.upper()!r} beside input {first!r}", dump(target),
                   invalid=False)


def _reference_fields(node: dict) -> list[str]:
    return [f for f in ("input", "left", "right") if isinstance(node.get(f), str)]


def cycles(name: str, data: dict) -> Iterator[Mutation]:
    """Every node reading itself, and every node reading the last node (a cycle through it)."""
    _, nodes = _inputs_nodes(data)
    for n in nodes:
        raw = data["nodes"][n]
        for f in _reference_fields(raw):
            yield Mutation("cycle", name, f"{n}.{f} = itself", _lazy(_set, data, ("nodes", n, f), n), node=n)
            last = nodes[-1]
            if last != n and raw[f] != last:
                yield Mutation("cycle", name, f"{n}.{f} = {last}", _lazy(_set, data, ("nodes", n, f), last),
                               invalid=False)
        if isinstance(raw.get("inputs"), list):
            yield Mutation("cycle", name, f"{n}.inputs += itself",
                           _lazy(_set, data, ("nodes", n, "inputs"), raw["inputs"] + [n]), node=n)


UNKNOWN_OPS = ["bogus", "FILTER", "filter ", "__class__", "eval", "exec", "python", "udf", "sql;", ""]
UNKNOWN_KINDS = ["bogus", "python", "exec", "jdbc", "CHANGES", "url", "shell", ""]
UNKNOWN_FORMATS = ["pickle", "xml", "avro", "text", "binaryFile", "jdbc", "PARQUET ", ""]


def unknown_words(name: str, data: dict) -> Iterator[Mutation]:
    inputs, nodes = _inputs_nodes(data)
    for n in nodes:
        for op in UNKNOWN_OPS:
            yield Mutation("unknown_op", name, f"{n}.op = {op!r}", _lazy(_set, data, ("nodes", n, "op"), op), node=n)
    for i in inputs:
        if not isinstance(data["inputs"][i].get("source"), dict):
            continue
        for kind in UNKNOWN_KINDS:
            yield Mutation("unknown_kind", name, f"{i}.source.kind = {kind!r}",
                           _lazy(_set, data, ("inputs", i, "source", "kind"), kind), node=i)
        for fmt in UNKNOWN_FORMATS:
            yield Mutation("unknown_format", name, f"{i}.source.format = {fmt!r}",
                           _lazy(_set, data, ("inputs", i, "source", "format"), fmt), node=i)


HUGE_NUMBERS: list[Any] = [-1, 0, 2 ** 63, 10 ** 30, -(10 ** 30), 1e308, float("inf"), float("nan")]
HUGE_DURATIONS = ["-5 minutes", "0 seconds", "99999999999999999999 days", "1e309 hours", "5", "minutes",
                  "NaN minutes", "-0 days", "1 fortnight", "10 minutes; drop"]
_NUMBER_FIELDS = {"k": True, "max_iterations": True}
_DURATION_FIELDS = {"lateness", "size", "slide", "within", "retention", "every", "max_delay"}


def numbers(name: str, data: dict) -> Iterator[Mutation]:
    for path in _paths(data):
        key = path[-1]
        if key in _NUMBER_FIELDS:
            for value in HUGE_NUMBERS:
                yield Mutation("huge_number", name, f"{path} = {value!r}", _lazy(_set, data, path, value),
                               invalid=value != 0 and not (isinstance(value, int) and 0 < value < 2 ** 63) or value == 0,
                               node=owner(path))
        elif key in _DURATION_FIELDS and isinstance(_get(data, path), (str, int)):
            for value in HUGE_DURATIONS + HUGE_NUMBERS:
                yield Mutation("huge_number", name, f"{path} = {value!r}", _lazy(_set, data, path, value),
                               invalid=value != "0 seconds", node=owner(path))


HOSTILE_PATHS = ["../x", "inbox/../../x", "/etc", "/etc/passwd", "file:///etc", "file:/etc", "s3a://bucket/x",
                 "hdfs:/etc", "s3a:/bucket/x", "jar:file:/x.jar!/", "inbox/\x00x", "inbox/\nx", ".", "./", "",
                 "_dbsp", "_dbsp/other/state", "views", "views/other", "..", "inbox\\..\\..\\x", "~", "~/x",
                 "$HOME/x", "${HOME}/x", "{{ root }}/x", "inbox/*", "inbox/{a,b}", "inbox/[ab]", "inbox/%2e%2e/%2e%2e",
                 "//etc", "\\\\server\\share"]
# paths that validation must refuse (the others are odd folder names inside the data root)
_REFUSED_PATHS = {"../x", "inbox/../../x", "/etc", "/etc/passwd", "file:///etc", "file:/etc", "s3a://bucket/x",
                  "hdfs:/etc", "s3a:/bucket/x", "jar:file:/x.jar!/", "inbox/\x00x", "inbox/\nx", ".", "./", "",
                  "_dbsp", "_dbsp/other/state", "views", "views/other", "..", "inbox\\..\\..\\x", "//etc"}


def hostile_paths(name: str, data: dict) -> Iterator[Mutation]:
    inputs, _ = _inputs_nodes(data)
    for i in inputs:
        if not isinstance(data["inputs"][i].get("source"), dict):
            continue
        for p in HOSTILE_PATHS:
            yield Mutation("hostile_path", name, f"{i}.source.path = {p!r}",
                           _lazy(_set, data, ("inputs", i, "source", "path"), p), invalid=p in _REFUSED_PATHS, node=i)
        for opt, value in (("path", "/etc"), ("basePath", "/"), ("pathGlobFilter", "*"), ("recursiveFileLookup", True),
                           ("ignoreCorruptFiles", True), ("spark.sql.x", "y"), ("", "x")):
            yield Mutation("hostile_path", name, f"{i}.source.options.{opt}",
                           _lazy(_set, data, ("inputs", i, "source", "options"), {opt: value}), node=i)


# expressions a hostile author writes where a row expression is expected
HOSTILE_EXPRESSIONS = [
    "reflect('java.lang.Runtime', 'getRuntime')", "java_method('java.lang.System', 'exit', 0)",
    "try_reflect('java.lang.System', 'getenv', 'HOME')", "REFLECT('java.lang.Runtime','getRuntime')",
    "`reflect`('java.lang.Runtime','getRuntime')", "my_udf(1)", "default.my_udf(1)", "spark_catalog.default.f(1)",
    "${HOME} = 1", "'${HOME}' = 'x'", "${spark.app.name}", "{{ ds }} = 1", "{% if x %}1{% endif %}",
    "1 = 1; DROP TABLE t", "1 = 1 -- comment", "1 = 1 /* hidden */", "1 = 1 --\\\n OR reflect('a','b')",
    "(SELECT 1) = 1", "EXISTS (SELECT 1)", "input_file_name() = 'x'", "current_user() = 'x'", "rand() > 0.5",
    "uuid() = 'x'", "current_timestamp() > 0", "assert_true(false)", "raise_error('x')",
    "aes_decrypt(unbase64('x'), 'k')", "transform(array(1), x -> reflect('a', 'b'))", "from_protobuf(x, 'm', '/etc/p')",
    "", " ", "1 = ", "(" * 31 + "1 = no_such_col" + ")" * 31,
    "(" * 2000 + "1" + ")" * 2000, "x" * 20_000, "no_such_col.b.c.d", "`_weight` > 0", "_weight > 0", "__dbsp_t > 0",
    "count(*) over ()", "?", ":p", "'a' 'b' = 'ab'", "\x00", "1 = 1\n;\nSELECT 1",
]
HOSTILE_QUERIES = [
    "SELECT 1; SELECT 2", "DROP TABLE orders", "INSERT INTO orders VALUES (1)", "CREATE TEMPORARY FUNCTION f AS 'x.Y'",
    "SET spark.sql.ansi.enabled=false", "ADD JAR /tmp/x.jar", "CACHE TABLE orders", "REFRESH TABLE orders",
    "SELECT * FROM parquet.`/etc`", "SELECT * FROM json.`/etc/passwd`", "SELECT * FROM text.`file:///etc/passwd`",
    "SELECT * FROM read_files('/etc')", "SELECT * FROM range(10)", "SELECT reflect('java.lang.Runtime', 'getRuntime')",
    "SELECT java_method('java.lang.System', 'getenv', 'HOME')", "SELECT TRANSFORM(1) USING 'cat' AS (x)",
    "SELECT * FROM VALUES (1), (2)", "SELECT 1 -- ; DROP TABLE x", "SELECT /* ; */ 1", "SELECT '${HOME}'",
    "SELECT {{ x }}", "SELECT my_udf(1)", "EXPLAIN SELECT 1", "DESCRIBE orders", "SHOW TABLES", "", " ",
    "SELECT", "WITH RECURSIVE r AS (SELECT 1 UNION ALL SELECT * FROM r) SELECT * FROM r",
    "SELECT * FROM global_temp.x", "SELECT * FROM delta.`/tmp/x`", "SELECT input_file_name()",
    "SELECT * FROM orders TABLESAMPLE (10 PERCENT)", "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE t",
    "SELECT ${x}", "SELECT 1 UNION SELECT 2; DELETE FROM t",
]


def hostile_sql(name: str, data: dict) -> Iterator[Mutation]:
    _, nodes = _inputs_nodes(data)
    for n in nodes:
        raw = data["nodes"][n]
        if isinstance(raw.get("where"), str):
            for e in HOSTILE_EXPRESSIONS:
                yield Mutation("hostile_sql", name, f"{n}.where = {e[:60]!r}", _lazy(_set, data, ("nodes", n, "where"), e),
                               node=n)
        if isinstance(raw.get("query"), str):
            for q in HOSTILE_QUERIES:
                yield Mutation("hostile_sql", name, f"{n}.query = {q[:60]!r}", _lazy(_set, data, ("nodes", n, "query"), q),
                               node=n)
            yield Mutation("hostile_sql", name, f"{n}.query + '; DROP TABLE x'",
                           _lazy(_set, data, ("nodes", n, "query"), raw["query"].rstrip() + ";\nDROP TABLE x"), node=n)
        if isinstance(raw.get("aggregates"), dict):
            out = next(iter(raw["aggregates"]))
            for e in ("sum(reflect('a', 'b'))", "count(java_method('a', 'b'))", "my_agg(x)", "sum(${x})",
                      "max((SELECT 1))", "sum(1); DROP TABLE t", "collect_list(x)", "percentile(x, 0.5)"):
                yield Mutation("hostile_sql", name, f"{n}.aggregates.{out} = {e!r}",
                               _lazy(_set, data, ("nodes", n, "aggregates", out), e), node=n)


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]) + "\n"


def text_mutations(name: str, text: str) -> Iterator[Mutation]:
    """Changes to the bytes of the file: encodings, whitespace, YAML features a circuit never needs."""
    lines = text.splitlines(keepends=True)
    yield Mutation("text", name, "BOM", "\ufeff" + text, invalid=False)
    yield Mutation("text", name, "CRLF", text.replace("\n", "\r\n"), invalid=False)
    yield Mutation("text", name, "empty", "")
    yield Mutation("text", name, "only a comment", "# nothing\n")
    yield Mutation("text", name, "only whitespace", "   \n\n\t\n")
    yield Mutation("text", name, "a bare string", "hello\n")
    yield Mutation("text", name, "a list", "- 1\n- 2\n")
    yield Mutation("text", name, "invalid UTF-8", text.encode() + b"\n# \xff\xfe\xc3\x28\n")
    yield Mutation("text", name, "invalid UTF-8 first", b"\xff\xfe" + text.encode())
    yield Mutation("text", name, "UTF-16", text.encode("utf-16"), invalid=False)
    yield Mutation("text", name, "NUL byte", text.replace("\n", "\n\x00", 1))
    yield Mutation("text", name, "control character", text.replace("\n", "\n\x07", 1))
    yield Mutation("text", name, "tabs for indentation", text.replace("  ", "\t"),
                   invalid=not all(not ln.startswith("  ") for ln in lines))
    yield Mutation("text", name, "billion laughs", BILLION_LAUGHS)
    yield Mutation("text", name, "billion laughs appended", text + BILLION_LAUGHS.replace("a:", "zz_a:"))
    yield Mutation("text", name, "merge-key bomb",
                   "a: &a {x: 1}\n" + "".join(f"m{i}: &m{i} {{<<: [*{'a' if i == 0 else f'm{i - 1}'}, *{'a' if i == 0 else f'm{i - 1}'}]}}\n"
                                              for i in range(40)))
    yield Mutation("text", name, "recursive alias", "a: &a [*a]\n")
    yield Mutation("text", name, "deep flow nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n")
    yield Mutation("text", name, "deep block nesting", "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v\n")
    yield Mutation("text", name, "deep mapping nesting", "a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n")
    yield Mutation("text", name, "long line", text + "description: " + "x" * 200_000 + "\n")
    yield Mutation("text", name, "too large", "# " + "x" * (1 << 21) + "\n" + text)
    yield Mutation("text", name, "two documents", text + "---\n" + text)
    yield Mutation("text", name, "document end then junk", text + "...\n{{ junk\n")
    for tag in ("!!python/object/apply:os.system ['touch /tmp/dbsp_pwned']", "!!python/name:os.system",
                "!!python/object:builtins.dict {}", "!!python/object/new:subprocess.Popen [['true']]",
                "!!python/module:os", "!<tag:yaml.org,2002:python/object/apply:os.system> ['true']",
                "!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2020-01-01", "!!float nan",
                "!custom x", "!!str", "!!null ''", "!!int 99999999999999999999999"):
        i = next(k for k, ln in enumerate(lines) if ln.startswith("name:"))
        mutated = "".join(lines[:i] + [f"name: {tag}\n"] + lines[i + 1:])
        yield Mutation("yaml_tag", name, f"name: {tag}", mutated)
        yield Mutation("yaml_tag", name, f"tag on the top level: {tag}", f"--- {tag.split(' ')[0]}\n" + text)
    # duplicate keys: every mapping key line repeated right after itself
    for i, ln in enumerate(lines):
        stripped = ln.strip()
        if ":" in stripped and not stripped.startswith(("#", "-")) and not ln.rstrip().endswith(("|", ">")):
            key = stripped.split(":", 1)[0]
            if key and " " not in key and "'" not in key and '"' not in key:
                yield Mutation("duplicate_key", name, f"line {i + 1} twice ({key})",
                               "".join(lines[:i + 1] + [ln] + lines[i + 1:]))


def tree_mutations(name: str, text: str, data: dict) -> Iterator[Mutation]:
    for gen in (wrong_types, missing_fields, unknown_fields, hostile_names, cycles, unknown_words, numbers,
                hostile_paths, hostile_sql):
        yield from gen(name, data)


def all_mutations() -> Iterator[Mutation]:
    for p in examples():
        text = p.read_text()
        yield from tree_mutations(p.name, text, tree_of(text))
        yield from text_mutations(p.name, text)


def sample(mutations: list[Mutation], per_kind: int, seed: int = 0) -> list[Mutation]:
    """At most ``per_kind`` mutations of each kind, chosen with a fixed seed, spread over the sources."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    out: list[Mutation] = []
    for kind, group in sorted(by_kind.items()):
        out += group if len(group) <= per_kind else rng.sample(group, per_kind)
    return out


# ---- judging one mutation -------------------------------------------------------------------

SECONDS_PER_CHECK = 5.0  # a hostile file must not make validation slow


def judge(m: Mutation, tmp_dir: Path | None = None) -> str | None:
    """What is wrong with how the validator treats ``m`` (None: nothing). In-process: the same
    ``validate_file``/``check_text`` that `dbsp validate` runs, then the compiler `dbsp explain`
    runs when the circuit is accepted."""
    import time

    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec import output_columns
    from spark_jobs.spec.loader import check_text, validate_file

    started = time.monotonic()
    try:
        content = m.content
        if isinstance(content, bytes):
            assert tmp_dir is not None, "byte mutations are written to a file"
            path = tmp_dir / "c.yaml"
            path.write_bytes(content)
            problems, spec, name, text = validate_file(path), None, str(path), None
        else:
            spec, problems = check_text(content, "c.yaml")
            name, text = "c.yaml", content
        if not problems and spec is not None:
            compile_spec(spec, output_columns(spec))
    except Exception as exc:  # noqa: BLE001 - any exception is what the harness looks for
        return f"raised {type(exc).__name__}: {exc}"[:500]
    took = time.monotonic() - started
    if took > SECONDS_PER_CHECK:
        return f"took {took:.1f} s"
    if m.invalid and not problems:
        return "accepted, but it must be refused"
    lines = (text.count("\n") + 2) if text is not None else 10 ** 9
    for p in problems:
        if p.file != name or not 1 <= p.line <= lines:
            return f"a problem without its file or a line in it: {p}"
    if problems and m.node is not None and not any(
            p.node == m.node or (p.node or "").startswith(m.node + ".") for p in problems):
        return f"no problem names {m.node!r}: {[str(p) for p in problems][:3]}"
    return None
