"""Every YAML example and shell command of the documentation is validated or run, so none can rot.

The convention (docs/contributing/testing.md, "The documentation"): the line right before a
```yaml or ```bash fence is an HTML comment that says how the block is checked (invisible on
GitHub and in the site):

    <!-- check: circuit [FILE] -->   yaml: a whole circuit, validated as `dbsp validate` does;
                                     with FILE, the block is that file (its leading comments aside)
    <!-- check: fragment BASE -->    yaml: a part of a circuit, merged into the circuit BASE (a file
                                     of the repository: top-level mappings merged key by key, the
                                     rest replaced) and validated
    <!-- check: profile -->          yaml: a part of a profile, loaded as `config/` profiles are
    <!-- check: yaml -->             yaml: parsed only (not a circuit nor a profile)
    <!-- check: parse -->            bash: every command is checked without running it: the program
                                     exists, `make` targets exist, `dbsp` and `airflow` commands parse
                                     with their own argument parsers and name circuits that exist,
                                     `python -m` modules exist and take the options given, scripts
                                     exist and take the subcommand given, files copied exist
    <!-- check: run -->              bash: parsed as above, then run, in order, in a scratch copy of
                                     the project (exit code 0 each)
    <!-- check: walkthrough -->      bash: parsed as above here; run in order by the README tour's
                                     end-to-end test (tests/test_airflow_e2e.py)

A ```bash or ```yaml block without a marker fails the test. ```python blocks are compiled.
"""
from __future__ import annotations

import ast
import copy
import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from spark_jobs.cli.main import build_parser
from spark_jobs.config import load_config
from spark_jobs.spec import CircuitError, load_circuit_text
from tests.test_docs import ROOT, doc_files

YAML_KINDS = ("circuit", "fragment", "profile", "yaml")
BASH_KINDS = ("parse", "run", "walkthrough")
MARKER = re.compile(r"^\s*<!--\s*check:\s*(\S+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    kind: str | None
    arg: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the marker of the line before each."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end])
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        found.append(Block(doc, i + 1, lang, marker.group(1) if marker else None, marker.group(2) if marker else "",
                           body + "\n"))
        i = end + 1
    return found


ALL = [b for doc in doc_files() for b in blocks(doc)]
YAML = [b for b in ALL if b.lang == "yaml"]
BASH = [b for b in ALL if b.lang in ("bash", "sh", "shell")]
PYTHON = [b for b in ALL if b.lang == "python"]


def test_every_yaml_and_bash_block_says_how_it_is_checked():
    unmarked = [f"{b.where}: ```{b.lang} block without <!-- check: ... --> on the line before" for b in YAML + BASH
                if b.kind is None]
    wrong = [f"{b.where}: `check: {b.kind}` is not a check of a {b.lang} block" for b in YAML + BASH
             if b.kind is not None and b.kind not in (YAML_KINDS if b.lang == "yaml" else BASH_KINDS)]
    assert not unmarked + wrong, "\n".join(unmarked + wrong)
    assert len(YAML) >= 15 and len(BASH) >= 15  # the scan finds the documentation's blocks


# ---- YAML ----------------------------------------------------------------------------------------
def merged(base: dict, part: dict) -> dict:
    """The circuit ``base`` with the fragment ``part``: mappings merged key by key, the rest replaced."""
    out = copy.deepcopy(base)
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


class _Loader(yaml.SafeLoader):
    """YAML as the circuit loader reads it: only true/false are booleans (`on:` is a key)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


def check_yaml(block: Block, tmp_path: Path) -> None:
    data = yaml.load(block.text, Loader=_Loader)
    if block.kind == "yaml":
        return
    if block.kind == "profile":
        profile = tmp_path / "profile.yaml"
        profile.write_text(yaml.safe_dump(data))
        load_config(str(profile), data_root=str(tmp_path / "data"))
        return
    if block.kind == "circuit":
        text = block.text
        if block.arg:
            example = (ROOT / block.arg).read_text(encoding="utf-8")
            assert block.text == "".join(line for line in example.splitlines(keepends=True)
                                         if not line.startswith("#")), f"the block is not {block.arg}"
    else:
        assert block.arg, "check: fragment needs the circuit it is a part of (check: fragment circuits/x.yaml)"
        base = yaml.load((ROOT / block.arg).read_text(encoding="utf-8"), Loader=_Loader)
        text = yaml.safe_dump(merged(base, data), sort_keys=False)
    try:
        load_circuit_text(text, path=block.where)
    except CircuitError as exc:
        raise AssertionError(f"{block.where}: the example does not validate:\n{exc}\n---\n{text}") from None


@pytest.mark.parametrize("block", [b for b in YAML if b.kind in YAML_KINDS], ids=lambda b: b.where)
def test_yaml_example_validates(block, tmp_path):
    check_yaml(block, tmp_path)


def test_a_wrong_yaml_example_fails(tmp_path):
    """The check can fail: a fragment with a misspelt op, a circuit that is not the file it claims."""
    doc = ROOT / "README.md"
    bad = Block(doc, 1, "yaml", "fragment", "circuits/revenue_by_region.yaml",
                "nodes:\n  paid: {op: filtr, input: orders, where: \"status = 'paid'\"}\n")
    with pytest.raises(AssertionError, match="does not validate"):
        check_yaml(bad, tmp_path)
    with pytest.raises(AssertionError, match="is not"):
        check_yaml(Block(doc, 1, "yaml", "circuit", "circuits/examples/my_view.yaml", "name: x\n"), tmp_path)


# ---- shell commands ------------------------------------------------------------------------------
def commands(text: str) -> list[str]:
    """The commands of a shell block: one a line, comments cut."""
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(shlex.join(words))
    return out


@functools.cache
def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {t for line in re.findall(r"^([\w][\w -]*):(?!=)", text, flags=re.M) for t in line.split()}


@functools.cache
def airflow_parser():
    from airflow.cli import cli_parser

    return cli_parser.get_parser()


def circuit_exists(name: str, created: set[str]) -> bool:
    if name in created or (ROOT / name).is_file():
        return True
    return any((ROOT / "circuits" / sub / f"{name}.yaml").is_file() for sub in ("", "examples"))


def check_command(command: str, created: set[str]) -> None:
    """One command, checked without running it (see the module's docstring)."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value before the program
        words = words[1:]
    program, args = words[0].removeprefix(".venv/bin/"), words[1:]
    if program == "make":
        unknown = [t for t in args if not t.startswith("-") and "=" not in t and t not in make_targets()]
        assert not unknown, f"no make target {unknown}"
    elif program == "dbsp":
        try:
            parsed = build_parser().parse_args(args)
        except SystemExit:
            raise AssertionError(f"`dbsp` does not take these arguments: {args}") from None
        for circuit in getattr(parsed, "files", None) or [getattr(parsed, "circuit", None)]:
            if circuit is not None:
                matches = [p for p in ROOT.glob(circuit)] if "*" in circuit else []
                assert matches or circuit_exists(circuit, created), f"no circuit {circuit!r}"
    elif program == "python":
        assert args[:1] == ["-m"], "python commands of the docs run modules (python -m ...)"
        spec = importlib.util.find_spec(args[1])
        assert spec is not None and spec.origin, f"no module {args[1]}"
        source = Path(spec.origin).read_text(encoding="utf-8")
        options = [a.split("=", 1)[0] for a in args[2:] if a.startswith("--")]
        missing = [o for o in options if f'"{o}"' not in source and f"'{o}'" not in source]
        assert not missing, f"{args[1]} takes no option {missing}"
    elif program == "airflow":
        try:
            airflow_parser().parse_args(args)
        except SystemExit:
            raise AssertionError(f"`airflow` does not take these arguments: {args}") from None
    elif program == "source":
        assert args[0] == ".airflow/env.sh" and "env.sh" in (ROOT / "scripts" / "airflow_local.sh").read_text()
    elif program.startswith("scripts/"):
        script = ROOT / program
        assert script.is_file(), f"no script {program}"
        subcommands = [a for a in args if not a.startswith("-") and not a.isdigit()][:1]
        for sub in subcommands:
            for choice in sub.split("|"):
                assert re.search(rf"(^|[\s|(]){re.escape(choice)}[|)]", script.read_text()), \
                    f"{program} has no subcommand {choice!r}"
    elif program == "cp":
        src, dest = args[-2], args[-1]
        assert (ROOT / src).exists(), f"no file {src}"
        created.add(str(Path(dest) / Path(src).name) if dest.endswith("/") else dest)
        created.add(Path(src).stem)
    elif program == "docker":
        assert args[:2] == ["compose", "-f"], "docker commands of the docs are `docker compose -f FILE ...`"
        compose = ROOT / args[2]
        assert compose.is_file(), f"no compose file {args[2]}"
        services = set(yaml.safe_load(compose.read_text())["services"])
        named = [a.split("=", 1)[0] for a in args[3:] if "=" in a and not a.startswith("-")]
        if "exec" in args:
            named.append(args[args.index("exec") + 1])
        assert set(named) <= services, f"no service {set(named) - services} in {args[2]}"
    elif program not in ("apt-get",):
        raise AssertionError(f"no check for the program {program!r}: add one to tests/test_docs_examples.py")


def check_bash(block: Block) -> None:
    created: set[str] = set()
    for previous in (b for b in BASH if b.doc == block.doc and b.line < block.line):
        for command in commands(previous.text):  # what earlier blocks of the page made (cp ...)
            words = shlex.split(command)
            if words[0] == "cp":
                created.add(str(Path(words[-1]) / Path(words[-2]).name))
                created.add(Path(words[-2]).stem)
    for command in commands(block.text):
        try:
            check_command(command, created)
        except AssertionError as exc:
            raise AssertionError(f"{block.where}: `{command}`: {exc}") from None


@pytest.mark.parametrize("block", [b for b in BASH if b.kind in BASH_KINDS], ids=lambda b: b.where)
def test_shell_commands_parse(block):
    check_bash(block)


@pytest.mark.parametrize("command", [
    "make dmeo", "dbsp step", "dbsp shwo x y", "dbsp step no_such_circuit", "python -m spark_jobs.examples.nope",
    "python -m spark_jobs.examples.generators --data-rot data", "scripts/airflow_local.sh restart",
    "airflow dags trigerr x", "cp circuits/examples/nope.yaml circuits/", "curl http://example.org",
    "docker compose -f docker/docker-compose.yml up --scale nope=3"])
def test_a_wrong_command_fails(command):
    with pytest.raises(AssertionError):
        check_command(command, set())


def scratch_project(base: Path) -> Path:
    """A copy of the project's tracked files with this venv linked in: commands run there as
    written and cannot touch the real data/ or circuits/."""
    root = base / "project"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in listed:
        if (ROOT / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, root / rel)
    (root / ".venv").symlink_to(ROOT / ".venv")
    return root


RUN = [b for b in BASH if b.kind == "run"]


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_shell_block_runs(block, tmp_path):
    root = scratch_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBSP_", "AIRFLOW"))}
    env.update(PATH=f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '')}", PYTHONPATH=str(root),
               SPARK_LOCAL_IP="127.0.0.1")
    for command in commands(block.text):
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=root, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"{block.where}: `{command}` exited {out.returncode}:\n{out.stdout}\n{out.stderr}"


# ---- Python --------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.where)
def test_python_example_compiles(block):
    ast.parse(block.text, filename=block.where)
