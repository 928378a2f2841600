"""The rows that the claims of studies multistep, generalisation and table1 (analyses/claims.py) read, from their
writers: ``python -m analyses.studies.multistep.measure --seed-rows`` and
``python -m analyses.studies.main_seeds.generalisation`` on checkpoints trained here for 4 steps (d = 2, k = 3, n = 16),
and ``analyses.studies.inference_embedding.measure.table1_rows`` on a stored benchmark table. The rows have the writers'
columns and the claims are decided on them: undecided, with so few seeds and steps."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from analyses import claims as C
from analyses.studies.inference_embedding.measure import TABLE1_COLUMNS, table1_rows, write_embedding_section
from analyses.studies.main_seeds import generalisation
from analyses.studies.multistep import measure as multistep
from interp._checks import InvalidInput
from interp.evaluate import EvalConfig, evaluate, write_csv
from interp.model import KMeansTransformer, ModelConfig
from interp.model.checkpoint import load_model, save_model
from interp.tasks import TaskConfig
from interp.training.config import TrainConfig
from interp.training.train import train

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(d=2, k=3, n=16, steps=4, batch=4, val_tasks=8, eval_every=2)
SMALL = ["--tasks", "4", "--n", "16", "--threads", "1"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{(embedding, seed): path} of four tiny trained checkpoints: one-hot seeds 1 and 2, binary and none seed 1."""
    folder = tmp_path_factory.mktemp("checkpoints")
    torch.set_num_threads(1)
    paths = {}
    for embedding, seed in (("onehot", 1), ("onehot", 2), ("binary", 1), ("none", 1)):
        path = folder / f"embedding={embedding}_seed={seed}.safetensors"
        train(TrainConfig(**TINY, embedding=embedding, seed=seed), path, progress=False)
        paths[embedding, seed] = str(path)
    return paths


def read(path):
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return tuple(reader.fieldnames), list(reader)


# ----- multistep --seed-rows ----------------------------------------------------------------------------------------
def test_multistep_seed_rows(checkpoints, tmp_path):
    rows_csv, results_md = tmp_path / "rows.csv", tmp_path / "R.md"
    text = multistep.main(["--checkpoints", *checkpoints.values(), "--seed-rows", str(rows_csv), "--out",
                           str(tmp_path), "--name", "ms", "--steps", "20", "--results-md", str(results_md), *SMALL])
    columns, rows = read(rows_csv)
    assert columns == multistep.SEED_ROW_COLUMNS
    assert [(json.loads(r["config"])["embedding"], int(r["seed"])) for r in rows] == list(checkpoints)
    for row in rows:
        model, stacked, lloyd = (json.loads(row[c]) for c in ("model_curve", "stacked_curve", "lloyd_curve"))
        assert len(model) == len(stacked) == len(lloyd) == 21 and all(map(math.isfinite, model + lloyd))
        assert model[0] == pytest.approx(lloyd[0]) and model[1] == pytest.approx(stacked[1])  # same start, one layer
        assert (row["status"], row["steps"], row["study"]) == ("ok", "4", "multistep")
        assert row["name"] == f"embedding={json.loads(row['config'])['embedding']}_seed={row['seed']}"
    results = C.decide_study("multistep", rows)
    assert [claim.id for claim, _ in results] == [claim.id for claim in C.claims_of("multistep")]
    for _, verdict in results:  # two one-hot seeds and one of each other embedding, trained 4 steps
        assert verdict.outcome == C.UNDECIDED and ">= 10000 configured training steps in 0/" in verdict.control_figure
        assert "T = 20 steps in" in verdict.control_figure and "(>= 5 each)" in verdict.control_figure
    assert "seeds onehot 2, binary 1, none 1 (>= 5 each)" in results[0][1].control_figure
    assert json.loads((tmp_path / "ms.json").read_text())["seed_rows"] == "rows.csv"
    for line in C.verdict_lines(results):
        assert line in text and line in results_md.read_text()


def test_multistep_keep_rows_scores_seeds_evaluated_at_different_times(checkpoints, tmp_path, monkeypatch):
    """Rows written in two runs with --keep-rows equal one run over all the checkpoints, byte for byte; a checkpoint
    given again replaces its row in place; rows evaluated otherwise, or a CSV of other columns, are refused."""
    paths = list(checkpoints.values())  # onehot 1, onehot 2, binary 1, none 1

    def run(rows_csv, given, *extra):
        return multistep.main(["--checkpoints", *given, "--seed-rows", str(rows_csv), "--out", str(tmp_path),
                               "--name", rows_csv.stem, "--steps", "3", *SMALL, *extra])

    whole, parts = tmp_path / "whole.csv", tmp_path / "parts.csv"
    whole_text = run(whole, paths)
    run(parts, paths[:2])
    parts_text = run(parts, paths[2:], "--keep-rows")
    assert parts.read_text() == whole.read_text()
    assert parts_text.replace("parts", "whole") == whole_text  # the section reads every row (curves and verdicts)
    assert "seeds onehot 2, binary 1, none 1 (>= 5 each)" in parts_text
    stored = json.loads((tmp_path / "parts.json").read_text())
    assert stored["checkpoints"] == paths and [len(runs) for runs in stored["curves"].values()] == [2, 1, 1]
    run(parts, paths[2:3], "--keep-rows")  # binary seed 1 again: its row is replaced where it stands
    assert parts.read_text() == whole.read_text()
    rows_only = multistep.main(["--seed-rows", str(parts), "--out", str(tmp_path), "--name", "parts", "--keep-rows"])
    assert rows_only == parts_text and parts.read_text() == whole.read_text()  # no checkpoint: the rows' section
    assert json.loads((tmp_path / "parts.json").read_text()) == stored
    monkeypatch.setattr(multistep, "curves", None)  # a mismatch is refused before any evaluation
    with pytest.raises(InvalidInput, match=r"^--seed-rows \S+parts.csv: its row embedding=onehot_seed=1 was "
                       r"written with tasks=4, n=16, T=3, seed=20261130, this run with tasks=4, n=16, T=2, "
                       r"seed=20261130 \(tasks per setting, n, T steps, seed\)"):
        multistep.main(["--checkpoints", paths[0], "--seed-rows", str(parts), "--out", str(tmp_path), "--name", "p",
                        "--steps", "2", *SMALL, "--keep-rows"])
    assert parts.read_text() == whole.read_text() and not (tmp_path / "p.json").exists()
    other = tmp_path / "other.csv"
    other.write_text("study,name\nmultistep,x\n")
    with pytest.raises(InvalidInput, match=r"^--seed-rows \S+other.csv holds the columns \['study', 'name'\]"):
        run(other, paths[:1], "--keep-rows")
    with pytest.raises(InvalidInput, match=r"^--keep-rows keeps the rows of --seed-rows"):
        multistep.main(["--checkpoints", paths[0], "--out", str(tmp_path), "--keep-rows", *SMALL])


def test_multistep_seed_rows_need_a_training_config(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_model(plain, KMeansTransformer(ModelConfig(d=2, k=3)))  # model_config only, no train_config
    with pytest.raises(InvalidInput, match=r"^--seed-rows: checkpoint \S+plain.safetensors has no train_config"):
        multistep.main(["--checkpoints", str(plain), "--seed-rows", str(tmp_path / "rows.csv"), "--out",
                        str(tmp_path), "--steps", "2", *SMALL])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.safetensors"]  # nothing written


def test_multistep_curves_are_infinite_where_centroids_are_not_finite(checkpoints):
    """Stacking that overflows gives +inf (the worst objective) from that step on instead of stopping the run."""
    model = load_model(checkpoints["onehot", 1])
    with torch.no_grad():
        model.layers[0].attn_cx.W_V.mul_(1e30)  # the centroid update overflows
    curve = multistep.curves(model, 4, 3, 16, 0)
    assert math.isfinite(curve["reembedded"][0]) and curve["stacked"][-1] == math.inf
    assert all(map(math.isfinite, curve["lloyd"]))


# ----- generalisation -----------------------------------------------------------------------------------------------
def test_generalisation_rows(checkpoints, tmp_path):
    out = tmp_path / "generalisation.csv"
    paths = [checkpoints["onehot", 1], checkpoints["onehot", 2]]
    text = generalisation.main(["--checkpoints", *paths, "--out", str(out), "--steps", "20", *SMALL])
    columns, rows = read(out)
    assert columns == generalisation.COLUMNS and len(rows) == 2 * 9  # main, 4 lengths, 4 shifts per checkpoint
    settings = [(r["protocol"], r["setting"]) for r in rows[:9]]
    assert settings == [("main", "in-distribution"), *(("length", f"n={n}") for n in C.GENERALISATION_LENGTHS),
                        *(("shift", s) for s in C.SHIFTS)]
    for row in rows:
        config = json.loads(row["config"])
        assert (config["protocol"], config["setting"], config["embedding"]) == (row["protocol"], row["setting"],
                                                                                "onehot")
        assert config["eval_n"] == (int(row["setting"][2:]) if row["protocol"] == "length" else 16)
        assert len(json.loads(row["model_curve"])) == len(json.loads(row["lloyd_curve"])) == 21
    results = C.decide_study("generalisation", rows)
    for _, verdict in results:  # two seeds, 4 training steps, in-distribution at n = 16 rather than 512
        assert verdict.outcome == C.UNDECIDED and "in-distribution n=512 0 (>= 5 each)" in verdict.control_figure
    assert "double scale: " in results[2][1].figure
    assert all(line in text for line in C.verdict_lines(results))


def test_generalisation_keep_rows_scores_seeds_evaluated_at_different_times(checkpoints, tmp_path, monkeypatch):
    """Two runs with --keep-rows write the rows of one run over both checkpoints, byte for byte; another --seed is
    refused and leaves the rows as they were."""
    paths = [checkpoints["onehot", 1], checkpoints["onehot", 2]]
    whole, parts = tmp_path / "whole.csv", tmp_path / "parts.csv"
    whole_text = generalisation.main(["--checkpoints", *paths, "--out", str(whole), "--steps", "2", *SMALL])
    generalisation.main(["--checkpoints", paths[0], "--out", str(parts), "--steps", "2", *SMALL])
    parts_text = generalisation.main(["--checkpoints", paths[1], "--out", str(parts), "--steps", "2", *SMALL,
                                      "--keep-rows"])
    assert parts.read_text() == whole.read_text() and parts_text == whole_text
    rows_only = generalisation.main(["--out", str(parts), "--keep-rows"])  # no checkpoint: the rows' section
    assert rows_only == whole_text and parts.read_text() == whole.read_text()
    monkeypatch.setattr(generalisation, "evaluate_checkpoints", None)  # refused before any evaluation
    with pytest.raises(InvalidInput, match=r"^--out \S+parts.csv: its row \S+ was written with tasks=4, n=16, "
                       r"T=2, seed=20261130, this run with tasks=4, n=16, T=2, seed=7 "):
        generalisation.main(["--checkpoints", paths[1], "--out", str(parts), "--steps", "2", "--seed", "7", *SMALL,
                             "--keep-rows"])
    assert parts.read_text() == whole.read_text()
    with pytest.raises(InvalidInput, match=r"^--evaluation \S+ with --keep-rows: an evaluation folder does not record"):
        generalisation.main(["--checkpoints", paths[1], "--out", str(parts), "--evaluation", str(tmp_path), *SMALL,
                             "--keep-rows"])


def test_generalisation_reads_an_evaluation_folder(checkpoints, tmp_path):
    """The rows read from an ``interp evaluate`` evaluation.csv (several inits) equal those of evaluating here."""
    path = checkpoints["onehot", 1]
    model = load_model(path)
    config = EvalConfig(n_tasks=4, steps=3, inits=("random", "kmeans++"), protocols=("main", "length", "shift"),
                        baselines=False)
    (tmp_path / "eval").mkdir()
    write_csv(evaluate({path: model}, TaskConfig(n=16, d=2, k=3), config), tmp_path / "eval" / "evaluation.csv")
    read_back, evaluated = tmp_path / "read.csv", tmp_path / "evaluated.csv"
    generalisation.main(["--checkpoints", path, "--evaluation", str(tmp_path / "eval"), "--out", str(read_back),
                         *SMALL])
    generalisation.main(["--checkpoints", path, "--steps", "3", "--out", str(evaluated), *SMALL])
    assert read_back.read_text() == evaluated.read_text()
    with pytest.raises(InvalidInput, match="are not the ones given"):
        generalisation.main(["--checkpoints", checkpoints["onehot", 2], "--evaluation", str(tmp_path / "eval"),
                             "--out", str(tmp_path / "other.csv"), *SMALL])
    rows = [row for row in generalisation.read_csv(tmp_path / "eval" / "evaluation.csv") if row["init"] != "random"]
    with pytest.raises(InvalidInput, match=r"lacks random-start rows for every step 0..T"):
        generalisation.claim_rows(rows, {path: {"train_config": TINY, "step": 4}}, 16, 4, 0)


# ----- table1 -------------------------------------------------------------------------------------------------------
HEADER = ["k", "extra dims OH/BN", "forward ms OH/BN", "speed-up", "peak MB OH/BN", "memory saved"]
TITLE = ('one-hot vs binary, one-layer learnable model, {"d": 32, "n": 1024, "batch": 32}, 2 threads, median of 3 '
         'interleaved rounds (paper 2 Table 1)')


def stored(cells):
    return {"command": "python -m analyses.bench_inference --embeddings-only", "source": "written by that command",
            "title": TITLE, "header": HEADER, "rows": cells, "footer": None}


def test_table1_rows_read_the_stored_table(tmp_path):
    cells = [["6", "6/3", "4.25/4.83", "0.88x", "51/48", "0.9%"], ["25", "25/5", "5.24/4.99", "1.05x", "10/10", "n/a"]]
    rows = table1_rows(stored(cells))
    assert [tuple(row) for row in rows] == [TABLE1_COLUMNS] * 2
    assert {key: rows[0][key] for key in ("k", "onehot_ms", "binary_ms", "speedup", "onehot_mb", "binary_mb",
                                          "memory_saved")} == {"k": 6, "onehot_ms": 4.25, "binary_ms": 4.83,
                                                               "speedup": 0.88, "onehot_mb": 51.0, "binary_mb": 48.0,
                                                               "memory_saved": 0.9}
    assert math.isnan(rows[1]["memory_saved"]) and json.loads(rows[1]["config"]) == {"k": 25}
    assert (rows[0]["title"], rows[0]["command"]) == (TITLE, "python -m analyses.bench_inference --embeddings-only")
    verdicts = C.decide_study("table1", rows)
    assert all(v.outcome == C.UNDECIDED and "present: 2/5" in v.control_figure for _, v in verdicts)
    with pytest.raises(InvalidInput, match="is not k"):
        table1_rows(stored([["6", "6/3", "4.25", "0.88x", "51/48", "0.9%"]]))
    with pytest.raises(InvalidInput, match="not the stored one-hot vs binary table"):
        table1_rows({"title": TITLE, "rows": []})
    section = tmp_path / "R.md"
    write_embedding_section(cells, HEADER, {"d": 32}, 3, section, stored(cells))
    assert all(line in section.read_text() for line in C.verdict_lines(verdicts))


def test_table1_rows_of_the_committed_benchmark():
    """The reader takes the committed table as bench_inference stored it: one row per k of the paper's grid."""
    data = json.loads((ROOT / "analyses" / "results" / "bench" / "inference_embeddings.json").read_text())
    assert [row["k"] for row in table1_rows(data)] == list(C.TABLE1_KS)


@pytest.mark.parametrize("metadata,status", [
    ({"step": 4, "train_config": {"steps": 4}}, "ok"),
    ({"step": 3, "train_config": {"steps": 4}}, "unfinished"),  # saved before its configured steps
    ({"step": 2, "diverged": True, "train_config": {"steps": 4}}, "diverged"),  # marked so by its trainer
])
def test_a_checkpoint_row_status_is_read_from_its_metadata(metadata, status):
    from analyses._shared import checkpoint_status

    assert checkpoint_status(metadata) == status
