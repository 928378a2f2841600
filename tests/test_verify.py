"""``interp verify`` can fail: a construction off by 1e-6 in one weight, an assignment disagreement, NaN, or a
log objective off the authors' printout by more than 0.01 each make it print ``verify: FAIL`` and exit 1."""

import math

import pytest
import torch

import interp.verify
from interp.cli import main
from interp.verify import (
    AUTHORS_PRINTOUT,
    EXACT_TOLERANCE,
    FINITE_GAMMA_ROW,
    VerifyRow,
    construction_failures,
    printout_failures,
    run_verify,
)

EXACT_NAMES = [name for name in interp.verify.CONSTRUCTIONS if name != FINITE_GAMMA_ROW]
REAL_LLOYD_TRANSFORMER = interp.verify.lloyd_transformer


def perturbed_lloyd_transformer(*args, **kwargs):
    """The real construction with the first weight of attention 3's value matrix (1 on the data block) + 1e-6:
    every centre update is scaled by 1 + 1e-6 in its first coordinate, an error ~5e-7 >> 1e-9."""
    model = REAL_LLOYD_TRANSFORMER(*args, **kwargs)
    with torch.no_grad():
        assert model.layers[0].attn_cx.W_V[0, 0] == 1.0
        model.layers[0].attn_cx.W_V[0, 0] += 1e-6
    return model


@pytest.fixture
def broken_construction(monkeypatch):
    monkeypatch.setattr(interp.verify, "lloyd_transformer", perturbed_lloyd_transformer)


def test_the_real_constructions_pass():
    outcome = run_verify(n_layers=10, n_tasks=2, quick=True)
    assert outcome.passed and outcome.failures == ()
    assert outcome.report.splitlines()[-1] == "verify: PASS"
    assert "FAIL" not in outcome.report


def test_one_weight_off_by_1e_6_fails(broken_construction):
    outcome = run_verify(n_layers=3, n_tasks=2, quick=True)
    assert not outcome.passed
    failed = " ".join(outcome.failures)
    for name in EXACT_NAMES:  # every exact construction, at both quick sizes
        assert failed.count(name) == 2, name
    assert FINITE_GAMMA_ROW not in failed  # the approximation is shown, not checked
    assert "authors' validation" not in failed  # 1e-6 does not move the two-decimal printout
    last = outcome.report.splitlines()[-1]
    assert last.startswith("verify: FAIL (") and last.endswith(")")


def test_the_command_exits_1_on_failure_and_0_otherwise(broken_construction, capsys, monkeypatch):
    assert main(["verify", "--quick", "--layers", "2", "--tasks", "1"]) == 1
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("verify: FAIL (")
    monkeypatch.setattr(interp.verify, "lloyd_transformer", REAL_LLOYD_TRANSFORMER)
    assert main(["verify", "--quick", "--layers", "2", "--tasks", "1"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "verify: PASS"


def _row(errors, agreement=1.0, name=EXACT_NAMES[0]):
    return VerifyRow(construction=name, size=(60, 2, 3), max_error_per_layer=errors, assignment_agreement=agreement,
                     tasks_with_empty_cluster=0)


def test_construction_check_thresholds():
    assert EXACT_TOLERANCE == 1e-9
    assert construction_failures([_row([1e-15, 1e-9, 3e-16])]) == []  # at the tolerance: passes
    [failure] = construction_failures([_row([1e-15, 2e-9, 3e-16, 5e-9])])
    assert "layer(s) 2, 4" in failure and "5.0e-09" in failure
    [failure] = construction_failures([_row([math.nan, 0.0])])
    assert "layer(s) 1" in failure  # NaN is a failure, not a pass
    [failure] = construction_failures([_row([0.0, 0.0], agreement=0.999)])
    assert "assignments agree" in failure and "99.90%" in failure
    assert construction_failures([_row([0.5, 0.5], agreement=0.5, name=FINITE_GAMMA_ROW)]) == []


def test_printout_check_thresholds():
    printout = [6.44, 5.78, 5.47, 4.96, 4.69, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59]  # the notebook's output
    table = [{"layer": t, "transformer": value + 0.009, "lloyd": value} for t, value in enumerate(printout)]
    assert printout_failures(table, 1e4) == []
    table[4]["transformer"] = printout[4] + 0.011
    table[7]["transformer"] = printout[7] - 0.02
    failures = printout_failures(table, 1e4)
    assert len(failures) == 2 and "layer 4" in failures[0] and "layer 7" in failures[1]
    assert printout_failures(table, 1e3) == []  # the printout is for gamma = 1e4 only
    assert printout_failures(table[:3], 1e4) == []  # fewer layers: compared where the printout has them
    table[2]["transformer"] = math.nan
    assert any("layer 2" in f for f in printout_failures(table[:3], 1e4))
    assert list(AUTHORS_PRINTOUT) == printout


def test_a_printout_mismatch_fails_the_run(monkeypatch):
    shifted = tuple(v + 0.05 if t == 3 else v for t, v in enumerate(AUTHORS_PRINTOUT))
    monkeypatch.setattr(interp.verify, "AUTHORS_PRINTOUT", shifted)
    outcome = run_verify(n_layers=4, n_tasks=1, quick=True)
    assert outcome.failures == (outcome.failures[0],) and "authors' validation: layer 3" in outcome.failures[0]
    assert outcome.report.splitlines()[-1].startswith("verify: FAIL (authors' validation: layer 3")
