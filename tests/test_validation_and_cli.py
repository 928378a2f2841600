"""The authors' finite-gamma validation (SPEC §2.4, §6.2) and the ``interp verify`` command."""

import subprocess
import sys

import pytest
import torch

from interp.cli import main
from interp.validation import authors_validation_task, validation_table

# the authors' printout in numerical_validation.ipynb (SPEC §2.4), transformer at gamma = 1e4
AUTHORS_TRANSFORMER = [6.44, 5.78, 5.47, 4.96, 4.69, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59]
SPEC_LLOYD = [6.44, 5.78, 5.47, 4.97, 4.70, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59]  # SPEC §6.2 re-run


@pytest.fixture(scope="module")
def table():
    return validation_table(gamma=1e4, n_layers=10)


def test_transformer_tracks_lloyd_within_0_02(table):
    assert len(table) == 11
    for row in table:
        assert abs(row["transformer"] - row["lloyd"]) < 0.02, row


def test_reproduces_the_authors_printout(table):
    assert [round(row["transformer"], 2) for row in table] == AUTHORS_TRANSFORMER
    assert [round(row["lloyd"], 2) for row in table] == SPEC_LLOYD


def test_validation_task_shape_and_range():
    points, init = authors_validation_task()
    assert points.shape == (1, 10000, 2) and init.shape == (1, 5, 2)
    torch.testing.assert_close(points.amin(1), torch.zeros(1, 2, dtype=torch.float64))
    torch.testing.assert_close(points.amax(1), torch.ones(1, 2, dtype=torch.float64))


def test_verify_command_prints_every_construction(capsys):
    assert main(["verify", "--quick", "--layers", "3", "--tasks", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("onehot / linear", "onehot / AHAT", "binary", "dot-product", "literal self-attention"):
        assert name in out
    assert "authors' printout" in out


@pytest.mark.parametrize("argv,needle", [
    (["verify", "--layers", "0"], "n_layers"),
    (["verify", "--tasks", "0"], "batch"),
    (["verify", "--gamma", "-1"], "gamma"),
])
def test_verify_bad_input_is_one_line_not_a_traceback(argv, needle):
    result = subprocess.run([sys.executable, "-m", "interp.cli", *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and needle in result.stderr
