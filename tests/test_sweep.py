"""The sweep engine: rows per seed with content, resumable, same numbers on the local pool and on Ray."""

import csv
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.evaluate import EVAL_SEED
from interp.model.checkpoint import load_model
from interp.tasks import TaskConfig, init_centroids, sample_tasks
from interp.training.sweep import FIELDS, SweepConfig, groups, read_rows, run_sweep, study_rows

BASE = {"d": 3, "k": 3, "n": 32, "batch": 4, "val_tasks": 8, "eval_every": 5, "steps": 10}


def _config(tmp_path, **overrides):
    settings = dict(study="tiny", base=BASE, grid={"tau": [1.0, 0.1]}, seeds=(0, 1), out=tmp_path, workers=1,
                    eval_tasks=4, eval_steps=3)
    settings.update(overrides)
    return SweepConfig(**settings)


def _by_name(path):
    return {row["name"]: row for row in read_rows(path)}


def _mean_log_objective_after(path, steps: int) -> tuple[float, float]:
    """The saved model's and Lloyd's mean log objective after ``steps`` steps on the evaluation tasks (paper 2 App. C:
    tasks drawn in float32 from the evaluation seed, random initial centroids from the next seed), recomputed here
    with a NumPy objective and a NumPy Lloyd (every initial centre is a data point: no cluster empties here)."""
    model = load_model(path)
    points = sample_tasks(TaskConfig(n=BASE["n"], d=BASE["d"], k=BASE["k"]), 4, torch.Generator().manual_seed(
        EVAL_SEED)).points  # (4, n, d)
    init = init_centroids(points, BASE["k"], "random", torch.Generator().manual_seed(EVAL_SEED + 1))
    with torch.no_grad():
        stepped = model(points, init, steps=steps, reembed=True).centroids.double().numpy()
    x, centres = points.double().numpy(), init.double().numpy()
    for _ in range(steps):
        labels = ((x[:, :, None, :] - centres[:, None, :, :]) ** 2).sum(-1).argmin(-1)  # (b, n)
        centres = np.stack([[x[b][labels[b] == j].mean(0) for j in range(BASE["k"])] for b in range(len(x))])

    def mean_log(c):
        return float(np.log(((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1)).mean())

    return mean_log(stepped), mean_log(centres)


def test_rows_have_every_score(tmp_path):
    config = _config(tmp_path, eval_families=("normal", "laplace"))
    table = run_sweep(config, progress=False)
    rows = read_rows(table)
    assert list(rows[0]) == list(FIELDS)
    assert sorted(r["name"] for r in rows) == ["tau=0.1_seed=0", "tau=0.1_seed=1", "tau=1.0_seed=0", "tau=1.0_seed=1"]
    for row in rows:
        assert row["status"] == "ok" and row["steps"] == "10"
        for name in ("relative_objective", "model_log_objective", "lloyd_log_objective", "loss_gap_mean",
                     "loss_gap_max"):
            assert math.isfinite(float(row[name])), name
        model_curve, lloyd_curve = json.loads(row["model_curve"]), json.loads(row["lloyd_curve"])
        assert len(model_curve) == len(lloyd_curve) == 4 and model_curve[0] == pytest.approx(lloyd_curve[0])
        # the scores are those of the saved model on the evaluation tasks, after eval_steps = 3 steps
        model_value, lloyd_value = _mean_log_objective_after(config.checkpoint_dir / f"{row['name']}.safetensors", 3)
        assert float(row["model_log_objective"]) == pytest.approx(model_value, abs=1e-4)
        assert float(row["lloyd_log_objective"]) == pytest.approx(lloyd_value, abs=1e-4)
        assert all(lloyd_curve[t + 1] <= lloyd_curve[t] + 1e-9 for t in range(3))  # Lloyd never goes up
        assert float(row["loss_gap_max"]) >= float(row["loss_gap_mean"]) >= 0  # the smoothed loss bounds Phi
        transfer = json.loads(row["transfer"])
        assert set(transfer) == {"normal", "laplace"}
        assert transfer["normal"]["model"] == pytest.approx(float(row["model_log_objective"]))
        assert json.loads(row["config"])["tau"] == float(row["label"].split("=")[1])


def test_a_rerun_skips_finished_rows_and_finishes_missing_ones(tmp_path):
    config = _config(tmp_path)
    table = run_sweep(config, progress=False)
    rows = read_rows(table)
    with open(table, "w", newline="") as handle:  # lose one row, as an interruption between grid points would
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows[:-1])
    run_sweep(config, progress=False)
    again = _by_name(table)
    assert len(again) == 4
    assert again[rows[-1]["name"]]["model_log_objective"] == rows[-1]["model_log_objective"]  # same checkpoint
    run_sweep(config, progress=False)
    assert len(read_rows(table)) == 4


def test_a_diverged_seed_batched_checkpoint_gives_a_diverged_row(tmp_path):
    """A grid point's checkpoint that the former seed-batched trainer marked diverged is not trained on: its row is
    scored on that last good checkpoint with status diverged, as the batched sweep scored it; the other seed trains."""
    from interp.model.checkpoint import load_checkpoint, save_checkpoint
    from interp.training.train import TrainConfig, train

    config = _config(tmp_path, grid={"tau": [1.0]})
    config.checkpoint_dir.mkdir(parents=True)
    path = config.checkpoint_dir / "tau=1.0_seed=0.safetensors"
    train(TrainConfig(**BASE, tau=1.0, seed=0), path, progress=False, stop_after=5)
    tensors, meta = load_checkpoint(path)
    save_checkpoint(path, tensors, {**meta, "trainer": "seed_batch", "diverged": "loss became non-finite at step 7"})
    rows = _by_name(run_sweep(config, progress=False))
    assert [(name, row["status"], row["steps"]) for name, row in rows.items()] == [
        ("tau=1.0_seed=0", "diverged", "5"), ("tau=1.0_seed=1", "ok", "10")]
    assert all(math.isfinite(float(row["model_log_objective"])) for row in rows.values())


@pytest.mark.slow
def test_ray_backend_gives_the_local_numbers(tmp_path):
    local = _by_name(run_sweep(_config(tmp_path / "local"), progress=False))
    on_ray = _by_name(run_sweep(_config(tmp_path / "ray", backend="ray"), progress=False))
    assert local.keys() == on_ray.keys()
    for name in local:
        for field in ("relative_objective", "model_log_objective", "lloyd_log_objective", "loss_gap_mean"):
            assert float(local[name][field]) == float(on_ray[name][field]), (name, field)


def test_bad_sweep_configs_are_named(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        _config(tmp_path, backend="dask")
    with pytest.raises(ValueError, match="unknown or reserved training config field 'sed'"):
        _config(tmp_path, grid={"sed": [1]})
    with pytest.raises(ValueError, match="reserved"):
        _config(tmp_path, grid={"seed": [1, 2]})
    with pytest.raises(ValueError, match="seeds must be distinct"):
        _config(tmp_path, seeds=(1, 1))
    with pytest.raises(ValueError, match="grid\\['tau'\\] must be a non-empty list"):
        _config(tmp_path, grid={"tau": []})
    with pytest.raises(ValueError, match="eval_families"):
        _config(tmp_path, eval_families=("uniform",))
    with pytest.raises(ValueError, match="tau must be a positive"):
        groups(_config(tmp_path, grid={"tau": [-1.0]}))
    with pytest.raises(ValueError, match="study must be"):
        _config(tmp_path, study="a/b")


def test_a_cut_off_row_is_not_taken_as_finished(tmp_path):
    config = _config(tmp_path, grid={"tau": [0.1]}, seeds=(0,))
    table = run_sweep(config, progress=False)
    text = table.read_text()
    header, row = text.splitlines()[0], text.splitlines()[1]
    table.write_text(header + "\n" + row[: len(row) // 2])  # killed in the middle of writing the row
    assert read_rows(table) == []
    run_sweep(config, progress=False)
    rows = read_rows(table)
    assert len(rows) == 1 and rows[0]["name"] == "tau=0.1_seed=0"
    assert math.isfinite(float(rows[0]["relative_objective"]))


APPEND_MANY = """
import sys
from pathlib import Path
from interp.training import sweep
path, tag, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for index in range(count):
    sweep._append(path, f"{tag},{index}," + "x" * 4_000_000 + "\\n")  # long lines: a wide window for the race
"""  # a process of the test below


@pytest.mark.slow
def test_two_runs_appending_to_one_table_never_cut_each_others_lines(tmp_path):
    """Two lanes share a study's table (analyses.studies --only-grid): each append is whole, under a lock, and the
    cut-off-line repair only ever removes an interrupted writer's half line, never the other lane's. (Without the
    lock, this test lost 1-12 of its 60 lines in 4 of 5 runs: a reader saw the other writer's half line and cut it.)"""
    import contextlib
    import sys

    from child_processes import running

    path = tmp_path / "shared.csv"
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(running([sys.executable, "-c", APPEND_MANY, str(path), tag, "30"]))
                   for tag in ("a", "b")]
        for writer in writers:
            assert writer.wait(timeout=120) == 0
    lines = path.read_text().splitlines()
    assert sorted(line.split(",")[0] + line.split(",")[1] for line in lines) == sorted(
        f"{tag}{index}" for tag in ("a", "b") for index in range(30))
    assert all(len(line) == len(line.split(",")[0]) + len(line.split(",")[1]) + 2 + 4_000_000 for line in lines)


def test_changed_fixed_fields_are_not_taken_from_an_earlier_sweep(tmp_path):
    short = _config(tmp_path, grid={"tau": [0.1]}, seeds=(0,))
    run_sweep(short, progress=False)
    longer = _config(tmp_path, grid={"tau": [0.1]}, seeds=(0,), base={**BASE, "steps": 15})
    run_sweep(longer, progress=False)  # the checkpoint is extended, a new row is written
    assert len(read_rows(longer.table)) == 2
    (row,) = study_rows(longer)
    assert row["steps"] == "15" and json.loads(row["config"])["steps"] == 15
    (old,) = study_rows(short)
    assert old["steps"] == "10"


def test_grid_values_that_print_alike_are_refused(tmp_path):
    with pytest.raises(ValueError, match="grid values must be distinct as printed"):
        groups(_config(tmp_path, grid={"tau": [0.1, 0.10]}))
    with pytest.raises(TypeError, match="seeds must be a tuple of ints"):
        _config(tmp_path, seeds=3)


def test_each_row_keeps_its_training_curve_beside_the_table(tmp_path):
    """Every written row has its checkpoint's history in <study>_histories.jsonl, found by (name, config); the
    curves outlive the checkpoints; a line cut off by an interruption is not taken."""
    from interp.model.checkpoint import load_checkpoint
    from interp.training.sweep import histories_path, read_histories, row_histories

    config = _config(tmp_path)
    table = run_sweep(config, progress=False)
    rows = study_rows(config)
    assert histories_path(table) == tmp_path / "tiny_histories.jsonl"
    curves = row_histories(rows, table)
    for row, curve in zip(rows, curves):
        saved = load_checkpoint(config.checkpoint_dir / f"{row['name']}.safetensors")[1]["history"]
        assert curve == saved
        assert [entry["step"] for entry in curve] == [0, 5, 10]  # eval_every 5, 10 steps
        assert curve[-1]["relative_objective"] == float(row["relative_objective"])
    for path in config.checkpoint_dir.iterdir():
        path.unlink()
    assert row_histories(rows, table) == curves  # scoring needs no checkpoint
    text = histories_path(table).read_text()
    for line, curve in zip(text.splitlines(), curves):  # stored as columns, one list per logged field
        stored = json.loads(line)
        assert list(stored["history"]) == ["step", "loss", "relative_objective", "lr"]
        assert stored["float32"] == ["loss", "relative_objective"]  # float32 training: written short
        assert stored["history"]["step"] == [0, 5, 10] and stored["history"]["lr"] == [entry["lr"] for entry in curve]
        for field in stored["float32"]:
            assert [entry[field] for entry in curve] == [
                None if value is None else float(np.float32(value)) for value in stored["history"][field]]
    histories_path(table).write_text(text + text.splitlines()[0][:40])  # an interrupted append
    assert len(read_histories(table)) == 4
    lost = rows[0]
    kept = [line for line in text.splitlines() if json.loads(line)["name"] != lost["name"]]
    histories_path(table).write_text("\n".join(kept) + "\n")
    with pytest.raises(FileNotFoundError, match=lost["name"]):
        row_histories(rows, table)


def test_histories_stored_one_object_per_step_read_as_the_columns_do(tmp_path):
    """A line written as tables were before the columns (one {step, loss, relative_objective, lr} object per logged
    step) reads as the same history as its columnar line, and the columnar line is the shorter."""
    from interp.training.sweep import config_key, history_line, read_histories

    history = [{"step": 0, "loss": None, "relative_objective": 10.625, "lr": 0.01},
               {"step": 50, "loss": 49.25, "relative_objective": 1.96875, "lr": 0.005}]
    per_step = json.dumps({"name": "a_seed=1", "config": '{"d": 4}', "history": history}, separators=(",", ":"))
    columns = history_line("b_seed=1", '{"d": 4}', history)
    assert json.loads(columns)["history"] == {"step": [0, 50], "loss": [None, 49.25],
                                              "relative_objective": [10.625, 1.96875], "lr": [0.01, 0.005]}
    assert len(columns) < len(per_step)
    (tmp_path / "t_histories.jsonl").write_text(per_step + "\n" + columns)
    stored = read_histories(tmp_path / "t.csv")
    key = config_key('{"d": 4}')
    assert stored[("a_seed=1", key)] == history == stored[("b_seed=1", key)]


def test_float32_columns_are_written_short_and_read_back_bit_for_bit(tmp_path):
    """A column of float32 values widened to float (what float32 training logs) is written with float32's shortest
    decimals and named in the line's "float32" list; reading widens it back to the very same floats. A column of
    float64 values (a learning rate halved from 0.01) and the int steps are written as they are."""
    from interp.training.sweep import history_line, read_histories

    relative = [float(np.float32(value)) for value in (15.3609, 1.8947, 0.1)]  # 15.360899925231934, ...
    history = [{"step": 50 * i, "loss": None if i == 0 else relative[i] * 300, "relative_objective": relative[i],
                "lr": 0.01 / 2 ** i} for i in range(3)]
    history[1]["loss"] = history[2]["loss"] = float(np.float32(466.5384))
    line = json.loads(history_line("a_seed=1", '{"d": 4}', history))
    assert line["float32"] == ["loss", "relative_objective"]
    assert line["history"]["relative_objective"] == [15.3609, 1.8947, 0.1]  # shortest decimals of the float32s
    assert line["history"]["lr"] == [0.01, 0.005, 0.0025] and line["history"]["step"] == [0, 50, 100]
    assert relative[2] != 0.1 and relative[2] == 0.10000000149011612
    (tmp_path / "t_histories.jsonl").write_text(history_line("a_seed=1", '{"d": 4}', history))
    [stored] = read_histories(tmp_path / "t.csv").values()
    assert stored == history and [entry["relative_objective"] for entry in stored] == relative
    float64 = [{**entry, "relative_objective": 0.1} for entry in history]  # 0.1 is no float32 value
    assert "relative_objective" not in json.loads(history_line("b", "{}", float64))["float32"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(width=32)), min_size=1, max_size=6))
def test_every_column_reads_back_as_written(values):
    """Any column (float32 values of any kind: negative, zero, subnormal, inf, nan; None among them) reads back as
    the very floats it was written from: narrowed where that is lossless and shorter, else as it was."""
    from interp.training.sweep import history_entries, history_line

    history = [{"step": 10 * i, "loss": value} for i, value in enumerate(values)]
    line = json.loads(history_line("a", "{}", history))
    back = [entry["loss"] for entry in history_entries(line["history"], line.get("float32", ()))]
    assert json.dumps(back) == json.dumps(values)  # bit for bit (nan as NaN, -0.0 as -0.0)
    if any(value is not None and math.isnan(value) for value in values):
        assert "float32" not in line  # JSON has no nan: the column is written as it is


def test_a_float32_list_naming_a_missing_column_is_an_error(tmp_path):
    from interp.training.sweep import read_histories

    line = {"name": "a_seed=1", "config": "{}", "history": {"step": [0], "loss": [1.5]}, "float32": ["lost"]}
    (tmp_path / "t_histories.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="names float32 columns"):
        read_histories(tmp_path / "t.csv")


def test_rows_written_before_a_config_field_existed_are_still_finished(tmp_path):
    """A row whose config JSON lacks a field TrainConfig gained later (slot_equivariant, default False then) is
    the same run: a re-run trains nothing and study_rows finds it."""
    config = _config(tmp_path, grid={"tau": [0.1]}, seeds=(0,))
    table = run_sweep(config, progress=False)
    [row] = read_rows(table)
    old_config = json.loads(row["config"])
    del old_config["slot_equivariant"]
    row["config"] = json.dumps(old_config, sort_keys=True)
    with open(table, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerow(row)
    for path in config.checkpoint_dir.iterdir():
        path.unlink()  # a re-run that trained again would write a checkpoint here
    run_sweep(config, progress=False)
    assert read_rows(table) == [row] and not list(config.checkpoint_dir.glob("*.safetensors"))
    assert study_rows(config) == [row]


def _trained(tmp_path):
    """A tiny trained checkpoint and its metadata."""
    from interp.training.train import TrainConfig, train

    path = tmp_path / "tiny.safetensors"
    return path, train(TrainConfig(**BASE, seed=0), path, progress=False)


def test_a_model_with_non_finite_outputs_is_scored_unscorable(tmp_path, monkeypatch):
    """Non-finite centroids reach the checked objectives as ``NonFiniteInput``: the row gets status unscorable and
    NaN scores (its relative objective from the training history), and the sweep goes on."""
    import interp.model.checkpoint
    from interp.training.sweep import score

    path, meta = _trained(tmp_path)
    broken = load_model(path)
    with torch.no_grad():
        broken.layers[0].attn_cx.W_V.fill_(math.nan)  # every centroid update becomes NaN
    monkeypatch.setattr(interp.model.checkpoint, "load_model", lambda _: broken)
    row = score(meta, path, "tiny", "tau=1.0", eval_tasks=4, eval_steps=3, eval_families=("normal",))
    assert row["status"] == "unscorable" and row["steps"] == 10 and row["name"] == "tau=1.0_seed=0"
    assert row["relative_objective"] == meta["history"][-1]["relative_objective"]
    for name in ("model_log_objective", "lloyd_log_objective", "loss_gap_mean", "loss_gap_max"):
        assert math.isnan(row[name]), name
    assert row["model_curve"] == row["lloyd_curve"] == "[]" and row["transfer"] == "{}"


def test_scoring_stops_on_other_errors_whatever_their_message(tmp_path, monkeypatch):
    """Only the type ``NonFiniteInput`` makes a row unscorable: another error stops the sweep, even one whose message
    speaks of NaN or inf."""
    from interp._checks import InvalidInput, NonFiniteInput
    from interp.training import sweep

    def raising(error):
        def _score(*args):
            raise error

        return _score

    path, meta = _trained(tmp_path)
    for error in (InvalidInput("points contains NaN or inf values"), ValueError("NaN or inf"), RuntimeError("x")):
        monkeypatch.setattr(sweep, "_score", raising(error))
        with pytest.raises(type(error)):
            sweep.score(meta, path, "tiny", "tau=1.0", 4, 3, ())
    monkeypatch.setattr(sweep, "_score", raising(NonFiniteInput("centroids contains NaN or inf values")))
    assert sweep.score(meta, path, "tiny", "tau=1.0", 4, 3, ())["status"] == "unscorable"


def test_pending_lists_the_seeds_whose_rows_are_missing_and_plan_trains_nothing(tmp_path, capsys):
    """``pending`` is every seed before a sweep, nothing after it, exactly the seed whose row was removed, and every
    seed again for another budget (same names, another config); ``python -m analyses.sweep --plan`` and
    ``--score-only`` print or score and train nothing (the CSV stays as it was, no checkpoint is added)."""
    from analyses import sweep as cli
    from interp.training.sweep import pending

    config = _config(tmp_path, checkpoints=tmp_path / "ckpt")
    assert [(group["label"], group["seeds"]) for group in pending(config)] == [("tau=1.0", [0, 1]),
                                                                                ("tau=0.1", [0, 1])]
    table = run_sweep(config, progress=False)
    assert pending(config) == []
    lines = table.read_text().splitlines()
    table.write_text("\n".join(line for line in lines if not line.split(",")[1] == "tau=0.1_seed=1") + "\n")
    assert [(group["label"], group["seeds"]) for group in pending(config)] == [("tau=0.1", [1])]
    longer = _config(tmp_path, base={**BASE, "steps": 20})
    assert sum(len(group["seeds"]) for group in pending(longer)) == 4

    before = (table.read_text(), sorted(path.name for path in (tmp_path / "ckpt").iterdir()))
    fixed = [f"{name}={value}" for name, value in BASE.items() if name != "steps"]
    argv = ["--study", "tiny", "--field", "tau=1.0,0.1", "--set", *fixed, "--steps", "10", "--seeds", "0", "1",
            "--eval-tasks", "4", "--eval-steps", "3", "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ckpt")]
    cli.main([*argv, "--plan"])
    assert capsys.readouterr().out == "tiny.csv: 1 seed run to train (tau=0.1: 1)\n"
    cli.main([*argv, "--score-only"])
    assert "3 rows in" in capsys.readouterr().out
    assert (table.read_text(), sorted(path.name for path in (tmp_path / "ckpt").iterdir())) == before


def _die(group, **scoring):  # a worker killed mid-group (the kernel's OOM killer, say)
    import os

    os._exit(9)


def test_a_worker_that_dies_fails_the_sweep_instead_of_leaving_it_waiting(tmp_path, monkeypatch):
    """With a pool of workers, a worker that dies takes its group with it: the sweep raises ``BrokenProcessPool``
    (no row written) rather than waiting for ever for the lost result."""
    import concurrent.futures.process

    from interp.training import sweep

    monkeypatch.setattr(sweep, "run_group", _die)
    config = _config(tmp_path, workers=2)
    with pytest.raises(concurrent.futures.process.BrokenProcessPool):
        run_sweep(config, progress=False)
    assert read_rows(config.table) == []
