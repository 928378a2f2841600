"""The report's live explanation of one model's one-step update (``explain_model``): its decomposition by path, its
slot-symmetric and slot-specific parts and the distilled algorithm, at the small sizes of ``ExplanationSettings``;
and the crowded pair of the same tasks (``pair_of_report``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_positive_int, check_seed
from interp.algorithms import lloyd, log_objective
from interp.instruments.decompose import PathShare, decompose_update, path_statistics, r2_score, variance_share
from interp.instruments.distill import FAMILIES, attention_kernel, euclidean_kernel, fit_distilled
from interp.instruments.symmetry import (
    CrowdedPair,
    crowded_pair,
    model_step,
    permuted_outputs,
    slot_averaged_run,
    slot_permutations,
    specific_by_path,
    split_from_outputs,
)
from interp.model import KMeansTransformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks


@dataclass(frozen=True)
class ExplanationSettings:
    """Sizes of the report's live explanation (small, so that each part takes seconds at 2 threads; the full-size
    figures are ``python -m analyses.explain``'s): ``tasks`` unseen tasks of n points (seed ``seed``, random initial
    centroids) for the decomposition, the symmetric split, the distilled scores and the 20-step objectives;
    ``fit_tasks`` other tasks (seed ``seed + 2``) the distilled families are fitted on; ``permutations`` random slot
    permutations (all k! when that is fewer); the slot-specific part by path on the first ``path_tasks`` tasks; the
    slot-averaged model with ``average_permutations`` permutations per step; ``steps`` steps; the crowded pair's
    symmetric part (``crowded_pair``, one task) over ``pair_permutations`` slot orders (all k! if fewer)."""

    tasks: int = 16
    fit_tasks: int = 4
    permutations: int = 16
    path_tasks: int = 4
    average_permutations: int = 2
    steps: int = 20
    n: int = 512
    seed: int = 13
    pair_permutations: int = 256

    def __post_init__(self) -> None:
        for name in ("tasks", "fit_tasks", "permutations", "path_tasks", "average_permutations", "steps", "n",
                     "pair_permutations"):
            check_positive_int(getattr(self, name), name)
        if self.path_tasks > self.tasks:
            raise InvalidInput(f"path_tasks must be <= tasks ({self.tasks}), got {self.path_tasks}")
        check_seed(self.seed, "seed")

    def describe(self) -> str:
        return (f"{self.tasks} unseen tasks (n = {self.n}, random initial centroids, seed {self.seed}), "
                f"{self.permutations} random slot permutations (all k! if fewer), slot-specific part by path on "
                f"{self.path_tasks} tasks, distilled families fitted on {self.fit_tasks} other tasks, slot-averaged "
                f"model with {self.average_permutations} permutations per step, {self.steps} steps")


@dataclass(frozen=True)
class Explanation:
    """The report's explanation of one model's one-step update (``explain_model``)."""

    settings: ExplanationSettings
    equivariant: str | None  # why the model is exactly slot-equivariant (no codes / tied code blocks), else None
    update: Tensor  # (b, k, d) float64: the one-step update on the tasks
    parts: dict[str, Tensor]  # path -> (b, k, d) float64, summing to ``update`` (interp.instruments.decompose)
    paths: list[PathShare]  # variance share and cosine with Lloyd of every part
    sum_error: float  # max |sum of parts - update|
    n_permutations: int  # slot permutations of the symmetric split (0 for an equivariant model)
    symmetric: Tensor  # (b, k, d) float64: the symmetric part (= update for an equivariant model)
    r2_symmetric: float  # R^2 of the update by the symmetric part
    symmetric_share: float  # Cov(symmetric, update) / Var(update)
    specific_share: float  # 1 - symmetric_share
    monte_carlo_error: float  # V / (M Var(update)), 0 when exact
    permutation_change: float  # mean |change of the output| under a slot permutation (mean over the permutations)
    reversed_max_change: float  # max |change of the output| when the slot order is reversed (rounding if equivariant)
    mean_abs_update: float
    path_shares: dict[str, dict[str, float]]  # path -> {"symmetric": share, "specific": share} ({} if equivariant)
    fits: list[dict]  # family, kernel, parameters, r2_fit, r2_symmetric (held out), r2_update (held out)
    best: dict  # the fit with the largest held-out R^2 of the symmetric part, with its 20-step log_objective
    objectives: dict[str, float]  # mean log objective after ``steps``: initial, model, slot-averaged, Lloyd, distilled
    seconds: dict[str, float]  # time of each part


FIT_ITERATIONS = 20  # L-BFGS iterations of each distilled fit (the analyses' default is 100; the fits settle sooner)


def _equivariance(model: KMeansTransformer) -> str | None:
    """Why ``model``'s step is exactly slot-equivariant, or None: no slot codes (embedding "none") or code blocks tied
    (``ModelConfig.slot_equivariant``)."""
    if model.config.scratch_width == 0:
        return "it has no slot codes (embedding none): every token of a slot is its centroid alone"
    if model.config.slot_equivariant:
        return "its code blocks are tied (ModelConfig.slot_equivariant: a I + b 11^T, equal columns, rows and biases)"
    return None


def _permutations(k: int, count: int, seed: int) -> Tensor:
    """All k! slot permutations (M, k) when there are at most ``count``, else ``count`` random ones."""
    if math.factorial(k) <= count:
        return slot_permutations(k)
    return slot_permutations(k, count, seed)


@torch.no_grad()
def explain_model(model: KMeansTransformer, settings: ExplanationSettings = ExplanationSettings()) -> Explanation:
    """Decomposition of the one-step update by path, its symmetric and slot-specific parts, and the distilled
    algorithm (every family x kernel of ``interp.instruments.distill`` fitted to the symmetric part), at the small
    sizes of ``settings``; the model is left in eval mode."""
    model.eval()
    config = model.config
    task_config = TaskConfig(n=settings.n, d=config.d, k=config.k)
    dtype = model.codes.dtype
    points = sample_tasks(task_config, settings.tasks, settings.seed, dtype=dtype).points  # (b, n, d)
    init = init_centroids(points, config.k, "random", settings.seed + 1)  # (b, k, d)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    decomposition = decompose_update(model, points, init)
    update = decomposition.update  # (b, k, d) float64
    paths = path_statistics(decomposition.parts, update, decomposition.lloyd_update)
    seconds["decomposition"] = time.perf_counter() - started

    started = time.perf_counter()
    equivariant = _equivariance(model)
    step = model_step(model)
    path_shares: dict[str, dict[str, float]] = {}
    reverse = torch.arange(config.k).flip(0)[None]  # (1, k): the slot order reversed, a check of equivariance
    reversed_change = (permuted_outputs(step, points, init, reverse)[0].double() - init.double() - update).abs()
    if equivariant:
        symmetric, n_permutations, error = update, 0, 0.0
        change = float(reversed_change.mean())
    else:
        permutations = _permutations(config.k, settings.permutations, settings.seed + 3)
        outputs = permuted_outputs(step, points, init, permutations)  # (M, b, k, d)
        split = split_from_outputs(update, outputs, init, exhaustive=len(permutations) == math.factorial(config.k))
        symmetric, n_permutations, error = split.symmetric, split.n_permutations, split.monte_carlo_error
        change = float((outputs.double() - init.double() - update).abs().mean())  # over permutations and entries
        by_path = specific_by_path(model, points[:settings.path_tasks], init[:settings.path_tasks], permutations)
        path_shares = {path: {"symmetric": by_path["symmetric_shares"][path],
                              "specific": by_path["specific_shares"][path]} for path in by_path["symmetric_shares"]}
        if all(math.isnan(shares["specific"]) for shares in path_shares.values()):  # rounding only (e.g. k = 1)
            equivariant, path_shares = "its slot-specific part is at rounding level (measured)", {}
    share = variance_share(symmetric, update)
    seconds["symmetric split"] = time.perf_counter() - started

    started = time.perf_counter()
    fit_points = sample_tasks(task_config, settings.fit_tasks, settings.seed + 2, dtype=dtype).points
    fit_init = init_centroids(fit_points, config.k, "random", settings.seed + 4)  # (b', k, d)
    if equivariant:
        fit_targets = step(fit_points, fit_init).double()  # (b', k, d): the symmetric part is the output
    else:
        fit_permutations = _permutations(config.k, settings.permutations, settings.seed + 5)
        fit_targets = permuted_outputs(step, fit_points, fit_init, fit_permutations).double().mean(0)
    kernels = {"euclidean": euclidean_kernel()}
    try:
        kernels["attn_xc"] = attention_kernel(model)
    except InvalidInput:  # a non-Euclidean attn_xc or a norm slot: the Euclidean kernel only
        pass
    steps = settings.steps

    def after_steps(centroids: Tensor) -> float:
        return float(log_objective(points, centroids.to(points.dtype)).mean())

    fits, algorithms = [], []
    for family in FAMILIES:
        for kernel_name, kernel in kernels.items():
            fit = fit_distilled(family, kernel, fit_points, fit_init, fit_targets, max_iter=FIT_ITERATIONS)
            predicted = fit.algorithm.step(points, init) - init.double()  # (b, k, d)
            fits.append({"family": family, "kernel": kernel_name, "parameters": fit.algorithm.parameters,
                         "r2_fit": fit.r2_fit, "r2_symmetric": r2_score(predicted, symmetric),
                         "r2_update": r2_score(predicted, update)})
            algorithms.append(fit.algorithm)
    index = max(range(len(fits)), key=lambda i: fits[i]["r2_symmetric"])
    best = {**fits[index], "log_objective": after_steps(algorithms[index].run(points.double(), init.double(),
                                                                               steps)[:, -1])}
    seconds["distilled algorithm"] = time.perf_counter() - started

    started = time.perf_counter()
    fixed_run = model(points, init, steps=steps, slot_order="fixed").centroids  # (b, k, d)
    objectives = {"initial": after_steps(init), "model": after_steps(fixed_run),
                  "Lloyd": after_steps(lloyd(points, init, steps).centroids)}
    if equivariant:
        objectives["slot-averaged model"] = objectives["model"]
    else:
        averaged = slot_averaged_run(model, points, init, steps, settings.average_permutations, settings.seed + 6)
        objectives["slot-averaged model"] = after_steps(averaged.trajectory[:, -1])
    objectives[f"distilled ({best['family']}, {best['kernel']})"] = best["log_objective"]
    seconds["20-step objectives"] = time.perf_counter() - started
    return Explanation(settings=settings, equivariant=equivariant, update=update, parts=decomposition.parts,
                       paths=paths, sum_error=decomposition.residual, n_permutations=n_permutations,
                       symmetric=symmetric, r2_symmetric=r2_score(symmetric, update), symmetric_share=share,
                       specific_share=1 - share, monte_carlo_error=error, permutation_change=change,
                       reversed_max_change=float(reversed_change.max()),
                       mean_abs_update=float(update.abs().mean()), path_shares=path_shares, fits=fits, best=best,
                       objectives=objectives, seconds=seconds)


@torch.no_grad()
def pair_of_report(model: KMeansTransformer, settings: ExplanationSettings) -> tuple[CrowdedPair | None, float]:
    """The crowded pair of the report's tasks (``explain_model``'s: the same seed, points and initial centroids, with
    their true components) and the seconds it took: ``interp.instruments.symmetry.crowded_pair`` over
    ``settings.pair_permutations`` slot orders; the model is left in eval mode."""
    started = time.perf_counter()
    model.eval()
    config = model.config
    tasks = sample_tasks(TaskConfig(n=settings.n, d=config.d, k=config.k), settings.tasks, settings.seed,
                         dtype=model.codes.dtype)
    init = init_centroids(tasks.points, config.k, "random", settings.seed + 1)  # (b, k, d)
    pair = crowded_pair(model, tasks.points, init, tasks.labels, settings.pair_permutations, settings.seed + 7)
    return pair, time.perf_counter() - started
