"""The verdict rule of analyses/failures.py on constructed numbers: both outcomes of every kind of prediction."""

from __future__ import annotations

import pytest

from analyses.failures import Prediction, closes_by_half, stays_open, verdict
from interp._checks import InvalidInput


def _prediction(value: float, tolerance: float, kind: str) -> Prediction:
    return Prediction("a gap", value, tolerance, kind, "constructed")


@pytest.mark.parametrize("kind, measured, expected", [
    ("within", 0.13, "confirmed"),  # |0.13 - 0.10| = 0.03 <= 0.05
    ("within", 0.04, "refuted"),  # |0.04 - 0.10| = 0.06 > 0.05
    ("within", 0.16, "refuted"),
    ("at_most", 0.15, "confirmed"),  # 0.15 <= 0.10 + 0.05
    ("at_most", 0.16, "refuted"),
    ("at_most", -1.0, "confirmed"),
    ("at_least", 0.05, "confirmed"),  # 0.05 >= 0.10 - 0.05
    ("at_least", 0.04, "refuted"),
    ("at_least", 3.0, "confirmed"),
])
def test_verdict_both_outcomes(kind, measured, expected):
    assert verdict(_prediction(0.10, 0.05, kind), measured) == expected


def test_verdict_pending_without_a_measurement():
    assert verdict(_prediction(0.1, 0.05, "within"), None) == "pending"


def test_closing_rules_on_a_gap_of_0_08():
    closes, stays = closes_by_half(0.08, "rule"), stays_open(0.08, "rule")
    assert (closes.value, closes.tolerance, closes.kind) == (0.0, 0.04, "at_most")
    assert verdict(closes, 0.039) == "confirmed" and verdict(closes, 0.041) == "refuted"
    assert verdict(stays, 0.041) == "confirmed" and verdict(stays, 0.039) == "refuted"
    assert closes_by_half(-0.02, "rule").tolerance == 0.0  # no gap to close: the gap must not open


@pytest.mark.parametrize("arguments, argument", [
    (("q", 0.1, -0.01, "within", "m"), "tolerance"),
    (("q", 0.1, 0.01, "about", "m"), "kind"),
    (("q", float("nan"), 0.01, "within", "m"), "value"),
    (("q", 0.1, True, "within", "m"), "tolerance"),
])
def test_bad_predictions_name_the_argument(arguments, argument):
    with pytest.raises(InvalidInput, match=argument):
        Prediction(*arguments)


def test_bad_measurement_names_the_argument():
    with pytest.raises(InvalidInput, match="measured"):
        verdict(_prediction(0.1, 0.05, "within"), float("inf"))


def test_the_equivariant_model_is_pending_until_its_training_has_finished(tmp_path):
    from analyses.failures import equivariant_status
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    model = KMeansTransformer(learned_model_config(2, 3))
    assert equivariant_status(tmp_path / "missing.safetensors") == (False, "missing.safetensors does not exist yet")
    save_model(tmp_path / "half.safetensors", model, step=5, train_config={"steps": 10})
    assert equivariant_status(tmp_path / "half.safetensors") == (False, "half.safetensors is at training step 5 of 10")
    save_model(tmp_path / "done.safetensors", model, step=10, train_config={"steps": 10})
    assert equivariant_status(tmp_path / "done.safetensors") == (True, "done.safetensors: 10 training steps")
