"""Devices (docs/learned_model.md, "Devices"): every entry point takes ``device`` ("cpu" by default), gives the
default's results with ``"cpu"`` and ``torch.device("cpu")``, and refuses a bad or absent device naming the argument.

The suite runs on the CPU. Where a test names CUDA it asserts what this machine does: without CUDA, the clear
refusal; with it, that a tiny model runs there and matches the CPU within 1e-5. Random draws for tensors on any
device come from CPU generators (drawn on the CPU, then moved): checked here on torch's ``meta`` device, which holds
shapes only.
"""

import dataclasses

import numpy as np
import pytest
import torch
from test_paper_format import cli_args, save_training_checkpoint, stand_in_model

from interp._checks import InvalidInput, InvalidInputType, check_device
from interp.algorithms import gumbel_max, lloyd_step
from interp.cli import main
from interp.estimator import InContextKMeans
from interp.evaluate import EvalConfig, evaluate
from interp.model.checkpoint import load_checkpoint, load_model
from interp.model.config import AttentionConfig
from interp.model.kernels import dispatch
from interp.model.kernels.fused import sample_dropped_pairs
from interp.model.projections import keep_mask
from interp.primitives import gumbel_noise, uniform
from interp.tasks import TaskConfig, init_centroids, sample_tasks
from interp.training.train import TrainConfig, train

CUDA = torch.cuda.is_available()
TINY = dict(d=2, k=3, n=24, batch=4, val_tasks=8, eval_every=3, steps=6)
CPU_SPELLINGS = [{}, {"device": "cpu"}, {"device": torch.device("cpu")}]  # the default, a string, a torch.device


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Tiny problems: one torch thread."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("device") / "tiny.safetensors"
    train(TrainConfig(**TINY), path, progress=False)
    return path


def _same_tensors(first: dict, second: dict) -> None:
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


# ----- the one check ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["cpu", torch.device("cpu")])
def test_check_device_takes_the_cpu_as_a_string_or_a_torch_device(value):
    assert check_device(value, "device") == torch.device("cpu")


@pytest.mark.parametrize("value, error, needle", [
    ("gpu", InvalidInput, "where must be a torch device such as 'cpu', 'cuda' or 'cuda:0', got 'gpu'"),
    ("", InvalidInput, "where must be a torch device"),
    ("xla", InvalidInput, "where must be a cpu, cuda or mps device, got 'xla'"),
    ("meta", InvalidInput, "where must be a cpu, cuda or mps device, got 'meta'"),
    (0, InvalidInputType, r"where must be a device name \(str\) or a torch.device, got int"),
    (None, InvalidInputType, "got NoneType"),
])
def test_check_device_refuses_naming_the_argument(value, error, needle):
    with pytest.raises(error, match=needle):
        check_device(value, "where")


def test_cuda_is_refused_exactly_when_this_machine_lacks_it():
    if CUDA:
        assert check_device("cuda", "device").type == "cuda"
        with pytest.raises(InvalidInput, match="this machine has"):
            check_device(f"cuda:{torch.cuda.device_count()}", "device")
    else:
        for spelling in ("cuda", "cuda:0", torch.device("cuda")):
            with pytest.raises(InvalidInput, match="device 'cuda(:0)?': CUDA is not available on this machine"):
                check_device(spelling, "device")
    if not torch.backends.mps.is_available():
        with pytest.raises(InvalidInput, match="MPS is not available on this machine"):
            check_device("mps", "device")


# ----- random draws follow the tensors' device -------------------------------------------------------------
def test_random_draws_of_a_cpu_generator_land_on_the_tensors_device():
    """A CPU generator drives the draws of tensors on another device: the same numbers as on the CPU, moved
    (the meta device holds no numbers, so only where they land is checked there)."""
    meta = torch.empty((2, 3, 4), device="meta")
    generator = torch.Generator().manual_seed(1)
    assert uniform((2, 3), generator, torch.float64, "meta").device.type == "meta"
    assert gumbel_noise(meta.shape, meta, generator).device.type == "meta"
    assert keep_mask(meta.shape, meta, 0.5, generator).device.type == "meta"
    assert all(t.device.type == "meta" for t in sample_dropped_pairs(2, 3, 4, 0.5, "meta", generator))
    assert gumbel_max(torch.zeros((2, 3), device="meta"), generator).device.type == "meta"
    assert uniform((2, 3), None, torch.float32, "meta").device.type == "meta"  # no generator: the device's RNG


def test_the_fused_softmax_kernel_is_taken_on_the_cpu_only():
    """Its dropout path calls torch's CPU flash kernel: another device takes the reference computation."""
    config = AttentionConfig(dropout=0.01)
    assert dispatch.fused_softmax(config, 512, 512) and dispatch.fused_softmax(config, 512, 512, "cpu")
    assert not dispatch.fused_softmax(config, 512, 512, "cuda") and not dispatch.fused_softmax(config, 512, 512, "mps")


def test_random_draws_on_the_cpu_are_unchanged():
    """On the CPU the draws are the ones torch.rand / bernoulli_ made before draws followed the generator."""
    like = torch.empty((3, 5), dtype=torch.float64)
    draws = uniform((3, 5), torch.Generator().manual_seed(4), torch.float64, "cpu")
    assert torch.equal(draws, torch.rand((3, 5), generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    mask = keep_mask((3, 5), like, 0.3, torch.Generator().manual_seed(4))
    expected = torch.empty((3, 5), dtype=torch.float64).bernoulli_(0.7, generator=torch.Generator().manual_seed(4))
    assert torch.equal(mask, expected / 0.7)
    points = torch.rand((2, 6, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    centroids = torch.full((2, 3, 2), 5.0, dtype=torch.float64)  # far away: every cluster but one empties
    new, _, empty = lloyd_step(points, centroids, empty="random_point", generator=torch.Generator().manual_seed(2))
    pick = torch.randint(6, empty.shape, generator=torch.Generator().manual_seed(2))
    chosen = torch.gather(points, 1, pick[..., None].expand(-1, -1, 2))
    assert bool(empty.any()) and torch.equal(new[empty], chosen[empty])


# ----- load_model ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", CPU_SPELLINGS[1:])
def test_load_model_on_the_cpu_equals_the_default(checkpoint, tmp_path, spelling):
    _same_tensors(load_model(checkpoint).state_dict(), load_model(checkpoint, **spelling).state_dict())
    papers = save_training_checkpoint(tmp_path / "run_last.pt", stand_in_model(7, seed=1), cli_args(3, 4, "onehot"))
    model = load_model(papers, **spelling)
    assert model.codes.device.type == "cpu"
    _same_tensors(load_model(papers).state_dict(), model.state_dict())


def test_load_model_refuses_a_bad_device(checkpoint):
    with pytest.raises(InvalidInput, match="device must be a torch device"):
        load_model(checkpoint, device="gpu")
    if CUDA:
        model = load_model(checkpoint, device="cuda")
        assert model.codes.device.type == "cuda"
        points, init = _tasks(8)
        with torch.no_grad():
            on_cuda = model(points.cuda(), init.cuda(), steps=3).centroids.cpu()
            on_cpu = load_model(checkpoint)(points, init, steps=3).centroids
        assert (on_cuda - on_cpu).abs().max().item() < 1e-5
    else:
        with pytest.raises(InvalidInput, match="CUDA is not available"):
            load_model(checkpoint, device="cuda")


def _tasks(batch: int):
    points = sample_tasks(TaskConfig(n=24, d=2, k=3), batch, 7).points  # (b, n, d) float32
    return points, init_centroids(points, 3, "random", 8)


# ----- train -----------------------------------------------------------------------------------------------
def test_training_on_the_cpu_equals_the_default_and_resumes_across_spellings(tmp_path):
    config = TrainConfig(**TINY)
    runs = []
    for index, spelling in enumerate(CPU_SPELLINGS):
        out = tmp_path / f"run{index}.safetensors"
        meta = train(config, out, progress=False, **spelling)
        runs.append((load_checkpoint(out)[0], meta["history"]))
    for tensors, history in runs[1:]:
        _same_tensors(runs[0][0], tensors)
        assert history == runs[0][1]
    # interrupted under one spelling, resumed under another: the uninterrupted run's weights and states
    out = tmp_path / "resumed.safetensors"
    train(config, out, progress=False, stop_after=3, device="cpu")
    meta = train(config, out, progress=False, device=torch.device("cpu"))
    _same_tensors(runs[0][0], load_checkpoint(out)[0])
    assert meta["history"] == runs[0][1]


def test_training_refuses_a_bad_device_before_any_work(tmp_path):
    out = tmp_path / "run.safetensors"
    with pytest.raises(InvalidInput, match="device must be a torch device"):
        train(TrainConfig(**TINY), out, progress=False, device="gpu:0")
    assert not out.exists()
    if CUDA:  # a run on the GPU, resumed on the CPU: the CPU run's numbers within rounding
        train(TrainConfig(**TINY), out, progress=False, stop_after=3, device="cuda")
        train(TrainConfig(**TINY), out, progress=False, device="cpu")
        reference = tmp_path / "cpu.safetensors"
        train(TrainConfig(**TINY), reference, progress=False)
        resumed, expected = load_checkpoint(out)[0], load_checkpoint(reference)[0]
        for name in expected:
            if name.startswith("model."):
                assert (resumed[name].double() - expected[name].double()).abs().max().item() < 1e-5, name
    else:
        with pytest.raises(InvalidInput, match="CUDA is not available"):
            train(TrainConfig(**TINY), out, progress=False, device="cuda")
        assert not out.exists()


def test_a_checkpoint_does_not_record_the_device(tmp_path):
    meta = train(TrainConfig(**TINY), tmp_path / "run.safetensors", progress=False, device=torch.device("cpu"))
    assert "device" not in meta["train_config"] and "device" not in meta
    assert "device" not in {field.name for field in dataclasses.fields(TrainConfig)}


# ----- evaluate --------------------------------------------------------------------------------------------
def _rows(checkpoint, **spelling):
    config = EvalConfig(n_tasks=6, steps=3, inits=("random",), baselines=False)
    model = load_model(checkpoint, **spelling)
    return evaluate({"tiny": model}, TaskConfig(n=24, d=2, k=3), config, **spelling)


def test_evaluation_on_the_cpu_equals_the_default(checkpoint):
    rows = _rows(checkpoint)
    for spelling in CPU_SPELLINGS[1:]:
        assert _rows(checkpoint, **spelling) == rows


def test_evaluation_refuses_a_bad_device_or_a_model_elsewhere(checkpoint):
    with pytest.raises(InvalidInput, match="device must be a cpu, cuda or mps device"):
        _rows(checkpoint, device="xla")
    model = load_model(checkpoint).to("meta")  # not on the device the evaluation runs on
    with pytest.raises(InvalidInput, match="checkpoint tiny is on meta but device is cpu"):
        evaluate({"tiny": model}, TaskConfig(n=24, d=2, k=3), EvalConfig(n_tasks=2, steps=1))
    if CUDA:
        on_cuda, on_cpu = _rows(checkpoint, device="cuda"), _rows(checkpoint)
        assert all(abs(a["model"] - b["model"]) < 1e-5 and abs(a["lloyd"] - b["lloyd"]) < 1e-5
                   for a, b in zip(on_cuda, on_cpu))
    else:
        with pytest.raises(InvalidInput, match="CUDA is not available"):
            _rows(checkpoint, device="cuda")


# ----- the estimator ---------------------------------------------------------------------------------------
def _X():
    return np.random.default_rng(3).normal(size=(40, 2))


@pytest.mark.parametrize("path", ["construction", "iterations", "learned"])
def test_estimator_on_the_cpu_equals_the_default(checkpoint, monkeypatch, path):
    model = str(checkpoint) if path == "learned" else "lloyd"
    if path != "learned":
        monkeypatch.setattr(InContextKMeans, "_path", lambda self, X, n_init, model: path)
    fitted = [InContextKMeans(3, model=model, steps=4, n_init=2, random_state=0, slot_order="shuffle",
                              **spelling).fit(_X()) for spelling in CPU_SPELLINGS]
    for other in fitted[1:]:
        assert np.array_equal(other.cluster_centers_, fitted[0].cluster_centers_)
        assert np.array_equal(other.labels_, fitted[0].labels_) and other.inertia_ == fitted[0].inertia_


def test_estimator_stores_device_unchanged_and_checks_it_in_fit():
    estimator = InContextKMeans(3, device="gpu")  # scikit-learn convention: no check in __init__
    assert estimator.get_params()["device"] == "gpu" and InContextKMeans(3).get_params()["device"] == "cpu"
    with pytest.raises(InvalidInput, match="device must be a torch device"):
        estimator.fit(_X())
    if CUDA:
        on_cuda = InContextKMeans(3, steps=4, random_state=0, device="cuda").fit(_X())
        on_cpu = InContextKMeans(3, steps=4, random_state=0).fit(_X())
        assert np.abs(on_cuda.cluster_centers_ - on_cpu.cluster_centers_).max() < 1e-5
    else:
        with pytest.raises(InvalidInput, match="CUDA is not available"):
            InContextKMeans(3, device="cuda").fit(_X())


# ----- the command line and the report ---------------------------------------------------------------------
TINY_FLAGS = ["--d", "2", "--k", "3", "--n", "24", "--batch", "4", "--val-tasks", "8", "--eval-every", "3", "--steps",
              "6", "--no-progress", "--threads", "1"]


def test_cli_train_and_evaluate_on_the_cpu_equal_the_default(tmp_path, capsys):
    for index, extra in enumerate([[], ["--device", "cpu"]]):
        assert main(["train", "--out", str(tmp_path / f"run{index}.safetensors"), *TINY_FLAGS, *extra]) == 0
        assert main(["evaluate", "--checkpoint", str(tmp_path / f"run{index}.safetensors"), "--out",
                     str(tmp_path / f"eval{index}"), "--tasks", "4", "--steps", "2", "--n", "24", "--no-baselines",
                     "--inits", "random", "--threads", "1", *extra]) == 0
    _same_tensors(load_checkpoint(tmp_path / "run0.safetensors")[0], load_checkpoint(tmp_path / "run1.safetensors")[0])
    assert (tmp_path / "eval0" / "summary.csv").read_text() == (tmp_path / "eval1" / "summary.csv").read_text()


@pytest.mark.parametrize("command", ["train", "evaluate", "report"])
def test_cli_refuses_a_bad_device_in_one_line_naming_the_flag(checkpoint, tmp_path, capsys, command):
    argv = {"train": ["train", "--out", str(tmp_path / "run.safetensors"), *TINY_FLAGS],
            "evaluate": ["evaluate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "eval")],
            "report": ["report", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "report.html")]}[command]
    for bad, needle in [("bogus", "--device must be a torch device such as 'cpu', 'cuda' or 'cuda:0', got 'bogus'"),
                        ("tpu", "--device must be a torch device"),
                        ("xla:0", "--device must be a cpu, cuda or mps device, got 'xla:0'")]:
        assert main([*argv, "--device", bad]) == 2
        err = capsys.readouterr().err
        assert err.strip() == f"interp {command}: error: {needle}" or (needle in err and len(err.splitlines()) == 1)
    if not CUDA:
        assert main([*argv, "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"interp {command}: error: --device 'cuda': CUDA is not available on this machine "
                       "(torch.cuda.is_available() is False); use 'cpu'")
    assert not any(tmp_path.iterdir()), "a refused command wrote something"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")
def test_report_on_the_cpu_equals_the_default(checkpoint, tmp_path, monkeypatch):
    """The report's evaluation (the part that runs on the device) gives the default's rows; the page's other
    figures run on the CPU whatever the device (the page also holds timings, so pages are not compared whole)."""
    import interp.report.builder as builder
    from interp.report.explanation import ExplanationSettings

    evaluations = []

    def recorded(models, base, config, device="cpu"):
        rows = evaluate(models, base, config, device)
        evaluations.append((device, rows, [model.codes.device.type for model in models.values()]))
        return rows

    monkeypatch.setattr(builder, "evaluate", recorded)
    small = ExplanationSettings(tasks=4, fit_tasks=3, permutations=4, path_tasks=2, average_permutations=2, steps=2,
                                n=32, seed=5)
    for index, spelling in enumerate(CPU_SPELLINGS[::2]):
        page = builder.build_report(str(checkpoint), tmp_path / f"report{index}.html", n_tasks=2,
                                    explanation_settings=small, **spelling)
        assert page.stat().st_size > 0
    (first_device, first_rows, _), (second_device, second_rows, on) = evaluations
    assert first_device == second_device == torch.device("cpu") and on == ["cpu"]
    assert first_rows == second_rows
    with pytest.raises(InvalidInput, match="device must be a torch device"):
        builder.build_report(str(checkpoint), tmp_path / "refused.html", device="gpu")
    assert not (tmp_path / "refused.html").exists()
