"""Turn a benchmark run into files: results.json (everything), results.csv (one row per workload
and size), results.md (the tables for the README) and step_vs_recompute.png (matplotlib, Agg).

Only formatting here: every number is computed by the runner, so the JSON is the source of
truth and the other files can be regenerated from it (``python -m bench.report results.json``).
"""
from __future__ import annotations

import csv
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

CSV_COLUMNS = [
    "workload", "size", "input_rows_total", "change_rows_median", "step_median_s", "jobs_median",
    "compiled_median", "recompute_s", "ratio_step_over_recompute", "speedup_recompute_over_step", "duckdb_s",
    "floor_s", "reference_s", "step_over_reference", "engine", "bytes_written_median", "bytes_actually_read_median",
    "bytes_read_median", "view_bytes_read_median", "state_bytes",
    "break_even_rows", "changes_per_s_largest", "correct",
]


def floor(results: dict[str, Any]) -> dict[str, Any] | None:
    """The identity circuit's step at the fixed change size (the first size measured)."""
    ident = results.get("workloads", {}).get("identity")
    sizes = _ok(ident["sizes"]) if ident else []
    if not sizes:
        return None
    s = sizes[0]
    return {"step_median_s": s["step_median_s"], "jobs_median": s["jobs_median"],
            "change_rows_median": s["change_rows_median"], "size": s["size"]}


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat record per workload and size (the CSV and the main table)."""
    fl = floor(results)
    out = []
    for key, wl in results.get("workloads", {}).items():
        for s in _ok(wl["sizes"]):
            out.append({
                "workload": key, "size": s["size"], "input_rows_total": s["input_rows_total"],
                "change_rows_median": s["change_rows_median"], "step_median_s": s["step_median_s"],
                "jobs_median": s["jobs_median"], "compiled_median": s.get("compiled_median"),
                "recompute_s": s["recompute"]["median_s"],
                "ratio_step_over_recompute": s["ratio_step_over_recompute"],
                "speedup_recompute_over_step": s["speedup_recompute_over_step"],
                "duckdb_s": (s.get("duckdb") or {}).get("median_s"),
                "floor_s": fl["step_median_s"] if fl else None,
                "reference_s": s.get("reference_median_s"),
                "step_over_reference": s.get("step_over_reference"),
                "engine": _engine(s),
                "bytes_written_median": s["bytes_written_median"],
                "bytes_actually_read_median": s.get("bytes_actually_read_median"),
                "bytes_read_median": s["bytes_read_median"],
                "view_bytes_read_median": s["view_bytes_read_median"],
                "state_bytes": s["state_bytes"],
                "break_even_rows": (s.get("break_even") or {}).get("rows"),
                "changes_per_s_largest": s.get("changes_per_s_largest"),
                "correct": (s["correct"]["ok"] and (s.get("duckdb") or {}).get("matches_spark", True)
                            and (s.get("reference_correct") or {}).get("ok", True)),
            })
    return out


def _engine(s: dict[str, Any]) -> str:
    """Which engine ran the measured steps: "arrow", "spark", or "arrow 3 / spark 2"."""
    steps = (s.get("engines") or {}).get("steps") or {}
    if len(steps) == 1:
        return next(iter(steps))
    return " / ".join(f"{k} {v}" for k, v in sorted(steps.items())) or "spark"


def _ok(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sizes whose steps were measured (a size that failed early has only an error)."""
    return [s for s in sizes if "step_median_s" in s]


def failures(results: dict[str, Any]) -> list[str]:
    """Every error the run recorded: failed sizes, failed sweep points, failed extras."""
    out = []
    for key, wl in results.get("workloads", {}).items():
        for s in wl["sizes"]:
            for p in s.get("sweep") or []:
                if "error" in p:
                    out.append(f"{key} {s['size']}, sweep step of {p['change_rows_target']:,} changed rows: {p['error']}")
            if "error" in s and not any("error" in p for p in s.get("sweep") or []):
                out.append(f"{key} {s['size']}: {s['error']}")
    return out


def write_csv(results: dict[str, Any], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows(results))


# ---- markdown ------------------------------------------------------------------------------

def _kb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f} KiB" if n < 10 * 1024 * 1024 else f"{n / 1048576:,.1f} MiB"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _table(header: list[str], body: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return lines + [""]


def markdown(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    plan = results.get("plan", {})
    fl = floor(results)
    lines = [
        f"Run {meta.get('started_at', '?')}{' (smoke)' if meta.get('smoke') else ''}: "
        f"{meta.get('spark_conf', {}).get('spark.master', '?')}, {meta.get('cpus', '?')} CPUs, "
        f"pyspark {meta.get('pyspark', '?')}, commit {meta.get('commit') or '?'}, load average {_load(meta)}, "
        f"{meta.get('duration_s', 0) / 60:.1f} min"
        + (f", extra conf {meta['extra_conf']}" if meta.get("extra_conf") else "") + ".",
        f"Each step figure is the median of {plan.get('steps')} steps of ~{plan.get('change_rows')} changed "
        f"rows after {plan.get('warmup')} warm-up steps; recompute and DuckDB are medians of "
        f"{plan.get('recompute_runs')} runs after one warm-up; all in one Spark session.",
        "",
    ]
    body = []
    for r in rows(results):
        body.append([r["workload"], r["size"], f"{r['input_rows_total']:,}", f"{r['change_rows_median']:,}",
                     _s(r["step_median_s"]), r["jobs_median"],
                     "-" if r["compiled_median"] is None else r["compiled_median"], _s(r["recompute_s"]),
                     f"{r['speedup_recompute_over_step']:.2f}x", _s(r["duckdb_s"]),
                     _s(r["reference_s"]), "-" if r["step_over_reference"] is None else f"{r['step_over_reference']:.2f}x",
                     r["engine"], _kb(r["bytes_written_median"]), _kb(r["bytes_actually_read_median"]),
                     _kb(r["state_bytes"]), "yes" if r["correct"] else "**NO**"])
    lines += _table(["workload", "size", "input rows", "change rows", "step s", "jobs/step",
                     "classes compiled/step", "recompute s",
                     "recompute ÷ step", "DuckDB s", "hand-written step s", "step ÷ hand-written",
                     "engine", "written/step", "read/step", "state", "correct"], body)
    lines += targets(results)
    if fl:
        lines.append(f"**Floor** (identity circuit, {fl['change_rows_median']:,}-row change, {fl['size']}): "
                     f"{fl['step_median_s']:.2f} s and {fl['jobs_median']} Spark jobs per step.")
        lines.append("")
    sweeps = [(k, s) for k, wl in results.get("workloads", {}).items() for s in _ok(wl["sizes"]) if s.get("sweep")]
    if sweeps:
        lines.append("Change-size sweep (at the largest state of each workload):")
        lines.append("")
        body = []
        for key, s in sweeps:
            for p in s["sweep"]:
                if "error" in p:
                    body.append([key, s["size"], f"{p['change_rows_target']:,}", "**failed**", "-", "-", "-", "-", "-"])
                    continue
                ok = (p.get("correct") or {}).get("ok")  # the view after this point (the base: before the sweep)
                body.append([key, s["size"], f"{p['change_rows_median']:,}", _s(p["step_median_s"]), p["jobs_median"],
                             _s(s["recompute"]["median_s"]), f"{p['changes_per_s']:,.0f}", _kb(p["bytes_written_median"]),
                             ("yes" if ok else "**NO**") if ok is not None else
                             ("yes (before the sweep)" if "correct" not in p and s["correct"]["ok"] else "not checked")])
        lines += _table(["workload", "size", "change rows", "step s", "jobs", "recompute s", "changes/s",
                         "written/step", "view correct after it"], body)
        for key, s in sweeps:
            for p in s["sweep"]:
                modes, alt = (p.get("modes") or {}).get("steps") or {}, p.get("alt")
                if not modes and not alt:
                    continue
                line = (f"- {key} {s['size']}, {p['change_rows_median']:,} rows: the policy ran "
                        f"{'/'.join(modes) or '?'} on {'/'.join((p.get('engines') or {}).get('steps') or {}) or '?'}, "
                        f"{_s(p['step_median_s'])} s")
                if alt:
                    alt_ok = (alt.get("correct") or {}).get("ok")
                    line += (f"; with {alt['conf']} ({'/'.join((alt.get('modes') or {}).get('steps') or {}) or '?'} on "
                             f"{'/'.join((alt.get('engines') or {}).get('steps') or {}) or '?'}) {_s(alt['step_median_s'])} s"
                             f" (view correct after it: {alt_ok}); policy / cheaper of the two: "
                             f"{p['step_median_s'] / min(p['step_median_s'], alt['step_median_s']):.2f}x")
                reasons = (p.get("modes") or {}).get("reasons") or []
                lines.append(line + (f". Cost model: {reasons[0]}" if reasons else ""))
            be = s.get("break_even") or {}
            lines.append(f"- {key} {s['size']}: break-even change size "
                         f"{'~' + format(be['rows'], ',') + ' rows' if be.get('rows') else 'n/a'} ({be.get('note', '')}).")
        lines.append("")
    slopes = [(k, wl["slope"]) for k, wl in results.get("workloads", {}).items() if wl.get("slope")]
    if slopes:
        lines.append("Growth with the state (fixed change size):")
        lines.append("")
        body = [[k, f"{sl['state_growth']}x", f"{sl['step_growth']}x", f"{sl['recompute_growth']}x",
                 f"{sl['step_s_per_million_rows']:.2f}", f"{sl['recompute_s_per_million_rows']:.2f}"]
                for k, sl in slopes]
        lines += _table(["workload", "state grew", "step grew", "recompute grew", "step s per 1M rows",
                         "recompute s per 1M rows"], body)
    fails = failures(results)
    if fails:
        lines.append("**Failures** (recorded, the run went on):")
        lines.append("")
        lines += [f"- {f}" for f in fails] + [""]
    abs_ = [(k, s) for k, wl in results.get("workloads", {}).items() for s in wl["sizes"] if s.get("ab")]
    if abs_:
        lines.append("A/B of a Spark setting (steps alternate base/variant in one session, ABBA order):")
        lines.append("")
        body = []
        for key, s in abs_:
            ab = s["ab"]
            conf = ", ".join(f"{k}={v}" for k, v in ab["conf"].items())
            body.append([key, s["size"], conf, f"{_s(ab['base']['step_median_s'])} s / {ab['base']['jobs_median']}",
                         f"{_s(ab['variant']['step_median_s'])} s / {ab['variant']['jobs_median']}",
                         f"{ab['speedup']:.2f}x"])
        lines += _table(["workload", "size", "variant", "base: step / jobs", "variant: step / jobs",
                         "speedup"], body)
    profiles = [(k, s) for k, wl in results.get("workloads", {}).items() for s in wl["sizes"] if s.get("profile")]
    for key, s in profiles:
        p = s["profile"]
        lines.append(f"Where one {key} {s['size']} step spends its time ({p['seconds']:.2f} s, {p['jobs']} Spark jobs "
                     f"with {p['tasks']} tasks, {p['single_task_jobs']} jobs single-task; some Spark job was running "
                     f"during {p['jobs_busy_s']:.2f} s of it):")
        lines.append("")
        body = [[ph["phase"], _s(ph["seconds"]), ph["jobs"], _s(ph["jobs_busy_s"]),
                 _s(max(0.0, ph["seconds"] - ph["jobs_busy_s"]))]
                for ph in sorted(p["phases"], key=lambda ph: -ph["seconds"])]
        lines += _table(["phase", "seconds", "jobs", "seconds with a job running", "seconds driver only"], body)
        sites = p.get("call_sites") or []
        if sites:
            top = ", ".join(f"`{c['call_site']}` ({c['jobs']} jobs)" for c in sites[:4])
            lines.append(f"Jobs by call site: {top}.")
            lines.append("")
        if p.get("call_tree"):
            lines += ["The call tree of one more such step (pyinstrument):", "", "```", p["call_tree"], "```", ""]
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[str]:
    """Issue #14's targets for W1 Q3 (1,000-row change) and the floor, against what was measured."""
    sizes = {s["size"]: s for s in _ok((results.get("workloads", {}).get("w1") or {}).get("sizes", []))}
    if not sizes:
        return []
    out = []
    steps = ", ".join(f"{k} {s['step_median_s']:.2f} s" for k, s in sizes.items())
    out.append(f"- step <= 0.6 s at every size: {steps}: "
               f"{'met' if all(s['step_median_s'] <= 0.6 for s in sizes.values()) else 'missed'}")
    for size, want in (("sf3", 8), ("sf10", 20)):
        if size in sizes:
            got = sizes[size]["speedup_recompute_over_step"]
            out.append(f"- recompute ÷ step >= {want}x at {size}: {got:.1f}x: {'met' if got >= want else 'missed'}")
    duck = (sizes.get("sf10") or {}).get("duckdb") or {}
    if duck.get("median_s"):
        step = sizes["sf10"]["step_median_s"]
        out.append(f"- step faster than DuckDB's full recompute at sf10: {step:.2f} s vs {duck['median_s']:.2f} s: "
                   f"{'met' if step < duck['median_s'] else 'missed'}")
    fl = floor(results)
    if fl:
        out.append(f"- identity floor <= 0.3 s: {fl['step_median_s']:.2f} s: {'met' if fl['step_median_s'] <= 0.3 else 'missed'}")
    big = sizes[list(sizes)[-1]]
    for p in big.get("sweep") or []:
        if p.get("change_rows_target") == 100_000 and "step_median_s" in p:
            checked = p.get("correct") or {}  # checked after this point's steps (sweep_check)
            out.append(f"- a 100,000-row change at {big['size']}: {p['step_median_s']:.2f} s on {_engine(p)}, "
                       f"view correct after it: {checked.get('ok', 'not checked')}")
    return ["**w1** (Q3) targets of issue #14:", "", *out, ""]


def _load(meta: dict[str, Any]) -> str:
    a, b = meta.get("loadavg_start"), meta.get("loadavg_end")
    if not a:
        return "?"
    return f"{a[0]:.1f}" + (f" -> {b[0]:.1f}" if b else "")


# ---- plot ----------------------------------------------------------------------------------

def plot(results: dict[str, Any], path: Path) -> None:
    """Left: step vs recompute (and DuckDB, floor) as the state grows. Right: step time vs
    change size at the largest state, with the recompute as the break-even line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    wls = results.get("workloads", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"w1": "tab:blue", "w1q10": "tab:green", "w2": "tab:orange", "identity": "tab:gray"}
    for key, wl in wls.items():
        c = colors.get(key, None)
        sizes = _ok(wl["sizes"])
        if not sizes:
            continue
        xs = [s["input_rows_total"] for s in sizes]
        left.plot(xs, [s["step_median_s"] for s in sizes], "o-", color=c, label=f"{key} step")
        if key != "identity":
            left.plot(xs, [s["recompute"]["median_s"] for s in sizes], "s--", color=c,
                      label=f"{key} Spark recompute")
            dd = [(x, s["duckdb"]["median_s"]) for x, s in zip(xs, sizes) if s.get("duckdb")]
            if dd:
                left.plot(*zip(*dd), "^:", color=c, label=f"{key} DuckDB recompute")
        for s in sizes:
            if s.get("sweep"):
                pts = [(p["change_rows_median"], p["step_median_s"]) for p in s["sweep"] if "error" not in p]
                right.plot(*zip(*pts), "o-", color=c, label=f"{key} {s['size']} step")
                if key != "identity":
                    right.axhline(s["recompute"]["median_s"], color=c, ls="--", lw=1,
                                  label=f"{key} {s['size']} recompute")
    fl = floor(results)
    if fl:
        left.axhline(fl["step_median_s"], color="black", ls=":", lw=1, label="floor (identity step)")
    change = results.get("plan", {}).get("change_rows", 1000)
    for ax, title, xlabel in ((left, f"Step ({change:,}-row change) vs full recompute", "input rows (state size)"),
                              (right, "Step time vs change size", "changed rows per step")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("seconds (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if ax.has_data():
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(results: dict[str, Any], out: Path, plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results["floor"] = floor(results)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    write_csv(results, out / "results.csv")
    (out / "results.md").write_text(markdown(results) + "\n", encoding="utf-8")
    if plots:
        plot(results, out / "step_vs_recompute.png")


if __name__ == "__main__":  # regenerate csv/md/png from a results.json
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/results.json")
    write_all(json.loads(src.read_text(encoding="utf-8")), src.parent)


def write_results(name: str, result: dict[str, Any], extra: dict[str, Any], before: tuple[float, ...],
                  out: str | None, render: Callable[[dict[str, Any], dict[str, Any]], str]) -> None:
    """``<name>.json`` and ``<name>.md`` under ``out`` (default bench/results): the result with
    when, which commit, the cores and the load around the run, so every figure says its context."""
    from spark_jobs.config import PROJECT_ROOT

    commit = os.popen(f"git -C {PROJECT_ROOT} rev-parse --short HEAD 2>/dev/null").read().strip()
    meta = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "cores": os.cpu_count(), "loadavg_before": before, "loadavg_after": os.getloadavg(),
            **extra, "under_load": True}
    folder = Path(out) if out else PROJECT_ROOT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({**meta, **result}, indent=1, default=str))
    text = render(result, meta)
    (folder / f"{name}.md").write_text(text)
    print(text)
