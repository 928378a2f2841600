"""The learned-default study (``analyses.studies.best_model.measure``): the whole pipeline at tiny sizes, and the
committed results
re-checked from their own rows (differences against the scores, goals against the figures, the choices against the
validation scores and the committed rule, the shipped checkpoint against its candidate)."""

import json
import math
import statistics
from dataclasses import asdict

import child_processes
import pytest

from analyses.studies.best_model import measure as best_model
from interp.model.checkpoint import load_model, read_header
from interp.model.config import InferenceSettings
from interp.training.state import ADDED_TRAIN_FIELDS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
def test_every_stage_runs_at_tiny_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(best_model, "COMMON", {**best_model.COMMON, "steps": 2, "batch": 2, "val_tasks": 2,
                                               "eval_steps": 2, "eval_every": 1})
    monkeypatch.setattr(best_model, "CANDIDATES", {name: {key: value for key, value in design.items() if key != "steps"}
                                                   for name, design in best_model.CANDIDATES.items()})
    tiny = {"VALIDATION_TASKS": 3, "TEST_TASKS": 3, "SPREAD_TASKS": 3, "SPREAD_PERMUTATIONS": 3, "TIMING_ROUNDS": 1,
            "RUNS": tmp_path / "runs", "SHIPPED": tmp_path / "best.safetensors"}
    for name, value in tiny.items():
        monkeypatch.setattr(best_model, name, value)
    monkeypatch.setattr(best_model, "EVALUATIONS", tmp_path)
    child_processes.run(best_model.evaluation_command("main-onehot", tmp_path / "eval-main-onehot", 2, 1),
                        check=True, capture_output=True)
    out = tmp_path / "out.json"
    data = best_model.main(["--stage", *best_model.STAGES, "--protocol-tasks", "2", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(data))
    assert set(data["runs"]) == set(best_model.CANDIDATES)
    scores = data["validation"]["scores"]
    assert data["validation"]["chosen"] == min(best_model.FULL, key=lambda name: scores[name]["mean"])
    assert {entry["verdict"] for entry in data["test"]["verdicts"]["designs"].values()} <= {"confirmed", "refuted"}
    shipped = load_model(tmp_path / "best.safetensors")
    assert shipped.inference == InferenceSettings(steps=20, slot_order="shuffle")
    assert data["shipped"]["candidate"] == data["validation"]["shipped"]
    assert len(data["protocol"]["rows"]) == 3 + 4 + 4 + 5  # main x 3 inits, length, shift, family
    assert set(data["explain"]["verdicts"]) == {"coverage_gain", "coverage_share_of_gain", "symmetric_r2_gain"}
    assert "| best |" in best_model.results_section(data)


@pytest.fixture(scope="module")
def results():
    assert best_model.DEFAULT_OUT.is_file(), "analyses/results/best_model.json is committed (analyses.best_model)"
    return json.loads(best_model.DEFAULT_OUT.read_text())


def test_results_md_holds_the_section_of_the_committed_results(results):
    text = (best_model.ROOT / "analyses" / "RESULTS.md").read_text()
    begin, end = f"<!-- study:{best_model.SECTION_KEY} -->\n", f"\n<!-- /study:{best_model.SECTION_KEY} -->"
    assert begin in text, "python -m analyses.best_model --results-md writes the section"
    assert text.split(begin, 1)[1].split(end, 1)[0] == best_model.results_section(results).rstrip()


def test_the_choices_follow_the_validation_scores_and_the_committed_rule(results):
    validation = results["validation"]
    scores = {name: validation["scores"][name]["mean"] for name in best_model.CANDIDATES}
    assert validation["chosen"] == min(best_model.FULL, key=scores.get)
    assert validation["best_local"] == min(best_model.LOCAL, key=scores.get)
    complete = [name for name, run in results["runs"].items() if run["complete"]]
    assert validation["ruled_over"] == complete and set(best_model.FIRST_SIX) <= set(complete)
    for name, run in results["runs"].items():
        assert run["complete"] == (run["steps"] == best_model.candidate_config(name).steps)
    for file, candidates, local, key in ((best_model.LOCAL_PREDICTIONS, best_model.FIRST_SIX, best_model.LOCAL,
                                          "shipped_of_six"),
                                         (best_model.ROUND2_PREDICTIONS, complete,
                                          [name for name in best_model.LOCAL_CANDIDATES if name in complete],
                                          "shipped")):
        assert "within 0.005" in json.loads(file.read_text())["shipping_rule"]  # the margin below is the committed one
        lowest = min(candidates, key=scores.get)
        best_local = min(local, key=scores.get)
        assert validation[key] == (best_local if scores[best_local] <= scores[lowest] + 0.005 else lowest)
    assert validation["shipped"] == results["test"]["shipped"] == results["shipped"]["candidate"]


def test_test_figures_agree_with_the_scores(results):
    test = results["test"]
    means = {name: score["mean"] for name, score in test["scores"].items()}
    designs, local, round2 = (test["verdicts"][group] for group in ("designs", "local", "round2"))
    chosen, shipped = test["chosen"], test["shipped"]
    # a mean of paired differences is the difference of the means
    for name in best_model.FULL:
        assert designs[f"delta_{name}"]["measured"] == pytest.approx(means[name] - means["main-onehot shuffle"],
                                                                     abs=1e-9)
        assert local[f"local_minus_full_{name}"]["measured"] == pytest.approx(means[f"local-{name}"] - means[name],
                                                                              abs=1e-9)
    assert designs["chosen_minus_kmeanspp10"]["measured"] == pytest.approx(means[chosen] - means["kmeanspp_10"],
                                                                           abs=1e-9)
    for name, difference in test["differences"].items():
        assert difference["mean"] == pytest.approx(means[name.split(" - ")[0]] - means["kmeanspp_10"], abs=1e-9)
    times = test["times"]
    sklearn = statistics.median(times["sklearn_kmeanspp_10_s"])
    assert not times["sklearn_process_imported_torch"]
    assert designs["time_ratio"]["measured"] == pytest.approx(statistics.median(times["model_20_steps_s"][chosen])
                                                              / sklearn)
    goals = test["goals"]
    assert goals["below_kmeanspp_1"] == (means[shipped] < means["kmeanspp_1"])
    assert goals["within_0.01_of_kmeanspp_10"] == (means[shipped] - means["kmeanspp_10"] <= 0.01)
    assert goals["faster_than_kmeanspp_10"] == (statistics.median(times["model_20_steps_s"][shipped]) < sklearn)
    assert round2["shipped_minus_kmeanspp10"]["measured"] == pytest.approx(means[shipped] - means["kmeanspp_10"],
                                                                           abs=1e-9)
    stopped = {"long_minus_local_rollout": "local-rollout-long", "scratch_minus_local_rollout": "local-rollout-scratch"}
    for key, name in stopped.items():  # a run stopped before its registered steps gets no verdict
        assert round2[key]["verdict"].startswith("not tested") == (not results["runs"][name]["complete"])
    for entry in [*designs.values(), *local.values(), *round2.values()]:
        if entry["verdict"].startswith("not tested"):
            continue
        if isinstance(entry["measured"], (str, bool)):
            assert entry["verdict"] == ("confirmed" if entry["measured"] == entry["predicted"] else "refuted")
            continue
        value, tolerance, measured = entry["predicted"], entry["tolerance"], entry["measured"]
        holds = {"within": abs(measured - value) <= tolerance, "at_most": measured <= value + tolerance,
                 "at_least": measured >= value - tolerance}[entry["kind"]]
        assert entry["verdict"] == ("confirmed" if holds else "refuted")


def test_the_shipped_checkpoint_is_the_chosen_candidate(results):
    metadata, _ = read_header(best_model.SHIPPED)
    candidate = results["shipped"]["candidate"]
    # fields added to TrainConfig after the checkpoint was written take their defaults (TrainingState.load does so)
    saved = {**ADDED_TRAIN_FIELDS, **metadata["train_config"]}
    assert saved == json.loads(json.dumps(asdict(best_model.candidate_config(candidate))))
    # the Lloyd steps after best's own were set later by the hybrid study (tests/test_hybrid_results.py)
    lloyd_steps = metadata["inference"].pop("lloyd_steps", 0)
    assert metadata["inference"] == best_model.RECOMMENDED == results["shipped"]["inference"]
    assert f"candidate {candidate!r}" in metadata["source"]
    assert load_model("best").inference == InferenceSettings(**best_model.RECOMMENDED, lloyd_steps=lloyd_steps)


def test_protocol_rows_name_every_row_where_best_is_worse(results):
    protocol = results["protocol"]
    worse = [key for key, row in protocol["rows"].items() if row["best"] > row["main-onehot"]]
    assert protocol["best_worse_than_main_onehot"] == worse
    assert all(math.isfinite(value) for row in protocol["rows"].values() for value in row.values())
