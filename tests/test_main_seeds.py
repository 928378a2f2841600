"""``python -m analyses.studies.main_seeds.measure``: each seed trained, then scored into the multistep and
generalisation rows at once, on a tiny configuration (d = 2, k = 3, n = 16, 4 training steps). The rows it writes seed
by seed equal those of one ``analyses.studies.multistep.measure`` / ``analyses.studies.main_seeds.generalisation`` run
over all the checkpoints; a scored seed is skipped; a row whose checkpoint is gone is refused; the scoring lock excludes
a second holder."""

import csv
import json
import re
import threading
import time

import pytest

from analyses.studies.main_seeds import generalisation
from analyses.studies.main_seeds import measure as main_seeds
from analyses.studies.multistep import measure as multistep
from interp._checks import InvalidInput


def rows_of(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture()
def tiny(tmp_path):
    out, checkpoints = tmp_path / "results", tmp_path / "checkpoints"
    out.mkdir()
    return out, checkpoints, ["--pair", "2x3", "--n", "16", "--steps", "4", "--eval-tasks", "8", "--tasks", "4",
                              "--out", str(out), "--checkpoints", str(checkpoints)]


def titled(section: str) -> str:
    """A section's title with the program its Command line runs written PROGRAM: the title names that program."""
    program = re.search(r"^Command: `(python -m [^\s`]+)", section, re.M).group(1)
    return section.splitlines()[0].replace(f"(`{program}`)", "(`PROGRAM`)")


def test_each_seed_is_trained_then_scored_as_one_run_would_score_them_all(tiny, tmp_path):
    out, checkpoints, args = tiny
    assert main_seeds.main(["--embeddings", "onehot", "binary", "--seeds", "1", "2", *args, "--plan"]) == [
        "main seeds: 4 seed runs to train and score (onehot 1; onehot 2; binary 1; binary 2)"]
    main_seeds.main(["--embeddings", "onehot", "--seeds", "1", "2", *args])
    main_seeds.main(["--embeddings", "binary", "--seeds", "1", *args])
    trained = rows_of(out / "embedding_d2_k3.csv")
    assert sorted((row["label"], row["seed"], row["steps"]) for row in trained) == [
        ("embedding=binary", "1", "4"), ("embedding=onehot", "1", "4"), ("embedding=onehot", "2", "4")]
    paths = [str(checkpoints / f"embedding={e}_seed={s}.safetensors") for e, s in (("onehot", 1), ("onehot", 2),
                                                                                  ("binary", 1))]
    multistep.main(["--checkpoints", *paths, "--seed-rows", str(tmp_path / "ms.csv"), "--out", str(tmp_path),
                    "--name", "ms", "--tasks", "4", "--n", "16", "--threads", "1"])
    generalisation.main(["--checkpoints", *paths[:2], "--out", str(tmp_path / "g.csv"), "--tasks", "4", "--n", "16",
                         "--threads", "1"])
    assert (out / "multistep_seeds.csv").read_text() == (tmp_path / "ms.csv").read_text()
    assert (out / "generalisation.csv").read_text() == (tmp_path / "g.csv").read_text()  # one-hot only
    assert main_seeds.main(["--embeddings", "onehot", "binary", "--seeds", "1", "2", *args, "--plan"]) == [
        "main seeds: 1 seed run to train and score (binary 2)"]
    before = {path.name: path.read_text() for path in out.iterdir() if path.is_file()}
    assert main_seeds.main(["--embeddings", "onehot", "binary", "--seeds", "1", *args]) == []  # all scored
    assert {path.name: path.read_text() for path in out.iterdir() if path.is_file()} == before

    results_md = tmp_path / "R.md"  # the sections from the rows alone, checkpoints gone
    for path in checkpoints.glob("*.safetensors"):
        path.unlink()
    texts = main_seeds.main(["--embeddings", "binary", "--seeds", "1", "2", *args, "--score-only", "--results-md",
                             str(results_md)])
    text = results_md.read_text()
    assert [titled(t) for t in texts] == [  # binary 2 has no training row: no training section
        "## Study `multistep_seeds`: re-embedding vs naive stacking (`PROGRAM`)",
        "## Study `generalisation`: length and shift generalisation (`PROGRAM`)"]
    assert all(t.strip() in text for t in texts) and "seeds onehot 2, binary 1, none 0 (>= 5 each)" in text
    assert "## Study `embedding_d2_k3`" not in text and not (out / "embedding_d2_k3_training.json").exists()
    texts = main_seeds.main(["--embeddings", "onehot", "binary", "--seeds", "1", *args, "--score-only",
                             "--results-md", str(results_md)])  # every asked row written: the training section too
    assert titled(texts[0]) == ("## Study `embedding_d2_k3`: Embedding width at d = 2, k = 3, n = 16: one-hot (D = 5) "
                                "vs binary vs none (D = 2) (`PROGRAM`)")
    assert "| embedding=onehot | 1 (0) |" in texts[0] and "| embedding=binary | 1 (0) |" in texts[0]
    summary = json.loads((out / "embedding_d2_k3_training.json").read_text())
    assert sorted(summary["rows"]) == [["embedding=binary_seed=1", 4], ["embedding=onehot_seed=1", 4]]



def test_a_row_without_its_checkpoint_is_refused(tiny, tmp_path):
    out, checkpoints, args = tiny
    elsewhere = [*args, "--checkpoints", str(tmp_path / "elsewhere")]
    main_seeds.main(["--embeddings", "none", "--seeds", "3", *elsewhere])
    (out / "multistep_seeds.csv").unlink()  # trained and scored elsewhere; the scores lost, the training row kept
    with pytest.raises(InvalidInput, match=r"^--seeds 3: its training row is written but its checkpoint \S+"
                       r"checkpoints/embedding=none_seed=3.safetensors is not here"):
        main_seeds.main(["--embeddings", "none", "--seeds", "3", *args])
    assert main_seeds.main(["--embeddings", "none", "--seeds", "3", *args, "--score-only"]) == []  # nothing here


def test_the_default_checkpoint_folder_is_made_on_a_fresh_machine(tiny, tmp_path, monkeypatch):
    out, checkpoints, args = tiny
    monkeypatch.chdir(tmp_path)  # no runs/ here, as in a fresh clone
    main_seeds.main(["--embeddings", "none", "--seeds", "1", *args[:-2]])  # without --checkpoints
    assert (tmp_path / "runs" / "studies" / "embedding_d2_k3" / "embedding=none_seed=1.safetensors").is_file()
    assert [row["label"] for row in rows_of(out / "multistep_seeds.csv")] == ["embedding=none"]
    assert not (out / "embedding_d2_k3_training.json").exists()  # one seed's run leaves the study's summary alone


def test_other_scoring_settings_are_refused_before_any_training(tiny, monkeypatch):
    out, checkpoints, args = tiny
    main_seeds.main(["--embeddings", "none", "--seeds", "1", *args])  # rows scored at --tasks 4
    table = (out / "embedding_d2_k3.csv").read_text()
    monkeypatch.setattr(main_seeds.ablate_embedding, "main", None)  # training would fail the test
    with pytest.raises(InvalidInput, match=r"^--out \S+multistep_seeds.csv: its row embedding=none_seed=1 was written "
                       r"with tasks=4, n=16, T=20, seed=20261130, this run with tasks=8, n=16, T=20, seed=20261130"):
        main_seeds.main(["--embeddings", "none", "--seeds", "2", *args, "--tasks", "8"])
    assert (out / "embedding_d2_k3.csv").read_text() == table


def test_a_diverged_seed_counts_as_scored_and_a_checkpoint_still_training_is_not_scored(tiny, tmp_path):
    out, checkpoints, args = tiny
    trained = {"d": 2, "k": 3, "n": 16, "steps": 4}
    row = {"seed": "5", "steps": "2", "status": "diverged", "config": json.dumps({**trained, "embedding": "none"})}
    with open(out / "multistep_seeds.csv", "w", newline="") as handle:  # the seed diverged at step 2 of 4
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    assert main_seeds.scored(out, "none", 5, trained)
    assert not main_seeds.scored(out, "none", 5, {**trained, "steps": 8})  # another budget: not this seed's row
    assert not main_seeds.scored(out, "onehot", 5, trained)
    (out / "multistep_seeds.csv").unlink()

    checkpoints.mkdir()  # a checkpoint saved mid-training: no training row yet
    from interp.model import KMeansTransformer, ModelConfig
    from interp.model.checkpoint import save_model

    save_model(checkpoints / "embedding=none_seed=6.safetensors", KMeansTransformer(ModelConfig(d=2, k=3)))
    assert main_seeds.main(["--embeddings", "none", "--seeds", "6", *args, "--score-only"]) == []
    assert not (out / "multistep_seeds.csv").exists()


def test_the_scoring_lock_excludes_a_second_holder(tmp_path):
    events = []

    def second():
        with main_seeds.scoring_lock(tmp_path):
            events.append("second")

    with main_seeds.scoring_lock(tmp_path):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        events.append("first ends")
    thread.join(5)
    assert events == ["first ends", "second"]
    assert list(tmp_path.iterdir()) == []  # the lock is on the folder: no file is left among the results
