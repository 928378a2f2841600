"""explain's distilled algorithms: the fit, validation and test tasks are disjoint, every choice among the families is
made on the validation tasks alone (test figures are reported, never used to choose), and the predictions' verdicts
follow analyses.studies.failures.measure.verdict."""

import json

import pytest
import torch

from analyses._shared import draw_tasks
from analyses.studies.explain import measure as explain
from interp import KMeansTransformer
from interp.model.config import learned_model_config

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")]  # random weights


def tiny_model():
    torch.manual_seed(3)
    return KMeansTransformer(learned_model_config(4, 3, embedding="onehot")).eval()


def test_fit_validation_and_test_seeds_and_tasks_are_disjoint():
    seeds = {"fit": explain.FIT_SEED, "validation": explain.VALIDATION_SEED, "test": explain.TEST_SEED}
    used = {name: {seed + offset for offset in range(4)} for name, seed in seeds.items()}  # tasks, starts, orders
    assert not (used["fit"] & used["validation"]) and not (used["fit"] & used["test"])
    assert not (used["validation"] & used["test"])
    model = tiny_model()
    drawn = {name: draw_tasks(model, 2, seed)[0] for name, seed in seeds.items()}
    assert not torch.equal(drawn["fit"], drawn["validation"]) and not torch.equal(drawn["validation"], drawn["test"])


def section(model, test_seed):
    points, init = draw_tasks(model, explain.QUICK.tasks, test_seed)
    symmetric = explain.Symmetric(model, points, init, explain.QUICK.permutations, test_seed + 2)
    return explain.distill_section(model, symmetric, explain.QUICK, "tiny")


def test_choices_read_the_validation_tasks_only(tmp_path, monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(explain, "PREDICTIONS", tmp_path / "missing.json")
    first, second = section(model, explain.TEST_SEED), section(model, explain.TEST_SEED + 100)
    for record in (first, second):
        best = max(record["fits"], key=lambda row: row["r2_validation"])
        assert (record["best"]["family"], record["best"]["kernel"]) == (best["family"], best["kernel"])
        assert record["best"]["selected_on"] == "validation"
        whole = record["whole"]
        chosen = max(whole["fits"], key=lambda row: row["r2_validation"])
        euclidean = max((row for row in whole["fits"] if row["kernel"] == "euclidean"),
                        key=lambda row: row["r2_validation"])
        assert (whole["selected"]["family"], whole["selected"]["kernel"]) == (chosen["family"], chosen["kernel"])
        assert (whole["euclidean"]["family"], whole["euclidean"]["kernel"]) == (euclidean["family"],
                                                                                euclidean["kernel"])
        assert {row["family"] for row in whole["fits"]} == {"soft", "damped", "repulsive", "offset", "attend"}
        assert whole["predictions"] is None
    # other test tasks change every test figure, and no validation figure or choice
    assert [row["r2_validation"] for row in first["whole"]["fits"]] == [row["r2_validation"]
                                                                      for row in second["whole"]["fits"]]
    assert first["whole"]["selected"]["family"] == second["whole"]["selected"]["family"]
    assert first["whole"]["fits"][0]["r2_update"] != second["whole"]["fits"][0]["r2_update"]


def test_predictions_are_scored_on_the_row_they_name(tmp_path):
    entry = {"quantity": "held-out R^2 of the raw update", "value": 0.8, "tolerance": 0.05, "kind": "at_least",
             "method": "validation figure"}
    path = tmp_path / "distill.json"
    path.write_text(json.dumps({"predictions": {"tiny": {
        "selected_r2_update": {**entry, "family": "attend", "kernel": "attn_xc"},
        "euclidean_r2_update": {**entry, "family": "offset", "kernel": "euclidean"}}}}))
    record = {"fits": [{"family": "attend", "kernel": "attn_xc", "r2_update": 0.9},
                       {"family": "offset", "kernel": "euclidean", "r2_update": 0.7}],
              "selected": {"family": "attend", "kernel": "attn_xc"},
              "euclidean": {"family": "attend", "kernel": "euclidean"}}
    results = explain.prediction_verdicts(record, "tiny", path)["results"]
    assert results["selected_r2_update"]["verdict"] == "confirmed"
    assert results["selected_r2_update"]["chosen_by_validation"]
    assert results["euclidean_r2_update"]["verdict"] == "refuted"  # 0.7 < 0.8 - 0.05
    assert not results["euclidean_r2_update"]["chosen_by_validation"]
    assert explain.prediction_verdicts(record, "other", path) is None


def test_quick_run_writes_the_whole_update_and_keeps_the_committed_file(tmp_path):
    out = tmp_path / "explain.json"
    data = explain.main(["--quick", "--models", "construction", "--out", str(out)])
    whole = data["models"]["construction"]["distill"]["whole"]
    assert whole["selected"]["r2_update"] > 0.999 and whole["euclidean"]["kernel"] == "euclidean"
    assert data["models"]["construction"]["commands"]["distill"].endswith(f"--out {out}")
    assert "### 4. A distilled algorithm for the whole update" in explain.results_section(json.loads(out.read_text()))
    with pytest.raises(SystemExit):
        explain.main(["--quick", "--models", "construction"])  # never over the committed figures
