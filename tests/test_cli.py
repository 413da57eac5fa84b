"""The `dbsp` commands that need no Spark: validate, explain, draw, and argument handling."""
from __future__ import annotations

import pytest

from spark_jobs.cli.main import main
from spark_jobs.config import PROJECT_ROOT

PAPER = str(PROJECT_ROOT / "circuits" / "paper_example.yaml")


def test_validate_ok_and_errors(tmp_path, capsys):
    assert main(["validate", *map(str, sorted((PROJECT_ROOT / "circuits").glob("*.yaml")))]) == 0
    assert capsys.readouterr().out.count(": ok") >= 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ninputs:\n  t: {schema: {a: long}, source: {kind: changes, path: t}}\n"
                   "nodes:\n  f: {op: filtre, input: t}\noutputs: [f]\n")
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:5" in out and "'f'" in out and "filter" in out


def test_explain_paper_example_keeps_three_states_and_the_input_integrals(capsys):
    assert main(["explain", PAPER]) == 0
    out = capsys.readouterr().out
    assert "State kept between timesteps: 5 operator(s)" in out  # Figure 3's three + the bag check's two
    assert out.count("for the bag check") == 4  # I(t), I(r): in the table and in the list
    assert "left side of join 'joined'" in out and "right side of join 'joined'" in out
    assert "distinct 'v'" in out


def test_explain_by_circuit_name_and_query(capsys):
    assert main(["explain", "paper_example", "--query"]) == 0
    out = capsys.readouterr().out
    assert "Query circuit of paper_example" in out and "Incremental circuit of paper_example" in out


def test_draw_dot(tmp_path, capsys):
    assert main(["draw", PAPER]) == 0
    out = capsys.readouterr().out
    assert out.count("digraph") == 2 and "penwidth" in out
    target = tmp_path / "c.dot"
    assert main(["draw", PAPER, "--which", "incremental", "-o", str(target)]) == 0
    assert target.read_text().startswith("digraph")


def test_unknown_circuit_is_a_clear_error(capsys):
    assert main(["explain", "no_such_circuit"]) == 1
    assert "no circuit named 'no_such_circuit'" in capsys.readouterr().err


def test_reset_needs_confirmation(tmp_path, capsys):
    root = tmp_path / "_dbsp" / "paper_example"
    root.mkdir(parents=True)
    (root / "x").write_text("state")
    assert main(["reset", PAPER, "--data-root", str(tmp_path)]) == 1  # no tty, no --yes
    assert root.exists()
    assert main(["reset", PAPER, "--data-root", str(tmp_path), "--yes"]) == 0
    assert not root.exists()


def test_commands_need_arguments():
    with pytest.raises(SystemExit):
        main(["show", PAPER])


def test_user_errors_keep_their_exit_codes():
    """Refused input 2, failed quality gate 3, others 1; the classes are matched without the CLI
    importing the modules that define them (commands that read state import no pyspark)."""
    from spark_jobs.cli.commands import UserError, _user_errors
    from spark_jobs.executor.spark.session import ConnectServerUnreachable
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.publish import PublishError
    from spark_jobs.quality.report import QualityGateFailed

    class Report:
        def summary(self) -> str:
            return "1 failed"

    for exc, code in ((InputRefused([("f.jsonl", "bad")], "orders"), 2), (QualityGateFailed.__new__(QualityGateFailed), 3),
                      (PublishError("no"), 1), (ConnectServerUnreachable("no Spark Connect server at sc://x"), 1)):
        if isinstance(exc, QualityGateFailed):
            exc.report, exc.context = Report(), ""
        with pytest.raises(UserError) as err, _user_errors():
            raise exc
        assert err.value.exit_code == code
        assert code != 1 or str(exc) in str(err.value)  # the message as it was raised
    with pytest.raises(KeyError), _user_errors():  # not a user error: not turned into one
        raise KeyError("bug")


@pytest.mark.parametrize("args", [["explain", PAPER], ["draw", PAPER], ["validate", PAPER, PAPER],
                                  ["explain", "no_such_circuit"], ["--help"]],
                         ids=["explain", "draw", "validate", "error", "help"])
def test_a_closed_pipe_ends_the_command_quietly(args):
    """`dbsp explain X | head`: the reader goes away; no BrokenPipeError traceback, exit 141."""
    import subprocess
    import sys

    dbsp = [sys.executable, "-m", "spark_jobs.cli.main"]
    proc = subprocess.Popen([*dbsp, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=PROJECT_ROOT)
    proc.stdout.close()  # a real pipe whose reader is gone before the command writes
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    if args[-1] == "no_such_circuit":  # its message goes to stderr, which is still open
        assert proc.returncode == 1 and "no circuit named" in err
    elif args == ["--help"]:  # argparse itself ignores a failed write of its help
        assert proc.returncode == 0 and err == ""
    else:
        assert proc.returncode == 141 and err == ""
