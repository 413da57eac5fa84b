"""The sqllogictest file format (SQLite's), as records.

A record is separated from the next by a blank line: ``statement ok`` / ``statement error``
followed by SQL, or ``query <types> <sort> [label]`` followed by SQL, ``----`` and the expected
values (one per line, or ``N values hashing to H``). Conditions before a record: ``skipif <db>``
(skip it on that database) and ``onlyif <db>`` (run it only there); this runner is the database
``dbsp``. ``hash-threshold N`` and ``halt`` are control lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ME = "dbsp"  # the database name skipif/onlyif compare with
_HASHED = re.compile(r"^(\d+) values hashing to ([0-9a-f]{32})$")


@dataclass
class Statement:
    sql: str
    ok: bool  # statement ok (else: statement error, expected to fail)
    line: int


@dataclass
class Query:
    sql: str
    types: str  # one letter per column: I (integer), R (real), T (text)
    sort: str  # nosort | rowsort | valuesort
    label: str | None
    values: list[str] | None  # the expected values, flattened, as printed (None when hashed)
    hashed: tuple[int, str] | None  # (number of values, md5 of them)
    line: int


@dataclass
class Parsed:
    records: list  # Statement | Query, in order
    skipped: int  # records skipped by skipif/onlyif
    halted: bool


def parse(text: str) -> Parsed:
    lines = text.split("\n")
    records: list = []
    skipped = 0
    i = 0
    skip = False
    while i < len(lines):
        raw = lines[i].rstrip("\r")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        words = stripped.split()
        head = words[0]
        if head == "halt":
            return Parsed(records, skipped, True)
        if head == "hash-threshold":
            i += 1
            continue
        if head in ("skipif", "onlyif"):
            db = words[1] if len(words) > 1 else ""
            if (head == "skipif" and db == ME) or (head == "onlyif" and db != ME):
                skip = True
            i += 1
            continue
        start = i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            body.append(lines[i].rstrip("\r"))
            i += 1
        expected: list[str] = []
        if i < len(lines) and lines[i].strip() == "----":
            i += 1
            while i < len(lines) and lines[i].strip():
                expected.append(lines[i].strip())
                i += 1
        sql = "\n".join(body)
        if head == "statement":
            record = Statement(sql, len(words) < 2 or words[1] == "ok", start)
        elif head == "query":
            types = words[1] if len(words) > 1 else ""
            sort = words[2] if len(words) > 2 else "nosort"
            label = words[3] if len(words) > 3 else None
            hashed = None
            if len(expected) == 1 and (m := _HASHED.match(expected[0])):
                hashed = (int(m.group(1)), m.group(2))
            record = Query(sql, types, sort, label, None if hashed else expected, hashed, start)
        else:
            record = None  # an unknown directive: ignored
        if skip:
            skipped += record is not None
            skip = False
        elif record is not None:
            records.append(record)
    return Parsed(records, skipped, False)
