"""Name resolution: which column of a relation a name in the query means.

A relation being built carries ``Field``s: the names a query may use for each of its columns
(qualified by a table alias or not). Resolution follows Spark: names are case-insensitive; an
unqualified name must be unique among the visible fields; an inner query sees the fields of the
query around it (a correlated reference) only where the binder allows it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from sqlglot import exp

from ..errors import did_you_mean, listing
from .errors import SqlError


@dataclass(frozen=True)
class Field:
    """One name for one column of a relation.

    ``hidden`` fields (helper columns: computed join keys, scalar subquery values) are reached
    only by their exact qualified name and never by ``*``. ``star`` is False for the two sides'
    columns of a ``USING`` key, which ``*`` shows once, as the merged column.
    """

    qualifier: str | None  # lower-case table alias, None for derived columns
    name: str  # as the user sees it
    column: str  # the column of the relation
    hidden: bool = False
    star: bool = True
    unqualified: bool = True  # may be named without its qualifier
    # a decorrelated subquery's copy of an outer column: (domain token, index). Found only when no
    # column of the subquery itself has the name (an inner name shadows an outer one, as in SQL)
    fallback: tuple[int, int] | None = None


# the fallback fields names resolved to, per domain being bound (``subqueries.decorrelate``)
RECORDERS: list[set[tuple[int, int]]] = []


@dataclass
class Scope:
    """The fields a query may name, plus the enclosing query's scope (for correlation)."""

    fields: list[Field]
    outer: "Scope | None" = None
    correlated: list[exp.Column] = field(default_factory=list)  # outer references resolved so far

    def qualifiers(self) -> list[str]:
        return list(dict.fromkeys(f.qualifier for f in self.fields if f.qualifier and not f.hidden))

    def names(self) -> list[str]:
        return list(dict.fromkeys(f.name for f in self.fields if not f.hidden))

    def find(self, column: exp.Column) -> list[Field]:
        """Fields ``column`` can mean in this scope alone."""
        name = column.name.lower()
        table = column.table.lower() if column.table else None
        if table is None:
            found = [f for f in self.fields if f.unqualified and not f.hidden and f.name.lower() == name]
        else:
            found = [f for f in self.fields if f.qualifier == table and f.name.lower() == name]
        own = [f for f in found if f.fallback is None]
        if own or not found:
            return own
        for recorder in RECORDERS:
            recorder.update(f.fallback for f in found if f.fallback is not None)
        return found

    def resolve(self, column: exp.Column, allow_outer: bool = False) -> Field:
        """The one field ``column`` names; an outer field (recorded in ``correlated``) when it is
        not found here and ``allow_outer``. Raises ``SqlError`` with a "did you mean"."""
        found = self.find(column)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise SqlError(f"column '{column.sql(dialect='spark')}' is ambiguous: it is a column of "
                           f"{listing(sorted({f.qualifier or '(derived)' for f in found}))}; qualify it "
                           f"(e.g. {found[0].qualifier or 't'}.{column.name})", column)
        scope = self.outer
        while scope is not None:
            if scope.find(column):
                if allow_outer:
                    self.correlated.append(column)
                    return scope.resolve(column, allow_outer=True)
                raise SqlError(f"'{column.sql(dialect='spark')}' refers to a column of the enclosing query "
                               f"(a correlated reference) where it is not supported: correlated subqueries may "
                               f"stand in WHERE and in the SELECT list of a query without GROUP BY, and not "
                               f"in FROM, in a set operation or in a WITH", column)
            scope = scope.outer
        raise self.unknown(column)

    def unknown(self, column: exp.Column) -> SqlError:
        if column.table:
            table = column.table.lower()
            quals = self.qualifiers() + (self.outer.qualifiers() if self.outer else [])
            if table not in quals:
                return SqlError(f"unknown table or alias '{column.table}' in '{column.sql(dialect='spark')}' "
                                f"(known here: {listing(quals)}){did_you_mean(table, quals)}", column)
            names = [f.name for f in self.fields if f.qualifier == table and not f.hidden]
            return SqlError(f"'{column.table}' has no column '{column.name}' (columns: {listing(names)})"
                            f"{did_you_mean(column.name, names) or _ci_hint(column.name, names)}", column)
        names = self.names()
        return SqlError(f"unknown column '{column.name}' (columns here: {listing(names)})"
                        f"{did_you_mean(column.name, names) or _ci_hint(column.name, names)}", column)

    def star(self, qualifier: str | None, node: exp.Expression) -> list[Field]:
        """The fields ``*`` or ``qualifier.*`` expands to, in order."""
        if qualifier is None:
            return [f for f in self.fields if f.star and not f.hidden and f.fallback is None]
        q = qualifier.lower()
        fields = [f for f in self.fields if f.qualifier == q and not f.hidden and f.fallback is None]
        if not fields:
            quals = self.qualifiers()
            raise SqlError(f"unknown table or alias '{qualifier}' in '{qualifier}.*' (known here: "
                           f"{listing(quals)}){did_you_mean(q, quals)}", node)
        return fields


def _ci_hint(name: str, names: Iterable[str]) -> str:
    """difflib misses a name that differs only in case; Spark would have accepted it anyway."""
    for n in names:
        if n.lower() == name.lower():
            return f" (did you mean '{n}'?)"
    return ""


def requalify(fields: Iterable[Field], qualifier: str | None) -> list[Field]:
    """The visible fields of a derived table, reachable as ``qualifier.name`` (hidden ones dropped)."""
    q = qualifier.lower() if qualifier else None
    return [replace(f, qualifier=q, star=True, unqualified=True) for f in fields if not f.hidden and f.star]


def fresh(base: str, taken: set[str], qualifier: str | None = None) -> str:
    """A column name not in ``taken`` (case-insensitively, as Spark compares them), readable:
    ``base``, else ``qualifier_base``, else ``base_2``, ..."""
    low = {t.lower() for t in taken}
    if base.lower() not in low:
        return base
    if qualifier and f"{qualifier}_{base}".lower() not in low:
        return f"{qualifier}_{base}"
    i = 2
    while f"{base}_{i}".lower() in low:
        i += 1
    return f"{base}_{i}"
