"""SQL nodes: one Spark SQL query, parsed (sqlglot, Spark dialect) and bound to a relational plan
without Spark. ``parse_query`` reads the text; ``bind_query`` resolves it against the circuit's
relations into ``plan.Rel`` (whose columns are the node's columns); the IR lowers the plan."""
from .binder import bind_query
from .errors import Position, SqlError
from .parse import ParsedQuery, parse_query

__all__ = ["ParsedQuery", "Position", "SqlError", "bind_query", "parse_query"]
