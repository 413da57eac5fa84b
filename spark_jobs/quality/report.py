"""Gate results as data: the report objects, their summary text, and their files on disk.

One report per timestep, ``<dir>/t<timestep:012d>.json``, plus an ``index.html`` rebuilt on every
write so a person can open one file and see every check of every timestep. Nothing here touches
Spark or Great Expectations, so the CLI can read reports cheaply.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import html
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_jobs.errors import DbspError, EXIT_QUALITY
from spark_jobs.state.fs import LocalFileSystem, filesystem_for

REPORT_NAME = re.compile(r"^t(\d{12})\.json$")
INDEX_NAME = "index.html"
INDEX_MAX_REPORTS = 200  # newest reports expanded in index.html; older ones are listed as links


@dataclass
class CheckResult:
    """One check on one target (``view:<name>`` or ``input:<name>``)."""

    name: str  # GE expectation name, or a dbsp_* built-in
    target: str
    policy: str  # "fail" | "warn"
    success: bool
    details: dict[str, Any] = field(default_factory=dict)  # JSON-able: counts, observed values, examples
    builtin: bool = False

    @property
    def status(self) -> str:
        """PASS, or WARN / FAIL by policy when the check did not hold."""
        if self.success:
            return "PASS"
        return "FAIL" if self.policy == "fail" else "WARN"

    @property
    def label(self) -> str:
        """The name with its arguments, so two checks of one kind on one target differ."""
        kwargs = self.details.get("kwargs") or {}
        if not kwargs:
            return self.name
        args = ", ".join(f"{k}={_short(v, 40)}" for k, v in kwargs.items())
        return f"{self.name}({args})"

    def short_details(self) -> str:
        """One line of what was observed: unexpected counts, observed value, examples, errors."""
        d = self.details
        parts: list[str] = []
        if d.get("exception"):
            parts.append(f"error: {_short(d['exception'], 160)}")
        if d.get("note"):
            parts.append(str(d["note"]))
        if self.builtin:
            parts.extend(f"{k}={v}" for k, v in d.items()
                         if isinstance(v, int) and not isinstance(v, bool))
        elif d.get("unexpected_count") is not None:
            parts.append(f"{d['unexpected_count']} of {d.get('element_count')} rows unexpected")
        elif "observed_value" in d:
            parts.append(f"observed {_short(d['observed_value'], 60)}")
        if not self.success:
            examples = d.get("examples") or d.get("partial_unexpected_list")
            if examples:
                parts.append(f"e.g. {_short(examples, 160)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CheckResult":
        return cls(name=data["name"], target=data["target"], policy=data["policy"],
                   success=bool(data["success"]), details=dict(data.get("details") or {}),
                   builtin=bool(data.get("builtin", False)))


@dataclass
class GateReport:
    """Every check of one timestep. ``failed`` decides the commit; ``warnings`` are only shown."""

    timestep: int
    results: list[CheckResult] = field(default_factory=list)
    elapsed_s: float = 0.0  # wall time of run_gate, for the logs
    # the gate runs before the commit: False until the timestep's manifest is published
    # (``mark_committed``); a report that stays False is of an attempt that never committed
    committed: bool = False

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.policy == "fail"]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.policy != "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        """Multi-line text for task logs and the CLI: a header, then one line per check."""
        head = (f"quality gate t={self.timestep}: {len(self.results)} checks, "
                f"{len(self.failed)} failed, {len(self.warnings)} warnings")
        if self.elapsed_s:
            head += f" ({self.elapsed_s:.2f}s)"
        if not self.results:
            return head + "\n  (no checks)"
        width = max(len(r.target) for r in self.results)
        lines = [head]
        for r in self.results:
            line = f"  {r.status:4s}  {r.target:<{width}s}  {r.label}"
            extra = r.short_details()
            lines.append(f"{line}  [{extra}]" if extra else line)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"timestep": self.timestep, "committed": self.committed, "passed": self.passed,
                "failed": len(self.failed), "warnings": len(self.warnings),
                "elapsed_s": round(self.elapsed_s, 3), "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GateReport":
        return cls(timestep=int(data["timestep"]),
                   results=[CheckResult.from_dict(r) for r in data.get("results", [])],
                   elapsed_s=float(data.get("elapsed_s") or 0.0),
                   committed=bool(data.get("committed", True)))  # reports before the flag: committed


class QualityGateFailed(DbspError):
    """Raised by ``enforce`` when a ``fail`` check did not hold; the step must not commit."""
    exit_code = EXIT_QUALITY
    retryable = False

    def __init__(self, report: GateReport, context: str = ""):
        self.report = report
        self.context = context  # e.g. the input files behind the failing rows (DAG check task)
        lines = [f"quality gate failed at timestep {report.timestep}: "
                 f"{len(report.failed)} failing check(s)"]
        for r in report.failed:
            extra = r.short_details()
            lines.append(f"  FAIL {r.target} {r.label}" + (f": {extra}" if extra else ""))
        if context:
            lines.append(context)
        super().__init__("\n".join(lines))

    def user_message(self, reset_command: str | None = None) -> str:
        return f"quality gate failed; nothing was committed:\n{self.report.summary()}"


# ---- JSON-able values -----------------------------------------------------------------------

def jsonable(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps`` accepts and that reads well: dates as ISO text,
    decimals and non-finite floats as text, bytes as base64, Spark Rows as dicts."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    as_dict = getattr(value, "asDict", None)  # pyspark Row
    if callable(as_dict):
        return {str(k): jsonable(v) for k, v in as_dict().items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- files ----------------------------------------------------------------------------------

def report_name(timestep: int) -> str:
    return f"t{timestep:012d}.json"


def write_report(report: GateReport, directory: str) -> str:
    """Write ``<directory>/t<timestep:012d>.json`` (atomically, replacing a retry's report) and
    rebuild ``index.html`` from every report in the directory. Returns the JSON path."""
    fs = filesystem_for(directory)
    directory = fs.normalize(directory)
    path = fs.join(directory, report_name(report.timestep))
    text = json.dumps(jsonable(report.to_dict()), indent=2, ensure_ascii=False)
    fs.publish_text(path, text + "\n", tmp_prefix=".tmp-")
    # the index is derived from the reports (rebuilt at every write): replaced atomically, not flushed
    fs.publish_text(fs.join(directory, INDEX_NAME), render_index(directory), tmp_prefix=".tmp-", durable=False)
    return path


def mark_committed(directory: str, timestep: int) -> None:
    """Record in the report of ``timestep`` that its manifest was published (call after commit).
    Best effort: the commit stands whatever happens here (the manifests are the truth; a failure
    to rewrite the report leaves it saying "not committed")."""
    fs = filesystem_for(directory)
    directory = fs.normalize(directory)
    path = fs.join(directory, report_name(timestep))
    try:
        if not fs.exists(path):
            return
        report = load_report(path)
        if not report.committed:
            report.committed = True
            write_report(report, directory)
    except (OSError, ValueError, KeyError):
        return


def load_report(path: str) -> GateReport:
    """Read a report written by ``write_report``."""
    return GateReport.from_dict(json.loads(filesystem_for(path).read_text(path)))


def list_reports(directory: str) -> list[tuple[int, str]]:
    """(timestep, file name) of every report in ``directory``, oldest first."""
    fs = filesystem_for(directory)
    found = []
    for name in fs.listdir(fs.normalize(directory)):
        m = REPORT_NAME.match(name)
        if m:
            found.append((int(m.group(1)), name))
    return sorted(found)


# the plugin's pages share it (quality reports, view events)
PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
tr.PASS td.status { color: #1a7f37; } tr.WARN td.status { color: #9a6700; font-weight: bold; }
tr.FAIL td.status { color: #cf222e; font-weight: bold; } tr.FAIL { background: #fff5f5; }
tr.first td { border-top: 2px solid #888; }
code, pre { font-size: 0.85em; } pre { white-space: pre-wrap; margin: 0.3em 0 0; }
.uncommitted { color: #cf222e; }
"""


def render_index(directory: str) -> str:
    """The HTML page: newest timestep first, one row per check, details folded away."""
    fs = filesystem_for(directory)
    directory = fs.normalize(directory)
    reports = list_reports(directory)[::-1]
    shown, older = reports[:INDEX_MAX_REPORTS], reports[INDEX_MAX_REPORTS:]
    rows: list[str] = []
    totals = {"PASS": 0, "WARN": 0, "FAIL": 0}
    for timestep, name in shown:
        html_rows, counts = _report_rows(fs, fs.join(directory, name), timestep, name)
        rows.extend(html_rows)
        for status, n in counts.items():
            totals[status] += n
    older_html = ""
    if older:
        links = ", ".join(f'<a href="{_e(n)}">{t}</a>' for t, n in older)
        older_html = f"<p>Older reports ({len(older)}, JSON only): {links}</p>"
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Quality reports</title>"
        f"<style>{PAGE_STYLE}</style></head><body>\n<h1>Quality reports</h1>\n"
        f"<p>{len(reports)} timesteps; checks shown: {totals['PASS']} passed, "
        f"{totals['WARN']} warnings, {totals['FAIL']} failed. Generated {generated}.</p>\n"
        "<table><thead><tr><th>timestep</th><th>check</th><th>target</th><th>policy</th>"
        "<th>status</th><th>details</th></tr></thead><tbody>\n"
        + "\n".join(rows) + "\n</tbody></table>\n" + older_html + "</body></html>\n")


# rendered rows of the reports on this machine's disk, by path and the file's identity: a long
# run's index shows 200 reports and is rebuilt twice per step, and each report is parsed once
_ROWS: dict[str, tuple[tuple[int, int, int], tuple[list[str], dict[str, int]]]] = {}


def _report_rows(fs, path: str, timestep: int, name: str) -> tuple[list[str], dict[str, int]]:  # noqa: ANN001
    """The index rows of one report and its checks' statuses counted (cached for local files)."""
    key = None
    if isinstance(fs, LocalFileSystem):
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        cached = _ROWS.get(path)
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
    rendered = _render_rows(path, timestep, name)
    if key is not None:
        if len(_ROWS) > 4 * INDEX_MAX_REPORTS:
            _ROWS.clear()
        _ROWS[path] = (key, rendered)
    return rendered


def _render_rows(path: str, timestep: int, name: str) -> tuple[list[str], dict[str, int]]:
    counts = {"PASS": 0, "WARN": 0, "FAIL": 0}
    try:
        report = load_report(path)
    except (OSError, ValueError, KeyError) as exc:
        return ([f'<tr class="FAIL first"><td><a href="{_e(name)}">{timestep}</a></td>'
                 f'<td colspan="5">unreadable report: {_e(str(exc))}</td></tr>'], counts)
    rows: list[str] = []
    link = f'<a href="{_e(name)}">{timestep}</a>'
    if not report.committed:
        link += '<br><small class="uncommitted">not committed</small>'
    if not report.results:
        rows.append(f'<tr class="PASS first"><td>{link}</td>'
                    '<td colspan="5">(no checks)</td></tr>')
    for i, r in enumerate(report.results):
        counts[r.status] += 1
        full = json.dumps(r.details, indent=1, ensure_ascii=False)
        cls = r.status + (" first" if i == 0 else "")
        ts_cell = link if i == 0 else ""
        rows.append(
            f'<tr class="{cls}"><td>{ts_cell}</td><td>{_e(r.label)}'
            f'{" <small>(built-in)</small>" if r.builtin else ""}</td><td>{_e(r.target)}</td>'
            f'<td>{_e(r.policy)}</td><td class="status">{r.status}</td>'
            f'<td>{_e(r.short_details())}<details><summary>all details</summary>'
            f'<pre>{_e(full)}</pre></details></td></tr>')
    return rows, counts


def _e(text: str) -> str:
    return html.escape(text, quote=True)
