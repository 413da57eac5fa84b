"""The documentation stays true to the code: the site builds with --strict, every repository path
it cites exists, its one exit-codes table lists the codes the CLI returns, and the README stays a
short tour whose circuit is the example file its commands copy.

The fenced examples themselves (YAML circuits, shell commands) are checked by
tests/test_docs_examples.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# what a newcomer reads: the README, the architecture, the folder READMEs and the site's pages
FOLDER_READMES = ("config/README.md", "dags/README.md", "docker/README.md", "bench/README.md",
                  "bench/results/history.md")


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return files + [ROOT / rel for rel in FOLDER_READMES]


# top-level folders of the repository: a cited path starting with one must exist from the root
TOP = ("spark_jobs", "tests", "circuits", "config", "scripts", "bench", "dags", "docker", "docs", ".ci")
# paths the documented commands create (they are not in the repository until someone runs them)
CREATED = {"circuits/my_view.yaml", "bench/results/smoke", "bench/results/recursion-smoke", "tests/screenshots",
           "bench/results/recursion-smoke.json", "bench/results/recursion-smoke.md",
           "docker/.env"}
FILE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".md", ".sh", ".properties", ".toml", ".lock", ".png",
                 ".csv", ".txt", ".html")
PACKAGE_DIRS = {p.name for p in (ROOT / "spark_jobs").rglob("*") if p.is_dir() and p.name != "__pycache__"}


def cited_paths(text: str) -> list[str]:
    """Repository paths a document names in backquotes: words with a slash whose first part is a
    top-level folder or a sub-package of spark_jobs (``executor/loop.py``); ``a/b.Name`` (a module
    and one of its names) stands for ``a/b.py``. Placeholders (``<t>``, ``{a,b}``, ``...``, ``*``)
    and URLs are not paths."""
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in span.split():
            word = word.strip(",;:()[]'\"").rstrip(".")
            if "/" not in word or "://" in word or any(c in word for c in "<>{}$*=") or "..." in word:
                continue
            first = word.split("/", 1)[0]
            if first in TOP or first in PACKAGE_DIRS:
                found.append(word)
    return found


def resolve(word: str, doc: Path) -> bool:
    path = word.rstrip("/")
    if path in CREATED:
        return True
    candidates = [path]
    last = path.rsplit("/", 1)[-1]
    if "." in last and not last.endswith(FILE_SUFFIXES) and not last.startswith("."):
        candidates.append(path.rsplit("/", 1)[0] + "/" + last.split(".", 1)[0] + ".py")  # module.Name
    if path.split("/", 1)[0] in TOP:
        return any((ROOT / c).exists() for c in candidates)
    bases = [doc.parent, ROOT / "spark_jobs", *(p for p in (ROOT / "spark_jobs").rglob("*") if p.is_dir())]
    return any((base / c).exists() for base in bases for c in candidates)


def test_every_path_the_docs_cite_exists():
    missing = [f"{doc.relative_to(ROOT)}: `{word}`" for doc in doc_files()
               for word in cited_paths(doc.read_text(encoding="utf-8")) if not resolve(word, doc)]
    assert not missing, "paths cited in the documentation that do not exist:\n" + "\n".join(missing)


def test_every_module_the_docs_cite_exists():
    """``spark_jobs.a.b`` (or ``spark_jobs.a.b.name``) names a module or package of the project."""
    missing = []
    for doc in doc_files():
        for dotted in re.findall(r"`(spark_jobs(?:\.\w+)+)", doc.read_text(encoding="utf-8")):
            parts = dotted.split(".")
            ok = any((ROOT / Path(*parts[:n])).with_suffix(".py").exists() or (ROOT / Path(*parts[:n])).is_dir()
                     for n in (len(parts), len(parts) - 1) if n > 1)
            if not ok:
                missing.append(f"{doc.relative_to(ROOT)}: `{dotted}`")
    assert not missing, "modules cited in the documentation that do not exist:\n" + "\n".join(missing)


def test_the_path_check_can_fail(tmp_path):
    doc = tmp_path / "x.md"
    assert cited_paths("see `spark_jobs/executor/operators/nested.py` and `inbox/orders`") == [
        "spark_jobs/executor/operators/nested.py"]
    assert not resolve("spark_jobs/executor/operators/nested.py", doc)
    assert not resolve("operators/arrow.py", doc)
    assert resolve("executor/loop.py", doc) and resolve("state/lookup.TraceFiles", doc)


def test_the_site_builds_with_strict(tmp_path):
    """What `make docs` runs: a broken link or anchor, a page out of the navigation or a missing
    included file is a warning, and --strict makes a warning fail the build."""
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_make_docs_builds_the_site_with_strict():
    dry = subprocess.run(["make", "-n", "docs"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert re.search(r"-m mkdocs build --strict\b", dry), dry


def _cli_exit_codes() -> set[int]:
    """Every exit code the CLI can end with, read from the code: the ``EXIT_*`` codes of the error
    hierarchy (``spark_jobs/errors.py``), any literal ``exit_code=N``, the CLI's ``return N``s and
    its named codes."""
    from spark_jobs import errors

    codes = {0} | {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    for path in (ROOT / "spark_jobs").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        codes |= {int(n) for n in re.findall(r"\bexit_code\s*(?::\s*int)?\s*=\s*(\d+)", text)}
        codes |= {int(n) for n in re.findall(r"\bEXIT_CODE\s*(?::\s*int)?\s*=\s*(\d+)", text)}
        if path.parent.name == "cli":
            codes |= {int(n) for n in re.findall(r"\breturn\s+(\d+)\b", text)}
            codes |= {int(n) for n in re.findall(r"^[A-Z_]+\s*=\s*(\d{2,3})\b", text, flags=re.M)}
    return codes


def _documented_exit_codes() -> set[int]:
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## Exit codes"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    return {int(n) for n in re.findall(r"^\| `(\d+)` \|", section, flags=re.M)}


def test_one_exit_codes_table_lists_every_code_of_the_cli():
    assert _documented_exit_codes() == _cli_exit_codes()
    tables = [doc for doc in doc_files() if re.search(r"^#+ Exit codes", doc.read_text(encoding="utf-8"), re.M)]
    assert tables == [ROOT / "docs" / "reference" / "cli.md"], tables


def test_the_readme_is_a_short_tour_with_the_example_circuit():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for heading in ("## Two commands", "## A five-minute tour", "## Documentation"):
        assert heading in text, heading
    circuit = re.search(r"```yaml\n(.*?)```", text[text.index("## A five-minute tour"):], flags=re.S).group(1)
    example = (ROOT / "circuits" / "examples" / "my_view.yaml").read_text(encoding="utf-8")
    body = "".join(line for line in example.splitlines(keepends=True) if not line.startswith("#"))
    assert circuit == body
    assert "cp circuits/examples/my_view.yaml circuits/" in text


@pytest.mark.parametrize("doc", ["README.md", "docs/index.md"])
def test_every_page_of_the_site_is_linked_from_the_start(doc):
    """The README (on the repository's front page) and the site's home link every page."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    linked = {m for m in re.findall(r"\]\(([^)#\s]+)", text)}
    base = (ROOT / doc).parent
    linked = {os.path.normpath(base / m) for m in linked}
    pages = {os.path.normpath(p) for p in (ROOT / "docs").rglob("*.md")
             if p.name != "index.md" and not _included(p)}
    pages |= {os.path.normpath(ROOT / rel) for rel in ("config/README.md", "dags/README.md", "docker/README.md",
                                                        "bench/README.md", "ARCHITECTURE.md")}
    if doc == "docs/index.md":  # the site links its own pages that include the folder READMEs
        pages = {p for p in pages if p.startswith(str(ROOT / "docs"))} | {
            os.path.normpath(p) for p in (ROOT / "docs").rglob("*.md") if _included(p)}
    else:
        pages.add(os.path.normpath(ROOT / "docs" / "index.md"))
    assert pages <= linked, sorted(Path(p).relative_to(ROOT).as_posix() for p in pages - linked)


def _included(page: Path) -> bool:
    return page.read_text(encoding="utf-8").lstrip().startswith("<!-- This page is ")
