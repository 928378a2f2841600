"""Linear probes on cached activations: what each hook of the k-means transformer linearly encodes.

For every step l and hook h a linear probe reads one token's activation z (D features) and predicts a target
built from the model's own input centroids at that step, c^(l) = ``out.centroid_trajectory[:, l]`` (Lloyd's step,
paper 2 Eq. 1, Alg. 2):

* point stream (``hook_points_resid_pre``, ``attn_xc.hook_out``, ``hook_points_resid_post``), one row per point:
  ``assignment`` a_i = argmin_j ||x_i - c_j^(l)||^2 (multinomial logistic regression, held-out accuracy) and
  ``distance`` min_j ||x_i - c_j^(l)||^2 (ridge regression, held-out R^2);
* centroid stream (``hook_centroids_resid_pre``, ``hook_centroids_resid_post``), one row per centroid token:
  ``centroid`` = Lloyd's one-step update of c^(l), mean{x_i : a_i = j} (multi-output ridge, held-out R^2,
  averaged over the d coordinates). Tokens of clusters that are empty at that step are left out: their update
  is an empty-cluster convention, not a mean (``interp.algorithms.lloyd``).

Class j is centroid token j, so labels mean the same thing in every task. By the construction of paper 1 Thm 2.1 the
one-hot (or binary, paper 2 Thm 2.1) scratch slots of ``hook_points_resid_post`` hold a_i and the first d features of
``hook_centroids_resid_post`` hold the update, so both probes are (near) perfect there; a d-only model
(``embedding="none"``, paper 2 §3) has no slot for a_i. Each probe is compared with the same probe fitted on the
input embedding (``hook_points_embed`` / ``hook_centroids_embed``), which holds x_i or [c_j^(0); code_j] only.

Train and test sets are split by *task* (held-out tasks, never held-out points of a seen task); features are
standardised on the training rows. Activations are taken in eval mode (dropout off; the model's mode is restored).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_float_tensor, check_positive_int
from interp.algorithms import lloyd, squared_distances
from interp.model import KMeansTransformer

POINT_HOOKS = ("hook_points_resid_pre", "attn_xc.hook_out", "hook_points_resid_post")
CENTROID_HOOKS = ("hook_centroids_resid_pre", "hook_centroids_resid_post")
POINT_EMBED = "hook_points_embed"
CENTROID_EMBED = "hook_centroids_embed"
TARGETS = {"assignment": ("points", "accuracy"), "distance": ("points", "r2"), "centroid": ("centroids", "r2")}


@dataclass(frozen=True)
class ProbeConfig:
    """How probes are fitted.

    ``test_fraction`` of the tasks (at least one) is held out; ``seed`` fixes the task split and the row
    subsample; ``logistic_c`` is the inverse L2 strength of the logistic probe, ``ridge_alpha`` the L2 strength
    of the ridge probes (both on standardised features); at most ``max_points`` rows are used to fit and at most
    ``max_points`` to test each probe (uniform subsample, the same rows for every hook of a call).
    """

    test_fraction: float = 0.3
    seed: int = 0
    logistic_c: float = 1.0
    ridge_alpha: float = 1.0
    max_points: int = 20000
    max_iter: int = 300

    def __post_init__(self) -> None:
        if isinstance(self.test_fraction, bool) or not isinstance(self.test_fraction, (int, float)) or not (
            0.0 < self.test_fraction < 1.0
        ):
            raise InvalidInput(f"test_fraction must be a number in (0, 1), got {self.test_fraction!r}")
        check_positive_int(self.seed, "seed", minimum=0)
        for name in ("logistic_c", "ridge_alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidInput(f"{name} must be a finite number, got {value!r}")
        if self.logistic_c <= 0:
            raise InvalidInput(f"logistic_c must be > 0, got {self.logistic_c!r}")
        if self.ridge_alpha < 0:
            raise InvalidInput(f"ridge_alpha must be >= 0, got {self.ridge_alpha!r}")
        check_positive_int(self.max_points, "max_points", minimum=10)
        check_positive_int(self.max_iter, "max_iter")


@dataclass(frozen=True)
class ProbeResult:
    """One probe: held-out ``value`` of a linear probe on ``hook`` at ``step`` for ``target``, and ``baseline``,
    the same probe (same target, same rows) on the input embedding ``baseline_hook``."""

    hook: str
    step: int
    stream: str  # "points" | "centroids"
    target: str  # "assignment" | "distance" | "centroid"
    metric: str  # "accuracy" | "r2"
    value: float
    baseline: float
    baseline_hook: str
    n_train: int  # training rows (points, or centroid tokens of non-empty clusters)
    n_test: int  # held-out rows

    @property
    def gain(self) -> float:
        """value - baseline: what the hook adds over the input embedding."""
        return self.value - self.baseline


# ----- targets -----------------------------------------------------------------------------------------------
def probe_targets(points: Tensor, centroids: Tensor) -> dict[str, Tensor]:
    """Targets for input centroids c (b, k, d) on points x (b, n, d), in float64 (Lloyd, paper 2 Eq. 1, Alg. 2):
    assignment a_i = argmin_j ||x_i - c_j||^2 (b, n); distance min_j ||x_i - c_j||^2 (b, n);
    centroid = Lloyd's one-step update mean{x_i : a_i = j} (b, k, d), and ``empty`` (b, k), the clusters with no
    member, whose update is a convention, not a mean: ``run_probes`` leaves those tokens out."""
    x, c = points.detach().double(), centroids.detach().double()
    step = lloyd(x, c, 1)
    return {
        "assignment": step.assignment_trajectory[:, 0],  # (b, n) int64: nearest of c
        "distance": squared_distances(x, c).amin(dim=2),  # (b, n)
        "centroid": step.centroids,  # (b, k, d)
        "empty": step.empty_clusters[:, 0],  # (b, k) bool
    }


# ----- fitting -----------------------------------------------------------------------------------------------
def _split_tasks(batch: int, config: ProbeConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Task indices (train, test): ``test_fraction`` of the tasks (at least 1, at most batch - 1) held out."""
    n_test = min(batch - 1, max(1, int(round(config.test_fraction * batch))))
    order = rng.permutation(batch)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _rows(tasks: np.ndarray, tokens: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    """Flat row indices (task * tokens + token) of ``tasks``, uniformly subsampled to at most ``limit``."""
    rows = (tasks[:, None] * tokens + np.arange(tokens)[None, :]).ravel()
    if rows.size > limit:
        rows = np.sort(rng.choice(rows, size=limit, replace=False))
    return rows


def _flat(activation: Tensor) -> np.ndarray:
    """(b, t, D) activation -> (b * t, D) float64 numpy."""
    return activation.detach().reshape(-1, activation.shape[-1]).to(torch.float64).cpu().numpy()


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 1e-12 * max(1.0, float(np.abs(train).max(initial=0.0))), std, 1.0)
    return (train - mean) / std, (test - mean) / std


def _fit_score(features: np.ndarray, target: np.ndarray, metric: str, train: np.ndarray, test: np.ndarray,
               config: ProbeConfig) -> float:
    """Fit on rows ``train``, return held-out accuracy (labels) or R^2 (uniform average over outputs)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.metrics import r2_score

    if train.size < 2 or test.size == 0:
        return math.nan
    x_train, x_test = _standardise(features[train], features[test])
    y_train, y_test = target[train], target[test]
    if metric == "accuracy":
        classes = np.unique(y_train)
        if classes.size == 1:  # a single training class: the probe is that constant
            return float(np.mean(y_test == classes[0]))
        probe = LogisticRegression(C=config.logistic_c, max_iter=config.max_iter)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            probe.fit(x_train, y_train)
        return float(np.mean(probe.predict(x_test) == y_test))
    probe = Ridge(alpha=config.ridge_alpha).fit(x_train, y_train)
    return float(r2_score(y_test, probe.predict(x_test)))


# ----- public entry points -----------------------------------------------------------------------------------
def probe_hooks(steps: int) -> list[str]:
    """The hooks ``run_probes`` reads for ``steps`` steps (with the two embeddings first)."""
    names = [POINT_EMBED, CENTROID_EMBED]
    for step in range(steps):
        names += [f"blocks.{step}.{hook}" for hook in POINT_HOOKS + CENTROID_HOOKS]
    return names


def run_probes(model: KMeansTransformer, points: Tensor, init: Tensor, steps: int = 1,
               config: ProbeConfig = ProbeConfig()) -> list[ProbeResult]:
    """Fit linear probes on every probed hook of steps 0..steps-1 (constructions and learned models alike).

    points (b, n, d) and init (b, k, d) in the model's dtype; b >= 2 tasks (some are held out). Step l's targets
    come from its input centroids ``out.centroid_trajectory[:, l]`` (see the module docstring). Rows are ordered
    by step, then stream (points, centroids), hook, target.
    """
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    if not isinstance(config, ProbeConfig):
        raise InvalidInputType(f"config must be a ProbeConfig, got {type(config).__name__}")
    steps = check_positive_int(steps, "steps")
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    init = check_float_tensor(init, "init", 3, "(batch, k, d)")
    model_config = model.config
    if points.shape[2] != model_config.d:
        raise InvalidInput(f"points have d={points.shape[2]} but the model was built for d={model_config.d}")
    if init.shape[2] != model_config.d:
        raise InvalidInput(f"init has d={init.shape[2]} but the model was built for d={model_config.d}")
    if init.shape[1] != model_config.k:
        raise InvalidInput(f"init has k={init.shape[1]} centroids but the model was built for k={model_config.k}")
    if init.shape[0] != points.shape[0]:
        raise InvalidInput(f"init batch size {init.shape[0]} does not match points batch size {points.shape[0]}")
    if points.shape[0] < 2:
        raise InvalidInput(f"points must hold at least 2 tasks (held-out tasks are needed), "
                           f"got batch {points.shape[0]}")
    if points.shape[1] < model_config.k:
        raise InvalidInput(f"points have n={points.shape[1]} < k={model_config.k}")
    model_dtype = model.codes.dtype
    for name, tensor in (("points", points), ("init", init)):
        if tensor.dtype != model_dtype:
            raise InvalidInputType(f"{name} dtype {tensor.dtype} differs from the model dtype {model_dtype}; "
                                   "use model.to()")
    if not model_config.shared_weights and steps > model_config.n_layers:
        raise InvalidInput(f"steps={steps} exceeds n_layers={model_config.n_layers} of a model without shared weights")

    wanted = set(probe_hooks(steps))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out, cache = model.run_with_cache(points, init, steps=steps, names_filter=lambda name: name in wanted,
                                              slot_order="fixed")
    finally:
        model.train(was_training)
    # the probes are small dense problems: extra BLAS / OpenMP threads only contend (badly on a busy machine)
    with threadpool_limits(limits=1):
        return _fit_probes(points, out.centroid_trajectory, cache, steps, model_config.k, config)


def _fit_probes(points: Tensor, trajectory: Tensor, cache, steps: int, k: int,
                config: ProbeConfig) -> list[ProbeResult]:
    """The probes of ``run_probes`` on its cache; trajectory (b, T + 1, k, d) holds each step's input centroids."""
    batch, n, d = points.shape
    rng = np.random.default_rng(config.seed)
    train_tasks, test_tasks = _split_tasks(batch, config, rng)
    rows = {
        "points": (_rows(train_tasks, n, config.max_points, rng), _rows(test_tasks, n, config.max_points, rng)),
        "centroids": (_rows(train_tasks, k, config.max_points, rng), _rows(test_tasks, k, config.max_points, rng)),
    }
    embeds = {"points": cache[POINT_EMBED], "centroids": cache[CENTROID_EMBED]}  # (b, n, D), (b, k, D)
    embed_features = {stream: _flat(act) for stream, act in embeds.items()}

    results: list[ProbeResult] = []
    for step in range(steps):
        targets = probe_targets(points, trajectory[:, step])  # from the step's input centroids
        flat_targets = {
            "assignment": targets["assignment"].reshape(-1).cpu().numpy(),  # (b n,)
            "distance": targets["distance"].reshape(-1).cpu().numpy(),  # (b n,)
            "centroid": targets["centroid"].reshape(-1, d).cpu().numpy(),  # (b k, d)
        }
        for stream, hooks, stream_targets in (
            ("points", POINT_HOOKS, ("assignment", "distance")),
            ("centroids", CENTROID_HOOKS, ("centroid",)),
        ):
            train, test = rows[stream]
            if stream == "centroids":  # leave out empty clusters: their Lloyd update is undefined
                occupied = ~targets["empty"].reshape(-1).cpu().numpy()  # (b k,)
                train, test = train[occupied[train]], test[occupied[test]]
            baseline_hook = POINT_EMBED if stream == "points" else CENTROID_EMBED
            baselines = {
                target: _fit_score(embed_features[stream], flat_targets[target], TARGETS[target][1], train, test,
                                   config)
                for target in stream_targets
            }
            for hook in hooks:
                name = f"blocks.{step}.{hook}"
                activation = cache[name]  # (b, n or k, D)
                same_as_embed = activation.shape == embeds[stream].shape and torch.equal(activation, embeds[stream])
                features = None if same_as_embed else _flat(activation)
                for target in stream_targets:
                    metric = TARGETS[target][1]
                    value = baselines[target] if same_as_embed else _fit_score(
                        features, flat_targets[target], metric, train, test, config)
                    results.append(ProbeResult(hook=name, step=step, stream=stream, target=target, metric=metric,
                                               value=value, baseline=baselines[target], baseline_hook=baseline_hook,
                                               n_train=int(train.size), n_test=int(test.size)))
    return results


def check_probe_results(results: object) -> list[ProbeResult]:
    if isinstance(results, ProbeResult) or not isinstance(results, (list, tuple)):
        raise InvalidInputType(f"results must be a list of ProbeResult, got {type(results).__name__}")
    if not results:
        raise InvalidInput("results must not be empty")
    for row in results:
        if not isinstance(row, ProbeResult):
            raise InvalidInputType(f"results must be a list of ProbeResult, found a {type(row).__name__}")
    return list(results)


def probe_table(results: list[ProbeResult]) -> list[dict]:
    """One dict per probe (the ProbeResult fields plus ``gain`` = value - baseline), in the given order."""
    return [{**asdict(row), "gain": row.gain} for row in check_probe_results(results)]


def format_probe_table(results: list[ProbeResult]) -> str:
    """The probe table as fixed-width text (value and baseline to 3 decimals)."""
    rows = check_probe_results(results)
    width = max(len(row.hook) for row in rows)
    lines = [f"{'hook':<{width}}  {'target':<10}  {'metric':<8}  {'probe':>7}  {'baseline':>8}  {'gain':>7}"]
    for row in rows:
        lines.append(f"{row.hook:<{width}}  {row.target:<10}  {row.metric:<8}  {row.value:>7.3f}  "
                     f"{row.baseline:>8.3f}  {row.gain:>+7.3f}")
    return "\n".join(lines)
