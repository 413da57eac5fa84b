"""A PostgreSQL table as an input: a snapshot first, then its changes from a logical replication slot.

Why pgoutput read through ``pg_logical_slot_peek_binary_changes``: ``pgoutput`` is built into
every PostgreSQL since 10 (wal2json is an extension a managed server may not offer), and peeking
through SQL needs no streaming replication connection: a step *reads* the changes up to a log
position it chose at its start, the runtime commits that position in the manifest with the
timestep, and only then is the slot advanced (``advance``). So:

- a crash before the manifest leaves the slot where it was: the retry reads the same changes;
- a crash after the manifest but before the slot moved: the next step peeks changes it already
  applied, and skips every transaction whose commit position is below the recorded one;
- a transaction still open when a step starts is not in its changes (the peek returns only
  committed transactions, and the step keeps only those that committed before its position): it
  arrives whole in the step after it commits.

The first step creates the publication and the slot (named after the circuit and input), then
reads the table in a REPEATABLE READ transaction. Changes committed between the slot's creation
and the snapshot are in both; they are applied again by key (insert/update replace the key's row,
delete removes it, an update or delete of a key not held is ignored), which leaves every key as
its last change says: the overlap changes nothing. Values are read as text (the snapshot casts
every column to text; pgoutput sends text) and converted to the declared types here, so both
paths give the same values.
"""
from __future__ import annotations

import datetime
import decimal
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from spark_jobs.errors import DbspError, EXIT_FAILED, EXIT_REFUSED
from spark_jobs.spec.model import InputSpec

from spark_jobs.connections import describe, password_of, redact, resolve
from .spark_types import declared_types


class PostgresRefused(DbspError):
    """The source table cannot be read as declared (schema changed, no key, a TRUNCATE, ...)."""
    exit_code = EXIT_REFUSED
    retryable = False


class PostgresUnavailable(DbspError, ConnectionError):
    """The database could not be reached (retryable: nothing was read or committed)."""
    exit_code = EXIT_FAILED
    retryable = True


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, low = str(text).split("/")
    return (int(high, 16) << 32) | int(low, 16)


def position_name(lsn: int) -> str:
    """The consumed record's name of a log position (sorts as the positions do)."""
    return f"lsn/{lsn:016X}"


def position_of(name: str) -> int | None:
    found = re.match(r"^lsn/([0-9A-F]{16})$", name)
    return int(found.group(1), 16) if found else None


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(table: str) -> str:
    schema, _, name = table.partition(".")
    return f"{_ident(schema)}.{_ident(name)}"


@dataclass
class Source:
    """An open connection to one input's database (a context manager)."""

    spec: InputSpec
    conn: Any = None
    secret: str = ""

    def __enter__(self) -> "Source":
        import psycopg

        src = self.spec.source
        assert src is not None
        info = resolve(src.connection)
        self.secret = password_of(info)
        try:
            self.conn = psycopg.connect(info, autocommit=True, connect_timeout=15)
        except psycopg.Error as exc:
            raise PostgresUnavailable(f"input {self.spec.name}: cannot connect to {src.connection!r} "
                                      f"({describe(info)}): {redact(str(exc).strip(), (self.secret,))}") from None
        self.conn.execute("SET TimeZone = 'UTC'")
        self.conn.execute("SET DateStyle = 'ISO, YMD'")
        self.conn.execute("SET extra_float_digits = 3")
        self.conn.execute("SET IntervalStyle = 'iso_8601'")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()

    def one(self, query: str, params: tuple = ()) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def refuse(self, why: str) -> PostgresRefused:
        return PostgresRefused(f"input {self.spec.name} (PostgreSQL table {self.spec.source.table}): {why}")


def flush_position(src: Source) -> int:
    """The log position a step reads up to: every transaction committed before it is on disk."""
    return lsn_int(src.one("SELECT pg_current_wal_flush_lsn()"))


def table_key(src: Source) -> tuple[tuple[str, ...], str]:
    """The table's primary key columns and its replica identity (d, f, i, n); refuses a missing table."""
    table = src.spec.source.table
    oid = src.one("SELECT to_regclass(%s)::oid", (qualified(table),))
    if oid is None:
        raise src.refuse("the table does not exist (or this connection's user cannot see it)")
    key = src.conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)", (oid,)).fetchall()
    identity = src.one("SELECT relreplident FROM pg_class WHERE oid = %s", (oid,))
    return tuple(r[0] for r in key), str(identity)


def the_key(src: Source) -> tuple[str, ...]:
    """The columns a change finds its row by: the declared ``key`` (which must be the primary key,
    or any columns with REPLICA IDENTITY FULL), else the primary key; refuses a table with neither."""
    pk, identity = table_key(src)
    declared = tuple(src.spec.key)
    if declared:
        if pk and declared != pk and identity != "f":
            raise src.refuse(f"key: [{', '.join(declared)}] is not the table's primary key ({', '.join(pk)}); "
                             f"declare the primary key, or set REPLICA IDENTITY FULL on the table")
        if not pk and identity != "f":
            raise src.refuse("the table has no primary key: changes could not find their rows. Add a primary "
                             "key, or set REPLICA IDENTITY FULL and declare key: [...] with columns unique in it")
        return declared
    if not pk:
        raise src.refuse("the table has no primary key: changes could not find their rows. Add a primary key "
                         "(or set REPLICA IDENTITY FULL and declare key: [...] with columns unique in it)")
    missing = [c for c in pk if c not in src.spec.column_names]
    if missing:
        raise src.refuse(f"its primary key column(s) {', '.join(missing)} are not declared in the schema: "
                         f"declare them (a change finds its row by the key)")
    return pk


def ensure_slot(src: Source) -> int:
    """Create the publication and the slot if they do not exist; the slot's confirmed position."""
    s = src.spec.source
    if src.one("SELECT 1 FROM pg_publication WHERE pubname = %s", (s.slot,)) is None:
        src.conn.execute(f"CREATE PUBLICATION {_ident(s.slot)} FOR TABLE {qualified(s.table)}")
    found = src.one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (s.slot,))
    if found is None:
        src.conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (s.slot,))
        found = src.one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (s.slot,))
    return lsn_int(found)


def advance(src: Source, lsn: int) -> None:
    """Move the slot to ``lsn`` (after the commit that recorded it): the server may drop older log."""
    s = src.spec.source
    found = src.one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (s.slot,))
    if found is not None and lsn_int(found) < lsn:
        src.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (s.slot, lsn_text(lsn)))


def columns_of(src: Source) -> dict[str, str]:
    """The table's columns and their type names, in order."""
    rows = src.conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (qualified(src.spec.source.table),)).fetchall()
    return {r[0]: r[1] for r in rows}


# the PostgreSQL types each declared Spark type may be read from (text converted by ``converter``)
_COMPATIBLE = {
    "bigint": ("bigint", "integer", "smallint"), "int": ("integer", "smallint"), "smallint": ("smallint",),
    "tinyint": ("smallint",), "double": ("double precision", "real", "bigint", "integer", "smallint"),
    "float": ("real", "smallint"), "string": ("text", "character varying", "character", "uuid", "name"),
    "boolean": ("boolean",), "date": ("date",), "timestamp": ("timestamp with time zone",),
    "timestamp_ntz": ("timestamp without time zone",),
}


def _base_type(pg: str) -> str:
    return re.sub(r"\(.*\)", "", pg).strip()


def schema_problems(spec: InputSpec, found: dict[str, str]) -> list[str]:
    """Why the table's columns (name -> PostgreSQL type) do not fit the declared ones."""
    problems = []
    for name, dt in declared_types(spec).items():
        if name not in found:
            problems.append(f"column {name} is not in the table (its columns: {', '.join(found) or 'none'})")
            continue
        want, pg = dt.simpleString(), _base_type(found[name])
        if want.startswith("decimal"):
            ok = pg in ("numeric", "bigint", "integer", "smallint")
        else:
            ok = pg in _COMPATIBLE.get(want, ())
        if not ok:
            problems.append(f"column {name} is {found[name]} in the table but the schema says {want}")
    return problems


def converter(spark_type: str) -> Callable[[str], Any]:
    """Text as PostgreSQL writes it (ISO dates, UTC) -> the declared type's Python value."""
    if spark_type in ("bigint", "int", "smallint", "tinyint"):
        return int
    if spark_type in ("double", "float"):
        return lambda t: float(t)  # NaN, Infinity, -Infinity read as Python reads them
    if spark_type.startswith("decimal"):
        scale = int(re.findall(r"\d+", spark_type)[1]) if "," in spark_type else 0
        q = decimal.Decimal(1).scaleb(-scale)
        return lambda t: decimal.Decimal(t).quantize(q)
    if spark_type == "boolean":
        return lambda t: t == "t"
    if spark_type == "date":
        return datetime.date.fromisoformat
    if spark_type == "timestamp":
        return lambda t: datetime.datetime.fromisoformat(t).astimezone(datetime.timezone.utc)
    if spark_type == "timestamp_ntz":
        return datetime.datetime.fromisoformat
    return lambda t: t


def snapshot(src: Source) -> tuple[list[dict[str, Any]], int]:
    """Every row of the table (declared columns, converted) in one REPEATABLE READ transaction, and
    the log position it was read at."""
    names = list(declared_types(src.spec))
    cols = ", ".join(f"{_ident(c)}::text" for c in names)
    conv = {c: converter(t.simpleString()) for c, t in declared_types(src.spec).items()}
    with src.conn.transaction():
        src.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        at = lsn_int(src.one("SELECT pg_current_wal_flush_lsn()::text"))
        rows = src.conn.execute(f"SELECT {cols} FROM {qualified(src.spec.source.table)}").fetchall()
    return [{c: None if v is None else conv[c](v) for c, v in zip(names, r)} for r in rows], at


# ---- pgoutput (protocol version 1) ----------------------------------------------------------

@dataclass
class Change:
    """One row change of a committed transaction: ``kind`` insert | update | delete; ``new`` the
    new row (insert, update), ``old`` the old key or row (delete; update when its key changed or
    the table's identity is FULL); values as text (None: NULL, ``UNCHANGED``: an unchanged
    TOASTed value that pgoutput does not send). ``full``: ``old`` is the whole old row (identity
    FULL), not only its key (whose other columns pgoutput sends as NULL)."""

    kind: str
    new: dict[str, Any] | None
    old: dict[str, Any] | None
    commit: int  # the transaction's commit position
    full: bool = False


UNCHANGED = object()


@dataclass
class _Reader:
    data: bytes
    at: int = 0

    def take(self, n: int) -> bytes:
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def byte(self) -> str:
        return self.take(1).decode()

    def int(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        out = self.data[self.at:end].decode()
        self.at = end + 1
        return out


def _tuple(r: _Reader, names: list[str]) -> dict[str, Any]:
    n = r.int(">h")
    out: dict[str, Any] = {}
    for i in range(n):
        kind = r.byte()
        value: Any
        if kind == "n":
            value = None
        elif kind == "u":
            value = UNCHANGED
        else:
            value = r.take(r.int(">i")).decode()
        out[names[i] if i < len(names) else f"#{i}"] = value
    return out


@dataclass
class Decoded:
    changes: list[Change] = field(default_factory=list)
    relations: dict[int, tuple[str, list[tuple[str, int]]]] = field(default_factory=dict)  # oid -> (name, cols)
    truncated: bool = False


def decode(messages: Iterator[bytes], since: int, upto: int) -> Decoded:
    """The row changes of the transactions committed at positions in ``[since, upto)``."""
    out = Decoded()
    commit, keep = 0, False
    for data in messages:
        r = _Reader(bytes(data))
        tag = r.byte()
        if tag == "B":
            commit = r.int(">q")
            keep = since <= commit < upto
        elif tag == "R":
            oid = r.int(">I")
            ns, name = r.string(), r.string()
            r.byte()
            cols = []
            for _ in range(r.int(">h")):
                r.int(">b")
                cname = r.string()
                cols.append((cname, r.int(">I")))
                r.int(">i")
            out.relations[oid] = (f"{ns}.{name}", cols)
        elif tag in "IUD" and keep:
            names = [c for c, _ in out.relations[r.int(">I")][1]]
            old = new = None
            marker = r.byte()
            full = marker == "O"
            if marker in "KO":
                old = _tuple(r, names)
                marker = r.byte() if tag == "U" else ""
            if marker == "N":
                new = _tuple(r, names)
            kind = {"I": "insert", "U": "update", "D": "delete"}[tag]
            out.changes.append(Change(kind, new, old, commit, full))
        elif tag == "T" and keep:
            out.truncated = True
    return out


def peek(src: Source, upto: int) -> Iterator[bytes]:
    """The slot's messages of transactions committed before ``upto`` (it may return one more)."""
    s = src.spec.source
    rows = src.conn.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
        "'publication_names', %s)", (s.slot, lsn_text(upto), s.slot))
    for (data,) in rows:
        yield data
