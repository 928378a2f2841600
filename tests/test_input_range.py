"""Out-of-range numbers and two argument checks.

* Squared distances of coordinates M are finite when 4 d M^2 <= finfo.max (every term of ||x||^2 - 2 x.c + ||c||^2
  and ||x - c||^2 itself is at most that): M <= sqrt(finfo.max / (4 d)), 6.5e18 for float32 at d = 2 and 4.7e153
  for float64. Before, float32 tasks spread over ~1e19 (float64 ~1e154) gave finite but wrong centroids; now they
  are refused with an ``InvalidInput`` naming points (or centroids). After the translation to the task's anchor only
  the spread counts: a task far from the origin but of small spread is computed, and correctly.
* A learned model (``input_range`` set) warns ``OutOfTrainingRange`` once per call on coordinates outside
  [-0.5, 1.5]; the shipped checkpoints, written before the field existed, load with input_range (0, 1).
"""

import json
import math
import warnings

import numpy as np
import pytest
import torch
from safetensors import safe_open

from interp._checks import InvalidInput, InvalidInputType
from interp.algorithms import kmeans_objective, lloyd, soft_kmeans
from interp.model import AttentionConfig, KMeansTransformer, ModelConfig
from interp.model.checkpoint import load_model, resolve
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.model.transformer import OutOfTrainingRange

GRID = 4096  # tasks on the 2^-12 grid: scaling by powers of two and the translations below are exact


def unit_task(dtype=torch.float64, b=2, n=60, d=2, k=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    points = torch.floor(torch.rand(b, n, d, generator=generator, dtype=torch.float64) * GRID) / GRID
    return points.to(dtype), points[:, :k].clone().to(dtype)


def limit(dtype, d):
    return math.sqrt(torch.finfo(dtype).max / (4 * d))  # the bound derived in the module docstring


# ----- refusing spreads whose squared distances overflow ------------------------------------------------------------
@pytest.mark.parametrize("dtype, exponent", [(torch.float32, 64), (torch.float64, 512)])  # 1.8e19, 1.3e154
def test_a_spread_that_overflows_is_refused_naming_points(dtype, exponent):
    points, init = unit_task(dtype)
    scale = 2.0 ** exponent
    assert scale > limit(dtype, 2)
    runs = {"lloyd": lambda p, c: lloyd(p, c, 2), "soft_kmeans": lambda p, c: soft_kmeans(p, c, 2),
            "kmeans_objective": kmeans_objective, "lloyd_transformer": lloyd_transformer(2, 3, 2, dtype=dtype),
            "lloyd_transformer dot": lloyd_transformer(2, 3, 2, attention="dot", dtype=dtype),
            "learned model": KMeansTransformer(learned_model_config(2, 3)).to(dtype).eval()}
    for name, run in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OutOfTrainingRange)
            with pytest.raises(InvalidInput, match=r"^points .*overflow"):
                run(points * scale, init * scale)


@pytest.mark.parametrize("dtype, exponent", [(torch.float32, 60), (torch.float64, 508)])  # 1.2e18, 8.4e152
def test_a_spread_below_the_bound_is_exact(dtype, exponent):
    """Scaling by a power of two is exact, and so is Lloyd's answer: the same assignments, centroids scaled."""
    points, init = unit_task(dtype)
    scale = 2.0 ** exponent
    assert 2 * scale < limit(dtype, 2)  # the anchored coordinates reach up to twice the spread here
    reference = lloyd(points, init, 3)
    for run in (lambda p, c: lloyd(p, c, 3), lloyd_transformer(2, 3, 3, dtype=dtype),
                lloyd_transformer(2, 3, 3, attention="dot", dtype=dtype)):
        out = run(points * scale, init * scale)
        assert torch.equal(out.assignment_trajectory, reference.assignment_trajectory)
        torch.testing.assert_close(out.centroids / scale, reference.centroids, rtol=1e-12 if dtype == torch.float64
                                   else 1e-6, atol=0)


def test_far_from_the_origin_only_the_spread_counts():
    """float64 points at 2^540 (3.6e162) with a spread of 2^500: ||x||^2 would overflow (it was inf before), but the
    anchored task is an exact translate of a task of spread 2^500, so Lloyd's answer is the translated one."""
    points, init = unit_task(torch.float64)
    spread, offset = 2.0 ** 500, 2.0 ** 540
    far_points, far_init = points * spread + offset, init * spread + offset
    assert torch.equal((far_points - offset) / spread, points)  # exactly representable
    reference = lloyd(points, init, 3)
    out = lloyd(far_points, far_init, 3)
    assert torch.equal(out.assignment_trajectory, reference.assignment_trajectory)
    torch.testing.assert_close((out.centroids - offset) / spread, reference.centroids, rtol=0, atol=2.0 ** -10)
    model = lloyd_transformer(2, 3, 3)
    assert torch.equal(model(far_points, far_init).assignment_trajectory, reference.assignment_trajectory)


def test_centroids_far_from_the_points_are_refused_naming_centroids():
    points, init = unit_task(torch.float32)
    far = init.clone()
    far[0, 0, 0] = 1e20
    with pytest.raises(InvalidInput, match=r"^centroids .*overflow"):
        lloyd(points, far, 1)
    with pytest.raises(InvalidInput, match=r"^centroids .*overflow"):
        lloyd_transformer(2, 3, 1, dtype=torch.float32)(points, far)
    with pytest.raises(InvalidInput, match=r"^centroids .*overflow"):
        kmeans_objective(points, far)


# ----- learned models warn outside their training range --------------------------------------------------------
def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, OutOfTrainingRange)]


def test_learned_model_warns_once_per_call_outside_its_training_range():
    model = KMeansTransformer(learned_model_config(2, 3)).double().eval()
    assert model.config.input_range == (0.0, 1.0)
    points, init = unit_task()
    assert _caught(lambda: model(points, init, steps=3)) == []
    caught = _caught(lambda: model(points * 1000, init * 1000, steps=3))
    assert len(caught) == 1 and "[0, 1]" in str(caught[0].message) and "[-0.5, 1.5]" in str(caught[0].message)
    # the margin is half the range on each side: 1.49 and -0.49 are inside, 1.51 and -0.51 outside
    for value, warns in ((1.49, False), (-0.49, False), (1.51, True), (-0.51, True)):
        moved = points.clone()
        moved[0, 0, 0] = value
        assert len(_caught(lambda: model(moved, init))) == int(warns), value
    # a construction has no training range: no warning at any offset
    construction = lloyd_transformer(2, 3, 2)
    assert construction.config.input_range is None
    assert _caught(lambda: construction(points * 1000, init * 1000)) == []


def test_shipped_checkpoints_load_unchanged_with_the_unit_cube_as_range():
    for name in ("main-onehot", "main-binary", "main-none"):
        model = load_model(name)
        with safe_open(str(resolve(name)), "pt") as handle:
            saved = json.loads(handle.metadata()["model_config"])
        assert "input_range" not in saved  # written before the field existed
        loaded = json.loads(json.dumps(model.config.to_dict()))
        assert loaded.pop("input_range") == [0.0, 1.0]
        assert loaded.pop("centre_tasks") is False
        # every field the file gives loads with its value (fields added since, like alpha, take their defaults)
        for key, value in saved.items():
            if isinstance(value, dict):
                assert {sub: loaded[key][sub] for sub in value} == value, (name, key)
            else:
                assert loaded[key] == value, (name, key)
    config = model.config
    d = config.d
    points = torch.rand(1, 50, d, generator=torch.Generator().manual_seed(0))
    init = points[:, : config.k].clone()
    assert _caught(lambda: model(points, init)) == []
    assert len(_caught(lambda: model(points * 1000, init * 1000))) == 1


def test_config_round_trip_keeps_the_range_and_none_stays_none():
    learned = learned_model_config(3, 4)
    assert ModelConfig.from_dict(json.loads(json.dumps(learned.to_dict()))) == learned
    construction = lloyd_transformer(3, 4, 2).config
    assert construction.centre_tasks is True and construction.input_range is None
    assert ModelConfig.from_dict(json.loads(json.dumps(construction.to_dict()))) == construction
    for bad in ((1.0, 0.0), (0.0, float("inf")), (0.0,), "unit", (True, 2.0)):
        with pytest.raises(InvalidInput, match="input_range"):
            ModelConfig(d=2, k=2, input_range=bad)


def test_estimator_maps_data_to_the_unit_cube_so_a_learned_model_does_not_warn():
    from interp.estimator import InContextKMeans

    generator = np.random.default_rng(0)
    X = generator.normal(size=(200, 2)) * 1000 + 5e4
    caught = _caught(lambda: InContextKMeans(n_clusters=10, model="main-onehot", steps=2, random_state=0).fit(X))
    assert caught == []


# ----- finding 10: dtype strings, bools as gamma ---------------------------------------------------------------
def test_construction_dtype_accepts_its_names_and_refuses_others():
    points, init = unit_task(torch.float64)
    by_name = lloyd_transformer(2, 3, 2, dtype="float64")
    assert by_name.codes.dtype == torch.float64
    torch.testing.assert_close(by_name(points, init).centroids, lloyd(points, init, 2).centroids, rtol=0, atol=1e-12)
    assert lloyd_transformer(2, 3, 2, dtype="float32").codes.dtype == torch.float32
    assert soft_kmeans_transformer(2, 3, 2, dtype="float32").codes.dtype == torch.float32
    for bad in ("float16", "cuda", "double", torch.int64, 64, None):
        with pytest.raises(InvalidInput, match=r"^dtype must be"):
            lloyd_transformer(2, 3, 2, dtype=bad)


def test_bools_are_not_numbers_for_gamma():
    with pytest.raises(InvalidInputType, match=r"^gamma must be a number"):
        lloyd_transformer(2, 3, 2, gamma=True)
    with pytest.raises(InvalidInputType, match=r"^gamma must be a number"):
        AttentionConfig(gamma=True)
    with pytest.raises(InvalidInputType, match=r"^gamma must be a number"):
        learned_model_config(2, 3, gamma=True)
    with pytest.raises(InvalidInputType, match=r"^beta must be a number"):
        soft_kmeans_transformer(2, 3, 2, beta=True)
    for name in ("alpha", "gumbel_tau", "dropout"):
        with pytest.raises(InvalidInputType, match=rf"^{name} must be a number"):
            AttentionConfig(**{name: True})
    assert AttentionConfig(gamma=1).gamma == 1  # an int is still a number
