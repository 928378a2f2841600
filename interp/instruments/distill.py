"""A distilled algorithm: a small, readable update fitted to a model's (symmetric) one-step update.

Every family is a soft assignment followed by a damped move to the soft cluster mean, with at most 6 fitted
parameters. For points x_i and centroids c_j of one task,

    p_ij = softmax_j(beta * s(x_i, c_j))                       soft assignment at inverse temperature beta
    m_j  = sum_i p_ij x_i / sum_i p_ij                          soft cluster mean (c_j if sum_i p_ij = 0)

    soft:       c'_j = m_j                                                               (beta)
    damped:     c'_j = c_j + lam (m_j - c_j)                                             (beta, lam)
    repulsive:  c'_j = c_j + lam (m_j - c_j) + kappa (sum_l w_jl c_l - c_j),
                w_jl = softmax_l(-beta_c ||c_j - c_l||^2)                                (beta, lam, kappa, beta_c)

The kernel s is ``euclidean``, s = -||x - c||^2 (beta is then the soft k-means inverse temperature 1 / T), or
``attn_xc``, the data part of the model's own assignment attention read from its weights (not fitted),

    s(x, c) = -||Q_d x + b_Q - K_d c - b_K||^2 * scale      (Q_d, K_d: the data columns of attn_xc's W_Q, W_K),

with beta then the gain relative to the model's gamma = 1. Lloyd's algorithm is the damped family with lam = 1 and
beta -> inf on the Euclidean kernel. Fits minimise the squared error of the update c' - c by L-BFGS from the best
point of a grid over beta; they are scored on unseen tasks by R^2 of the update (``interp.instruments.decompose.
r2_score``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_choice, check_points_centroids, check_positive_int
from interp.instruments.decompose import r2_score
from interp.model import KMeansTransformer

FAMILIES = {"soft": ("beta",), "damped": ("beta", "lam"), "repulsive": ("beta", "lam", "kappa", "beta_c")}
KERNELS = ("euclidean", "attn_xc")
MAX_PARAMETERS = 6
BETA_GRID = tuple(10.0 ** (e / 4) for e in range(-8, 25))  # 0.01 ... 1e6, four points per decade
POSITIVE = ("beta", "beta_c")  # fitted on a log scale


@dataclass(frozen=True)
class AssignmentKernel:
    """s(x, c) of the soft assignment: -||x - c||^2 (``euclidean``) or the data part of attn_xc's score."""

    name: str
    W_Q: Tensor | None = None  # (D, d): data columns of attn_xc's W_Q
    W_K: Tensor | None = None  # (D, d)
    b_Q: Tensor | None = None  # (D,)
    b_K: Tensor | None = None  # (D,)
    scale: float = 1.0

    def scores(self, points: Tensor, centroids: Tensor) -> Tensor:
        """s(x_i, c_j) for points (b, n, d) and centroids (b, k, d) -> (b, n, k)."""
        if self.name == "euclidean":
            return -_squared_distances(points, centroids)
        queries = points @ self.W_Q.to(points).T  # (b, n, D)
        keys = centroids @ self.W_K.to(points).T  # (b, k, D)
        if self.b_Q is not None:
            queries = queries + self.b_Q.to(points)
        if self.b_K is not None:
            keys = keys + self.b_K.to(points)
        return -_squared_distances(queries, keys) * self.scale


def _squared_distances(first: Tensor, second: Tensor) -> Tensor:
    """||a_i - b_j||^2 (b, n, k) from the differences (exact, no cancellation)."""
    return ((first[:, :, None, :] - second[:, None, :, :]) ** 2).sum(-1)


def euclidean_kernel() -> AssignmentKernel:
    """s(x, c) = -||x - c||^2."""
    return AssignmentKernel("euclidean")


def attention_kernel(model: KMeansTransformer) -> AssignmentKernel:
    """The data part of ``model``'s attn_xc score, read from its (first layer's) weights (module docstring).
    Needs a Euclidean attn_xc without a norm slot."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    config = model.config
    if config.attn_xc.score != "euclidean" or config.norm_slot:
        raise InvalidInput("the attn_xc kernel needs a Euclidean attn_xc and no norm slot")
    weights, d = model.layers[0].attn_xc, config.d
    bias = [None if value is None else value.detach().double().clone() for value in (weights.b_Q, weights.b_K)]
    scale = 1.0 / math.sqrt(config.d_model) if config.attn_xc.scale_by_sqrt_dim else 1.0
    return AssignmentKernel("attn_xc", weights.W_Q.detach().double()[:, :d].clone(),
                            weights.W_K.detach().double()[:, :d].clone(), bias[0], bias[1], scale)


@dataclass(frozen=True)
class DistilledAlgorithm:
    """One member of a family (module docstring): the kernel and the fitted parameters."""

    family: str
    kernel: AssignmentKernel
    parameters: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice(self.family, "family", tuple(FAMILIES))
        missing = [name for name in FAMILIES[self.family] if name not in self.parameters]
        if missing:
            raise InvalidInput(f"family {self.family!r} needs parameters {missing}")

    def step(self, points: Tensor, centroids: Tensor) -> Tensor:
        """One update: new centroids (b, k, d) from points (b, n, d) and centroids (b, k, d)."""
        return _step(self.family, self.kernel, {name: torch.as_tensor(value, dtype=torch.float64)
                                                for name, value in self.parameters.items()}, points, centroids)

    @torch.no_grad()
    def run(self, points: Tensor, centroids: Tensor, steps: int = 20) -> Tensor:
        """The centroid trajectory (b, steps + 1, k, d) of ``steps`` updates."""
        points, centroids = check_points_centroids(points, centroids)
        check_positive_int(steps, "steps")
        trajectory = [centroids]
        for _ in range(steps):
            trajectory.append(self.step(points, trajectory[-1]).to(centroids.dtype))
        return torch.stack(trajectory, dim=1)


def _step(family: str, kernel: AssignmentKernel, parameters: dict[str, Tensor], points: Tensor,
          centroids: Tensor) -> Tensor:
    """The family's update (module docstring), differentiable in ``parameters``; computed in float64."""
    points64, centroids64 = points.double(), centroids.double()
    weights = torch.softmax(parameters["beta"] * kernel.scores(points64, centroids64), dim=-1)  # (b, n, k)
    mass = weights.sum(1)[..., None]  # (b, k, 1)
    sums = weights.transpose(1, 2) @ points64  # (b, k, d)
    mean = torch.where(mass > 0, sums / mass.clamp_min(1e-300), centroids64)  # (b, k, d)
    if family == "soft":
        return mean
    new = centroids64 + parameters["lam"] * (mean - centroids64)
    if family == "repulsive":
        neighbours = torch.softmax(-parameters["beta_c"] * _squared_distances(centroids64, centroids64), dim=-1)
        new = new + parameters["kappa"] * (neighbours @ centroids64 - centroids64)  # (b, k, d)
    return new


@dataclass(frozen=True)
class DistilledFit:
    """A fitted ``DistilledAlgorithm`` and its R^2 of the update on the fit tasks."""

    algorithm: DistilledAlgorithm
    r2_fit: float
    n_parameters: int


def _initial(family: str) -> dict[str, float]:
    """Starting values; beta and lam are replaced by the grid's best point."""
    return {"beta": 1.0, "lam": 1.0, "kappa": 0.0, "beta_c": 1.0}


def _grid_point(kernel: AssignmentKernel, beta: float, points: Tensor, centroids: Tensor, targets: Tensor,
                free_lam: bool) -> tuple[float, float]:
    """For fixed beta: lam (the least-squares one if ``free_lam``, else 1) and the squared error of the update."""
    mean = _step("soft", kernel, {"beta": torch.tensor(beta, dtype=torch.float64)}, points, centroids)
    move, wanted = mean - centroids, targets - centroids
    denominator = float((move * move).sum())
    lam = float((move * wanted).sum()) / denominator if free_lam and denominator > 0 else 1.0
    return lam, float(((wanted - lam * move) ** 2).sum())


def fit_distilled(family: str, kernel: AssignmentKernel, points: Tensor, centroids: Tensor, targets: Tensor,
                  max_iter: int = 100) -> DistilledFit:
    """Fit ``family`` with ``kernel`` to the one-step targets (b, k, d), the new centroids from ``centroids``
    (b, k, d) on ``points`` (b, n, d): least squares on the update, from the best grid point of beta (with the
    least-squares lam), refined by L-BFGS over all parameters (beta and beta_c on a log scale)."""
    check_choice(family, "family", tuple(FAMILIES))
    if not isinstance(kernel, AssignmentKernel):
        raise InvalidInputType(f"kernel must be an AssignmentKernel, got {type(kernel).__name__}")
    points, centroids = check_points_centroids(points, centroids)
    if not isinstance(targets, Tensor) or targets.shape != centroids.shape:
        raise InvalidInput(f"targets must have the centroids' shape {tuple(centroids.shape)}")
    points, centroids, targets = points.double(), centroids.double(), targets.double()
    names = FAMILIES[family]
    if len(names) > MAX_PARAMETERS:
        raise InvalidInput(f"family {family!r} has more than {MAX_PARAMETERS} parameters")
    start = _initial(family)
    with torch.no_grad():
        grid = [(_grid_point(kernel, beta, points, centroids, targets, family != "soft"), beta) for beta in BETA_GRID]
    (lam, _), beta = min(grid, key=lambda item: item[0][1])
    start["beta"], start["lam"] = beta, lam
    raw = torch.tensor([math.log(start[name]) if name in POSITIVE else start[name] for name in names],
                       dtype=torch.float64, requires_grad=True)

    def parameters_of(vector: Tensor) -> dict[str, Tensor]:
        return {name: vector[index].exp() if name in POSITIVE else vector[index] for index, name in enumerate(names)}

    wanted = targets - centroids
    normaliser = float((wanted * wanted).mean()) or 1.0
    optimiser = torch.optim.LBFGS([raw], max_iter=max_iter, line_search_fn="strong_wolfe")

    def loss_of(vector: Tensor) -> Tensor:
        return ((_step(family, kernel, parameters_of(vector), points, centroids) - targets) ** 2).mean() / normaliser

    def closure() -> Tensor:
        optimiser.zero_grad()
        loss = loss_of(raw)
        loss.backward()
        return loss

    initial = raw.detach().clone()
    optimiser.step(closure)
    with torch.no_grad():
        final_loss = loss_of(raw)
        if not torch.isfinite(final_loss) or final_loss > loss_of(initial):  # keep the grid start if L-BFGS lost it
            raw.copy_(initial)
        fitted = {name: float(value) for name, value in parameters_of(raw).items()}
        algorithm = DistilledAlgorithm(family, kernel, fitted)
        r2 = r2_score(algorithm.step(points, centroids) - centroids, wanted)
    return DistilledFit(algorithm, r2, len(names))


def score(algorithm: DistilledAlgorithm, points: Tensor, centroids: Tensor, targets: Tensor) -> float:
    """R^2 of the update: targets - centroids (b, k, d) explained by the algorithm's update from ``centroids``."""
    points, centroids = check_points_centroids(points, centroids)
    with torch.no_grad():
        return r2_score(algorithm.step(points, centroids) - centroids.double(), targets.double() - centroids.double())
