"""The verdict rule of analyses/studies/failures/measure.py on constructed numbers: both outcomes of every kind of
prediction."""

from __future__ import annotations

import pytest
import torch

from analyses.framework.preregistration import Prediction, verdict
from analyses.studies.failures.measure import closes_by_half, stays_open
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
    from analyses.studies.failures.measure import equivariant_status
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    model = KMeansTransformer(learned_model_config(2, 3))
    assert equivariant_status(tmp_path / "missing.safetensors") == (False, "missing.safetensors does not exist yet")
    save_model(tmp_path / "half.safetensors", model, step=5, train_config={"steps": 10})
    assert equivariant_status(tmp_path / "half.safetensors") == (False, "half.safetensors is at training step 5 of 10")
    save_model(tmp_path / "done.safetensors", model, step=10, train_config={"steps": 10})
    assert equivariant_status(tmp_path / "done.safetensors") == (True, "done.safetensors: 10 training steps")


# ----- the Cauchy predictions and texts ------------------------------------------------------------------------------


def _rule_entry(kind: str, value: tuple[float, float], tolerance: tuple[float, float]) -> dict:
    return {"hypothesis": "X", "quantity": "a gap", "kind": kind, "rule": "constructed", "derivation": "by hand",
            "value": {"constant": value[0], "times_observed_gap": value[1]},
            "tolerance": {"constant": tolerance[0], "times_observed_gap": tolerance[1]}}


def test_cauchy_prediction_evaluates_its_rule_at_the_observed_gap():
    from analyses.studies.failures.measure import cauchy_prediction

    half = cauchy_prediction(_rule_entry("at_most", (0.0, 0.0), (0.0, 0.5)), 0.08)  # closes by half
    assert (half.value, half.tolerance, half.kind) == (0.0, 0.04, "at_most")
    assert verdict(half, 0.039) == "confirmed" and verdict(half, 0.041) == "refuted"
    quarter = cauchy_prediction(_rule_entry("at_most", (0.0, 0.75), (0.0, 0.0)), 0.08)  # falls by a quarter
    assert quarter.value == pytest.approx(0.06) and verdict(quarter, 0.059) == "confirmed"
    same = cauchy_prediction(_rule_entry("within", (0.0, 1.0), (0.0, 0.25)), 0.08)
    assert verdict(same, 0.099) == "confirmed" and verdict(same, 0.101) == "refuted"
    assert cauchy_prediction(_rule_entry("within", (0.0, 1.0), (0.0, 0.25)), -0.08).tolerance == 0.0  # clamped
    assert "X, committed before the run: constructed (by hand)" == half.method


def test_the_committed_cauchy_predictions_cover_every_test():
    from analyses.studies.failures.measure import CAUCHY_TESTS, load_cauchy_predictions

    data = load_cauchy_predictions()
    assert set(CAUCHY_TESTS) <= set(data["predictions"])
    assert data["held_out"]["seed"] != data["exploration"]["seed"]


def test_random_rows_like_keeps_every_tasks_count():
    from analyses.studies.failures.measure import random_rows_like

    rows = torch.zeros(3, 20, dtype=torch.bool)
    rows[0, :5] = True
    rows[2] = True
    drawn = random_rows_like(rows, seed=1)
    assert drawn.sum(1).tolist() == [5, 0, 20]
    assert torch.equal(drawn, random_rows_like(rows, seed=1)) and not torch.equal(drawn[0], rows[0])


def _committed_cases() -> dict:
    import json

    from analyses.studies.failures.measure import DEFAULT_OUT

    return json.loads(DEFAULT_OUT.read_text())["cases"]


def _flipped(rows: list[dict], keys: set[str]) -> list[dict]:
    flip = {"confirmed": "refuted", "refuted": "confirmed"}
    return [{**row, "verdict": flip[row["verdict"]]} if row["name"] in keys else row for row in rows]


def test_the_held_out_cauchy_text_follows_the_verdicts():
    from analyses.studies.failures.measure import cauchy_held_out_text

    record = _committed_cases()["cauchy_held_out"]
    entry = record["models"]["main-onehot"]
    text = cauchy_held_out_text("main-onehot", entry, record)
    assert text == entry["explanation"]  # the committed text is what the generator writes
    verdicts = {row["name"]: row["verdict"] for row in entry["interventions"]}
    if verdicts["bulk_starts"] == verdicts["far_started_move_like_lloyd"] == "refuted":
        assert "not the outlier starts (a)" in text
    if verdicts["lloyd_step_appended"] == verdicts["start_at_lloyd_fixed_point"] == "confirmed":
        assert "offset of the model's fixed point" in text
    flipped = {**entry, "interventions": _flipped(entry["interventions"], {"bulk_starts", "lloyd_step_appended"})}
    other = cauchy_held_out_text("main-onehot", flipped, record)
    assert ("not the outlier starts (a)" in other) != ("not the outlier starts (a)" in text)
    assert ("offset of the model's fixed point" in other) != ("offset of the model's fixed point" in text)


def test_the_cauchy_case_text_follows_the_verdicts_and_drops_the_refuted_reading():
    from analyses.studies.failures.measure import cauchy_text

    record = _committed_cases()["cauchy"]
    for name, entry in record["models"].items():
        assert "slot identity" not in entry["explanation"]
        instruments = entry["instruments"]
        distilled = instruments["distilled"]

        def text(rows, instruments=instruments, distilled=distilled):
            return cauchy_text(record["bulk"], record["bulk"]["reference_spread_normal"], instruments["attn_xc"],
                               instruments["attn_xc_normal_tasks"], distilled, {"gap": distilled["gap"]},
                               {"gap": distilled["gap_rescaled"]}, rows)

        assert text(entry["interventions"]) == entry["explanation"]
        refuted = {row["name"]: row["verdict"] == "refuted" for row in entry["interventions"]}
        if name != "main-none" and refuted["robust_rescale"]:  # the refuted rescaling says what it confounds
            assert "this test confounds the two" in entry["explanation"]
            assert "is not the cause" not in entry["explanation"]
            assert "confounds" not in text(_flipped(entry["interventions"], {"robust_rescale"}))
