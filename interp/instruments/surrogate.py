"""What did it learn? Interpretable surrogates of a learned one-step centroid update.

For each centroid c_j of a task, with hard cluster mean m_j (points nearest to c_j; m_j = c_j if empty), soft
mean s_j(T) = sum_i r_ij x_i / sum_i r_ij with r_i = softmax_j(-||x_i - c_j||^2 / T) (soft k-means, MacKay), and
the global mean xbar, the surrogates of the learned output c'_j are

    lloyd:        c'_j = m_j
    relaxed:      c'_j = c_j + lam (m_j - c_j)                         (over/under-relaxed Lloyd, 1 coefficient)
    soft:         c'_j = s_j(T)                                        (soft k-means, 1 temperature)
    full:         c'_j = a m_j + b s_j(T) + g c_j + e xbar             (4 coefficients and a temperature)

fitted by least squares on one set of tasks and scored on unseen tasks by R^2 of the output centroids and
of the update c'_j - c_j (the stricter figure: the update is what the layer computes). Each surrogate is also
run as an algorithm for T re-embedded steps and compared with Lloyd and with the learned model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp.algorithms import assign, cluster_sums, lloyd, log_objective
from interp.model import KMeansTransformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks

TEMPERATURES = tuple(10.0 ** e for e in torch.linspace(-3, 1, 33).tolist())


@dataclass(frozen=True)
class SurrogateFit:
    """A fitted surrogate: coefficients, temperature, held-out R^2 and multi-step objective."""

    name: str
    coefficients: dict[str, float]
    temperature: float | None
    r2_centroids: float  # held-out R^2 of the output centroids
    r2_update: float  # held-out R^2 of the update (output - input centroids)
    log_objective_after_steps: float  # mean log objective after `steps` re-embedded applications


def features(points: Tensor, centroids: Tensor, temperature: float) -> dict[str, Tensor]:
    """Hard mean, soft mean at ``temperature``, old centroid and global mean, each (b, k, d)."""
    return {"hard": _hard_mean(points, centroids),
            "soft": _soft_mean(points, _squared_distances(points, centroids), temperature),
            "old": centroids, "global": _global_mean(points, centroids)}


# The parts of ``features``, so that a fit over many temperatures computes the distances and the hard means once
# (the same operations in the same order: the figures do not change).
def _hard_mean(points: Tensor, centroids: Tensor) -> Tensor:
    """(b, k, d): the mean of each centroid's points (the centroid itself where it has none)."""
    sums, counts = cluster_sums(points, assign(points, centroids), centroids.shape[1])  # (b, k, d), (b, k)
    return torch.where(counts[..., None] > 0, sums / counts.clamp_min(1)[..., None], centroids)


def _squared_distances(points: Tensor, centroids: Tensor, elements: int = 2**20) -> Tensor:
    """(b, n, k): sum_d (x - c)^2, a few tasks at a time so that each (tasks, n, k, d) difference stays in the cache
    (about 6 times faster at b = 192, n = 512, k = 10, d = 32; each entry the same operations, so the same bits)."""
    b, n, d = points.shape
    k = centroids.shape[1]
    out = torch.empty(b, n, k, dtype=torch.promote_types(points.dtype, centroids.dtype), device=points.device)
    step = max(1, elements // max(1, n * k * d))
    for start in range(0, b, step):
        diff = points[start:start + step, :, None, :] - centroids[start:start + step, None, :, :]  # (c, n, k, d)
        torch.sum(diff.mul_(diff), dim=-1, out=out[start:start + step])
    return out


def _soft_mean(points: Tensor, sq: Tensor, temperature: float) -> Tensor:
    """(b, k, d): the soft k-means means at ``temperature`` from the squared distances ``sq`` (b, n, k)."""
    weights = torch.softmax(-sq / temperature, dim=-1)  # (b, n, k)
    return (weights.transpose(1, 2) @ points) / weights.sum(1)[..., None].clamp_min(1e-30)  # (b, k, d)


def _global_mean(points: Tensor, centroids: Tensor) -> Tensor:
    return points.mean(dim=1, keepdim=True).expand_as(centroids)  # (b, k, d)


def _r2(predicted: Tensor, target: Tensor) -> float:
    residual = ((target - predicted) ** 2).sum()
    total = ((target - target.mean()) ** 2).sum()
    return (1 - residual / total).item()


def _least_squares(columns: list[Tensor], target: Tensor) -> Tensor:
    design = torch.stack([c.reshape(-1) for c in columns], dim=1).double()  # (N, p)
    return torch.linalg.lstsq(design, target.reshape(-1, 1).double()).solution[:, 0]  # (p,)


def _apply(name: str, coefficients: dict[str, float], temperature: float | None, points: Tensor,
           centroids: Tensor) -> Tensor:
    if name == "lloyd":
        return _hard_mean(points, centroids)
    if name == "relaxed":
        return centroids + coefficients["lam"] * (_hard_mean(points, centroids) - centroids)
    if name == "soft":
        return _soft_mean(points, _squared_distances(points, centroids), temperature or 1.0)
    feats = features(points, centroids, temperature or 1.0)
    return sum(coefficients[key] * feats[key] for key in ("hard", "soft", "old", "global"))


@torch.no_grad()
def fit_surrogates(model: KMeansTransformer, task_config: TaskConfig | None = None, n_fit: int = 192,
                   n_test: int = 192, steps: int = 20, seed: int = 7) -> list[SurrogateFit]:
    """Fit the three surrogates to ``model``'s one-step update and score them on unseen tasks (random init)."""
    model.eval()
    config = task_config or TaskConfig(n=512, d=model.config.d, k=model.config.k)
    dtype = model.codes.dtype

    def draw(count: int, offset: int):
        points = sample_tasks(config, count, seed + offset, dtype=dtype).points  # (b, n, d)
        init = init_centroids(points, config.k, "random", seed + offset + 1)  # (b, k, d)
        return points, init, model(points, init, steps=1, slot_order="fixed").centroids  # learned output (b, k, d)

    fit_points, fit_init, fit_out = draw(n_fit, 0)
    test_points, test_init, test_out = draw(n_test, 100)
    fits: list[tuple[str, dict, float | None]] = [("lloyd", {}, None)]
    hard = _hard_mean(fit_points, fit_init)
    lam = _least_squares([hard - fit_init], fit_out - fit_init)
    fits.append(("relaxed", {"lam": lam[0].item()}, None))
    sq, global_mean = _squared_distances(fit_points, fit_init), _global_mean(fit_points, fit_init)
    soft = {t: _soft_mean(fit_points, sq, t) for t in TEMPERATURES}  # once per temperature, for both fits
    soft_scores = [(_r2(soft[t] - fit_init, fit_out - fit_init), t) for t in TEMPERATURES]
    fits.append(("soft", {}, max(soft_scores)[1]))
    best = None
    for temperature in TEMPERATURES:
        feats = {"hard": hard, "soft": soft[temperature], "old": fit_init, "global": global_mean}
        coef = _least_squares([feats[key] for key in ("hard", "soft", "old", "global")], fit_out)
        predicted = sum(c * feats[key] for c, key in zip(coef.tolist(), ("hard", "soft", "old", "global")))
        score = _r2(predicted - fit_init, fit_out - fit_init)
        if best is None or score > best[0]:
            best = (score, temperature, dict(zip(("hard", "soft", "old", "global"), coef.tolist())))
    fits.append(("full", best[2], best[1]))

    results = []
    for name, coefficients, temperature in fits:
        predicted = _apply(name, coefficients, temperature, test_points, test_init)
        current = test_init
        for _ in range(steps):
            current = _apply(name, coefficients, temperature, test_points, current)
        value = log_objective(test_points, current).mean().item()
        if not math.isfinite(value):
            value = float("nan")
        results.append(SurrogateFit(name, coefficients, temperature, _r2(predicted, test_out),
                                    _r2(predicted - test_init, test_out - test_init), value))
    return results


@torch.no_grad()
def reference_objectives(model: KMeansTransformer, task_config: TaskConfig | None = None, n_test: int = 192,
                         steps: int = 20, seed: int = 7) -> dict[str, float]:
    """Mean log objective after ``steps`` on the surrogates' test tasks, for the learned model and Lloyd."""
    model.eval()
    config = task_config or TaskConfig(n=512, d=model.config.d, k=model.config.k)
    points = sample_tasks(config, n_test, seed + 100, dtype=model.codes.dtype).points
    init = init_centroids(points, config.k, "random", seed + 101)
    learned = model(points, init, steps=steps, slot_order="fixed").centroids
    return {"learned model": log_objective(points, learned).mean().item(),
            "Lloyd": log_objective(points, lloyd(points, init, steps).centroids).mean().item(),
            "initial": log_objective(points, init).mean().item()}
