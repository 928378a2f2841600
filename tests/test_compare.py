"""``interp compare``: models (each with its seeds) side by side on the same tasks, checked against an independent
NumPy recomputation from its own per-task file and against what ``interp evaluate`` reports; bad input is one line
naming the option (exit 2)."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from child_processes import run

from interp.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
SEED = "7"  # not the default: the seed must reach the tasks and starts
SIZES = ["--tasks", "70", "--steps", "4", "--n", "48", "--seed", SEED]  # 70 tasks: two chunks of 64 and 6
QUICK = [*SIZES, "--threads", "1", "--no-progress"]


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> Path:
    """One comparison: onehot and binary (one seed each), pair (onehot and binary as two seeds of one model);
    binary is the reference."""
    out = tmp_path_factory.mktemp("compare") / "out"
    code = main(["compare", "--model", "onehot=main-onehot", "--model", "binary=main-binary",
                 "--model", "pair=main-onehot,main-binary", "--reference", "binary", "--out", str(out), *QUICK])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> dict[str, dict[str, float]]:
    """``interp evaluate`` on the same checkpoints, tasks and seed: checkpoint -> its final (step 4) model and
    Lloyd means."""
    out = tmp_path_factory.mktemp("evaluate") / "out"
    code = main(["evaluate", "--checkpoint", "main-onehot", "main-binary", "--out", str(out), "--inits", "random",
                 "--no-baselines", *QUICK])
    assert code == 0
    return {row["checkpoint"]: {"model": float(row["model"]), "lloyd": float(row["lloyd"])}
            for row in _read(out / "evaluation.csv") if row["step"] == "4"}


def _per_task(out: Path) -> dict[str, np.ndarray]:
    """model -> its per-task values (V,) from compare_tasks.csv, in task order."""
    values: dict[str, list[tuple[int, float]]] = {}
    for row in _read(out / "compare_tasks.csv"):
        values.setdefault(row["model"], []).append((int(row["task"]), float(row["value"])))
    return {name: np.array([value for _, value in sorted(pairs)]) for name, pairs in values.items()}


def test_the_table_equals_a_numpy_recomputation_from_the_tasks_file(compared):
    per_task = _per_task(compared)
    rows = {row["model"]: row for row in _read(compared / "compare.csv")}
    assert list(rows) == ["onehot", "binary", "pair", "lloyd"]
    assert all(len(values) == 70 for values in per_task.values())

    def se(values):
        return values.std(ddof=1) / math.sqrt(len(values))

    for name, row in rows.items():
        values = per_task[name]
        assert row["tasks"] == "70" and row["reference"] == "binary"
        assert float(row["mean"]) == pytest.approx(values.mean(), rel=1e-12)
        assert float(row["se"]) == pytest.approx(se(values), rel=1e-9)
        for column, other in (("reference", "binary"), ("lloyd", "lloyd")):
            difference = values - per_task[other]
            assert float(row[f"diff_{column}"]) == pytest.approx(difference.mean(), rel=1e-9, abs=1e-13)
            assert float(row[f"diff_{column}_se"]) == pytest.approx(se(difference), rel=1e-9, abs=1e-13)
            assert float(row[f"better_than_{column}"]) == np.count_nonzero(difference < 0) / 70
    # the figures say something: the learned models differ from Lloyd and from each other on some tasks
    assert 0 < float(rows["onehot"]["better_than_reference"]) < 1
    assert float(rows["binary"]["better_than_reference"]) == 0  # itself: every task a tie, ties are not better
    assert float(rows["lloyd"]["diff_lloyd"]) == 0


def test_one_model_equals_what_evaluate_reports(compared, evaluated):
    rows = {row["model"]: row for row in _read(compared / "compare.csv")}
    assert float(rows["onehot"]["mean"]) == pytest.approx(evaluated["main-onehot"]["model"], rel=1e-9)
    assert float(rows["binary"]["mean"]) == pytest.approx(evaluated["main-binary"]["model"], rel=1e-9)
    assert float(rows["lloyd"]["mean"]) == pytest.approx(evaluated["main-onehot"]["lloyd"], rel=1e-9)
    assert evaluated["main-onehot"]["model"] != pytest.approx(evaluated["main-binary"]["model"], rel=1e-6)


def test_two_seeds_are_averaged_per_task(compared, evaluated):
    rows = {row["model"]: row for row in _read(compared / "compare.csv")}
    assert rows["pair"]["checkpoints"] == "2" and rows["onehot"]["checkpoints"] == "1"
    tasks = [row for row in _read(compared / "compare_tasks.csv")]
    by = {(row["model"], row["task"]): row for row in tasks}
    for task in map(str, range(70)):
        pair, onehot, binary = by["pair", task], by["onehot", task], by["binary", task]
        assert (float(pair["seed_1"]), float(pair["seed_2"])) == (float(onehot["value"]), float(binary["value"]))
        assert float(pair["value"]) == pytest.approx((float(pair["seed_1"]) + float(pair["seed_2"])) / 2,
                                                     rel=1e-15)
        assert onehot["seed_2"] == ""
    means = sorted([evaluated["main-onehot"]["model"], evaluated["main-binary"]["model"]])
    assert (float(rows["pair"]["seed_min"]), float(rows["pair"]["seed_max"])) == pytest.approx(means, rel=1e-9)
    assert float(rows["pair"]["mean"]) == pytest.approx(sum(means) / 2, rel=1e-9)


def test_the_table_is_printed_as_markdown(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", "--model", "onehot=main-onehot", "--out", str(out), "--tasks", "3", "--steps", "1",
                 "--n", "16", "--threads", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rows = _read(out / "compare.csv")
    assert [row["model"] for row in rows] == ["onehot", "lloyd"]
    lloyd = rows[1]
    assert f"| lloyd | – | {float(lloyd['mean']):.4f} ± {float(lloyd['se']):.4f} | – |" in printed, printed
    assert "reference onehot" in printed


def test_the_python_function_gives_the_same_rows(compared):
    from interp.compare import compare
    from interp.evaluate import EvalConfig
    from interp.tasks import TaskConfig

    rows = compare({"onehot": ["main-onehot"], "binary": ["main-binary"]},
                   EvalConfig(n_tasks=70, steps=4, seed=int(SEED), inits=("random",)), TaskConfig(n=48))
    written = {row["model"]: float(row["mean"]) for row in _read(compared / "compare.csv")}
    assert [row["model"] for row in rows] == ["onehot", "binary", "lloyd"]
    for row in rows:
        assert row["mean"] == pytest.approx(written[row["model"]], rel=1e-12)
        assert row["reference"] == "onehot"


# ----- bad input: one line naming the option, exit 2, nothing written -------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A checkpoint of another d and k (2, 3) than the shipped models (32, 10)."""
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("tiny") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


BAD = [  # (the --model options and others, the line's expected part)
    (["--model", "a=main-onehot", "--model", "a=main-binary"], "--model: the name 'a' is given twice"),
    (["--model", "a="], "argument --model: model 'a' has an empty checkpoint"),
    (["--model", "a=main-onehot,,main-binary"], "argument --model: model 'a' has an empty checkpoint"),
    (["--model", "main-onehot"], "argument --model: expected NAME=CHECKPOINT[,CHECKPOINT...], got 'main-onehot'"),
    (["--model", "x/y=main-onehot"], "argument --model: expected a name without '/'"),
    (["--model", "=main-onehot"], "argument --model: expected a name without '/' (it names files), got ''"),
    (["--model", "a=main-onehot", "--model", "b=missing.safetensors"],
     "--model b: no checkpoint 'missing.safetensors': not a file, nor a shipped name"),
    (["--model", "a=main-onehot,main-onehot"], "--model a: a checkpoint is given twice"),
    (["--model", "lloyd=main-onehot"], "--model: the name 'lloyd' is Lloyd's row"),
    (["--model", "a=main-onehot", "--reference", "b"], "--reference 'b': not a --model name (a) nor lloyd"),
    (["--model", "a=main-onehot", "--model", "b=TINY"],
     "--model: model b, checkpoint 1, is for d=2, k=3, but the tasks have d=32, k=10"),
    (["--model", "a=main-onehot", "--inits", "random", "random"], "--inits random random: an initialisation is given"),
    (["--model", "a=main-onehot", "--inits", "bogus"], "argument --inits: invalid choice: 'bogus'"),
    (["--model", "a=main-onehot", "--protocol", "bogus"], "argument --protocol: invalid choice: 'bogus'"),
    (["--model", "a=main-onehot", "--tasks", "0"], "argument --tasks: expected an integer >= 1, got 0"),
    (["--model", "a=main-onehot", "--tasks", "1000001"], "argument --tasks: expected an integer from 1 to 1,000,000"),
    (["--model", "a=main-onehot", "--steps", "10001"], "argument --steps: expected an integer from 1 to 10,000"),
    (["--model", "a=main-onehot", "--n", "0"], "argument --n: expected an integer >= 1, got 0"),
    (["--model", "a=main-onehot", "--seed", "-1"], "argument --seed: expected an integer seed in [0, 2**63)"),
    (["--model", "a=main-onehot", "--threads", "0"], "argument --threads: expected an integer >= 1"),
    (["--model", "a=main-onehot", "--n", "10"], "n=10 points (main protocol, in-distribution) for k=10"),
    ([], "the following arguments are required: --model"),
]


@pytest.mark.parametrize("options, expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line_naming_the_option(tiny, tmp_path, capsys, options, expected):
    out = tmp_path / "out"
    sizes = [part for flag, value in (("--tasks", "2"), ("--steps", "1")) if flag not in options
             for part in (flag, value)]  # small, where the case does not set them
    argv = ["compare", *(f"b={tiny}" if part == "b=TINY" else part for part in options), "--out", str(out), *sizes,
            "--threads" if "--threads" not in options else "--no-progress", *(["1"] if "--threads" not in options
                                                                              else [])]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, lines
    assert lines and not any("Traceback" in line for line in lines), lines
    assert expected in lines[-1], lines
    assert lines[-1].startswith("interp compare: error: "), lines
    if "argument" not in expected and "required" not in expected:
        assert len(lines) == 1, lines  # argparse's refusals print the usage first
    assert not out.exists()


def test_the_out_checks_of_evaluate(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["compare", "--model", "a=main-onehot", "--out", str(a_file), "--tasks", "2"]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["compare", "--model", "a=main-onehot", "--out", str(tmp_path / "no" / "deep"), "--tasks", "2"]) == 2
    assert "does not exist; create it first" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_the_choices_are_those_of_the_evaluation():
    from interp.cli import build_parser
    from interp.evaluate import PROTOCOLS
    from interp.tasks import INITS

    compare = next(a for a in build_parser()._actions if a.dest == "command").choices["compare"]
    options = {action.dest: action for action in compare._actions}
    assert tuple(options["protocol"].choices) == PROTOCOLS
    assert tuple(options["inits"].choices) == tuple(INITS)


def test_ctrl_c_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import interp.compare

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(interp.compare, "task_values", interrupted)
    out = tmp_path / "out"
    assert main(["compare", "--model", "a=main-onehot", "--out", str(out), "--tasks", "2", "--threads", "1"]) == 130
    assert capsys.readouterr().err.strip() == (f"interp compare: interrupted; nothing half-written: each output "
                                               f"({out}) is written whole at the end, or not at all")
    assert not out.exists()


def test_the_program_refuses_a_name_given_twice_in_one_line(tmp_path):
    done = run([sys.executable, "-m", "interp.cli", "compare", "--model", "a=main-onehot", "--model",
                "a=main-binary", "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
               timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["interp compare: error: --model: the name 'a' is given twice; give each "
                                        "model once, its seeds separated by commas"], done.stderr
