"""The authors' finite-gamma validation (``numerical_validation.ipynb`` of rithram/kmeans-trf) and ``interp verify``'s
command line: its table, its bad-input lines, and tracebacks for internal errors."""

import sys

import pytest
import torch
from child_processes import run

import interp.verify
from interp._checks import InvalidInput
from interp.cli import main
from interp.verify import AUTHORS_PRINTOUT, authors_validation_task, validation_table

# the authors' printout in numerical_validation.ipynb, transformer at gamma = 1e4, layers 0..10 (two decimals)
NOTEBOOK_TRANSFORMER = [6.44, 5.78, 5.47, 4.96, 4.69, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59]
# Lloyd from the same data, re-run independently in float64 numpy (two decimals)
RERUN_LLOYD = [6.44, 5.78, 5.47, 4.97, 4.70, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59]


@pytest.fixture(scope="module")
def table():
    return validation_table(gamma=1e4, n_layers=10)


def test_transformer_tracks_lloyd_within_0_02(table):
    assert len(table) == 11
    for row in table:
        assert abs(row["transformer"] - row["lloyd"]) < 0.02, row


def test_reproduces_the_authors_printout(table):
    assert [round(row["transformer"], 2) for row in table] == NOTEBOOK_TRANSFORMER
    assert [round(row["lloyd"], 2) for row in table] == RERUN_LLOYD
    assert list(AUTHORS_PRINTOUT) == NOTEBOOK_TRANSFORMER  # the constant verify checks against


def test_validation_task_shape_and_range():
    points, init = authors_validation_task()
    assert points.shape == (1, 10000, 2) and init.shape == (1, 5, 2)
    torch.testing.assert_close(points.amin(1), torch.zeros(1, 2, dtype=torch.float64))
    torch.testing.assert_close(points.amax(1), torch.ones(1, 2, dtype=torch.float64))


def test_verify_command_prints_every_construction_and_passes(capsys):
    assert main(["verify", "--quick", "--layers", "3", "--tasks", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("onehot / linear", "onehot / AHAT", "binary", "dot-product", "literal self-attention"):
        assert name in out
    assert "authors' printout" in out
    assert out.rstrip().splitlines()[-1] == "verify: PASS"


@pytest.mark.parametrize("argv,needle", [
    (["verify", "--layers", "0"], "argument --layers: expected an integer >= 1, got 0"),
    (["verify", "--tasks", "0"], "argument --tasks: expected an integer >= 1, got 0"),
    (["verify", "--gamma", "-1"], "gamma"),
])
@pytest.mark.slow
def test_verify_bad_input_is_one_line_not_a_traceback(argv, needle):
    result = run([sys.executable, "-m", "interp.cli", *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and needle in result.stderr


@pytest.mark.parametrize("error", [KeyError("missing"), ValueError("a library's own ValueError"),
                                   TypeError("unsupported operand"), IndexError("index 3 is out of bounds"),
                                   RuntimeError("an allocator's error"), MemoryError()])
def test_an_internal_error_propagates_instead_of_reading_as_bad_input(monkeypatch, capsys, error):
    def broken(**kwargs):
        raise error

    monkeypatch.setattr(interp.verify, "run_verify", broken)
    with pytest.raises(type(error)):
        main(["verify", "--quick"])
    assert "error:" not in capsys.readouterr().err  # nothing printed as a one-line bad-input message


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(interp.verify, "run_verify", interrupted)
    try:
        code = main(["verify", "--quick"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() (a traceback in a real process)")
    assert code == 130
    assert capsys.readouterr().err == "interp verify: interrupted\n"


def test_project_input_errors_are_one_line(monkeypatch, capsys):
    def rejects(**kwargs):
        raise InvalidInput("n must be >= 1, got 0")

    monkeypatch.setattr(interp.verify, "run_verify", rejects)
    assert main(["verify"]) == 2
    assert capsys.readouterr().err == "interp verify: error: n must be >= 1, got 0\n"


@pytest.mark.slow
def test_an_internal_error_shows_a_traceback_in_a_real_process():
    code = ("import sys, interp.cli, interp.verify\n"
            "def broken(**kwargs):\n"
            "    return {}['no such key']\n"
            "interp.verify.run_verify = broken\n"
            "sys.exit(interp.cli.main(['verify', '--quick']))\n")
    result = run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "KeyError: 'no such key'" in result.stderr
    assert "interp verify: error" not in result.stderr
