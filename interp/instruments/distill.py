"""A distilled algorithm: a small, readable update fitted to a model's one-step update (or its symmetric part).

Every family is a soft assignment followed by a damped move to a soft cluster mean. For points x_i and centroids c_j
of one task,

    p_ij = softmax_j(beta * s(x_i, c_j))                       soft assignment at inverse temperature beta
    m_j  = sum_i p_ij x_i / sum_i p_ij                          soft cluster mean (c_j if sum_i p_ij = 0)

    soft:       c'_j = m_j                                                               (beta)
    damped:     c'_j = c_j + lam (m_j - c_j)                                             (beta, lam)
    repulsive:  c'_j = c_j + lam (m_j - c_j) + kappa (sum_l w_jl c_l - c_j),
                w_jl = softmax_l(-beta_c ||c_j - c_l||^2)                                (beta, lam, kappa, beta_c)

These three are slot-symmetric (``FAMILIES``): permuting the centroids permutes the output. The slot-specific
families (``SLOT_FAMILIES``) give every slot its own key offset delta_j (``SlotOffsets``), so that each slot sees its
centroid at a shifted place, shrunk by rho towards the centre of the unit cube (1/2 in every coordinate, where the
learned models' tasks lie):

    p_ij = softmax_j(beta * s(x_i, rho c_j + (1 - rho) / 2 + delta_j))

    offset:     c'_j = c_j + lam (m_j - c_j)                                             (beta, lam, rho; delta)
    attend:     a_ij = softmax_i(alpha p_ij),  c'_j = c_j + lam (sum_i a_ij x_i - c_j)   (beta, lam, rho, alpha; delta)

With delta = 0 and rho = 1, ``offset`` is the damped family. ``attend`` mirrors the learned layer: attn_xc assigns
the points, then attn_cx lets each centroid attend over the points through what attn_xc wrote into them, a softmax
over the points (not over the centroids), so that a centroid holding few points still moves, towards the points it
holds most. The offsets are either fitted (k x d numbers with the Euclidean kernel) or read from the model: the code
columns of attn_xc's key matrix times the slot codes, u_j = W_K[:, d:] e_j, the displacement the learned keys
[c_j; e_j] carry (``model_slot_offsets``).

The kernel s is ``euclidean``, s(x, c) = -||x - c||^2 (beta is then the soft k-means inverse temperature 1 / T; an
offset is added to c), or ``attn_xc``, the data part of the model's own assignment attention read from its weights
(not fitted),

    s(x, c) = -||Q_d x + b_Q - (K_d c + b_K + u)||^2 * scale   (Q_d, K_d: the data columns of attn_xc's W_Q, W_K;
                                                                 u: the slot's offset in key space, 0 for FAMILIES),

with beta then the gain relative to the model's gamma = 1. With the offsets read from the model and rho = 1 this is
the model's whole attn_xc score of point i for slot j. Lloyd's algorithm is the damped family with lam = 1 and
beta -> inf on the Euclidean kernel.

``DistilledAlgorithm.n_parameters`` counts every learned number an algorithm uses: its fitted scalars, fitted offsets
and the learned numbers it reads from the model's weights (the attn_xc kernel: W_Q and W_K data columns and biases;
read offsets: W_K's code columns). Fits minimise the squared error of the update c' - c by L-BFGS from the best point
of a grid over beta (with the least-squares lam); they are scored on unseen tasks by R^2 of the update
(``interp.instruments.decompose.r2_score``).
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
SLOT_FAMILIES = {"offset": ("beta", "lam", "rho"),  # slot-specific: per-slot key offsets (``SlotOffsets``)
                 "attend": ("beta", "lam", "rho", "alpha")}
ALL_FAMILIES = {**FAMILIES, **SLOT_FAMILIES}
KERNELS = ("euclidean", "attn_xc")
OFFSET_SOURCES = ("fitted", "attn_xc")
MAX_PARAMETERS = 6  # fitted scalars of a family (offsets and numbers read from the weights are counted apart)
BETA_GRID = tuple(10.0 ** (e / 4) for e in range(-8, 25))  # 0.01 ... 1e6, four points per decade
POSITIVE = ("beta", "beta_c", "alpha")  # fitted on a log scale
KEY_CENTRE = 0.5  # rho shrinks each slot's key towards the centre of the unit cube


@dataclass(frozen=True)
class AssignmentKernel:
    """s(x, c) of the soft assignment: -||x - c||^2 (``euclidean``) or the data part of attn_xc's score."""

    name: str
    W_Q: Tensor | None = None  # (D, d): data columns of attn_xc's W_Q
    W_K: Tensor | None = None  # (D, d)
    b_Q: Tensor | None = None  # (D,)
    b_K: Tensor | None = None  # (D,)
    scale: float = 1.0

    @property
    def n_learned(self) -> int:
        """Learned numbers of the model the kernel reads (W_Q and W_K data columns, biases); 0 for ``euclidean``."""
        return sum(int(value.numel()) for value in (self.W_Q, self.W_K, self.b_Q, self.b_K) if value is not None)

    @property
    def key_width(self) -> int | None:
        """Width of the key space where slot offsets are added: D for attn_xc, None (= d) for ``euclidean``."""
        return None if self.W_K is None else int(self.W_K.shape[0])

    def queries(self, points: Tensor) -> Tensor:
        """(b, n, d) -> (b, n, m): x, or Q_d x + b_Q."""
        if self.name == "euclidean":
            return points
        queries = points @ self.W_Q.to(points).T  # (b, n, D)
        return queries if self.b_Q is None else queries + self.b_Q.to(points)

    def keys(self, centroids: Tensor) -> Tensor:
        """(b, k, d) -> (b, k, m): c, or K_d c + b_K."""
        if self.name == "euclidean":
            return centroids
        keys = centroids @ self.W_K.to(centroids).T  # (b, k, D)
        return keys if self.b_K is None else keys + self.b_K.to(centroids)

    def scores(self, points: Tensor, centroids: Tensor, offsets: Tensor | None = None) -> Tensor:
        """s(x_i, c_j) for points (b, n, d) and centroids (b, k, d) -> (b, n, k); ``offsets`` (k, m) are added to
        the keys (slot j's key displaced by offsets[j])."""
        keys = self.keys(centroids)
        if offsets is not None:
            keys = keys + offsets.to(keys)
        return -_squared_distances(self.queries(points), keys) * self.scale


def _squared_distances(first: Tensor, second: Tensor) -> Tensor:
    """||a_i - b_j||^2 (b, n, k) as ||a||^2 + ||b||^2 - 2 a.b, clamped at 0: no (b, n, k, width) tensor, so that fits
    on a thousand tasks hold in memory (relative error ~1e-16 of the norms in float64)."""
    squared = ((first * first).sum(-1)[..., :, None] + (second * second).sum(-1)[..., None, :]
               - 2 * first @ second.transpose(-1, -2))
    return squared.clamp_min(0)


def euclidean_kernel() -> AssignmentKernel:
    """s(x, c) = -||x - c||^2."""
    return AssignmentKernel("euclidean")


def _attn_xc(model: KMeansTransformer):
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    config = model.config
    if config.attn_xc.score != "euclidean" or config.norm_slot:
        raise InvalidInput("the attn_xc kernel needs a Euclidean attn_xc and no norm slot")
    return model.layers[0].attn_xc, config


def attention_kernel(model: KMeansTransformer) -> AssignmentKernel:
    """The data part of ``model``'s attn_xc score, read from its (first layer's) weights (module docstring).
    Needs a Euclidean attn_xc without a norm slot."""
    weights, config = _attn_xc(model)
    d = config.d
    bias = [None if value is None else value.detach().double().clone() for value in (weights.b_Q, weights.b_K)]
    scale = 1.0 / math.sqrt(config.d_model) if config.attn_xc.scale_by_sqrt_dim else 1.0
    return AssignmentKernel("attn_xc", weights.W_Q.detach().double()[:, :d].clone(),
                            weights.W_K.detach().double()[:, :d].clone(), bias[0], bias[1], scale)


@dataclass(frozen=True)
class SlotOffsets:
    """Per-slot key offsets of the ``offset`` family: ``values`` (k, m) added to slot j's key (m = d for the
    Euclidean kernel, D for attn_xc's); ``source`` ``fitted`` or ``attn_xc`` (read from the model's weights);
    ``n_learned`` the learned numbers they use (k * m when fitted, W_K's code columns when read)."""

    values: Tensor
    source: str = "fitted"
    n_learned: int = -1  # -1: k * m (fitted)

    def __post_init__(self) -> None:
        if not isinstance(self.values, Tensor) or self.values.dim() != 2:
            raise InvalidInput("offsets must be a (k, width) tensor")
        if not bool(torch.isfinite(self.values).all()):
            raise InvalidInput("offsets must be finite")
        check_choice(self.source, "source", OFFSET_SOURCES)
        if self.n_learned == -1:
            object.__setattr__(self, "n_learned", int(self.values.numel()))
        if not isinstance(self.n_learned, int) or self.n_learned < 0:
            raise InvalidInput(f"n_learned must be an int >= 0, got {self.n_learned!r}")


def model_slot_offsets(model: KMeansTransformer) -> SlotOffsets:
    """The offsets the learned keys carry: u_j = W_K[:, d:] e_j (k, D) of attn_xc's first layer, read, not fitted;
    counted as W_K's code columns (D x e learned numbers). Needs a model with slot codes (one-hot or binary)."""
    weights, config = _attn_xc(model)
    if config.scratch_width == 0:
        raise InvalidInput("the model has no slot codes: its keys carry no per-slot offset")
    code = weights.W_K.detach().double()[:, config.d:config.d + config.scratch_width]  # (D, e)
    return SlotOffsets(model.codes.double() @ code.T, "attn_xc", int(code.numel()))


@dataclass(frozen=True)
class DistilledAlgorithm:
    """One member of a family (module docstring): the kernel, the fitted scalars and, for a slot-specific family,
    the per-slot key offsets."""

    family: str
    kernel: AssignmentKernel
    parameters: dict[str, float] = field(default_factory=dict)
    offsets: SlotOffsets | None = None

    def __post_init__(self) -> None:
        check_choice(self.family, "family", tuple(ALL_FAMILIES))
        missing = [name for name in ALL_FAMILIES[self.family] if name not in self.parameters]
        if missing:
            raise InvalidInput(f"family {self.family!r} needs parameters {missing}")
        if self.family in SLOT_FAMILIES:
            if not isinstance(self.offsets, SlotOffsets):
                raise InvalidInput(f"family {self.family!r} needs SlotOffsets")
            width = self.kernel.key_width
            if width is not None and self.offsets.values.shape[1] != width:
                raise InvalidInput(f"offsets of the {self.kernel.name} kernel must have width {width}, got "
                                   f"{self.offsets.values.shape[1]}")
        elif self.offsets is not None:
            raise InvalidInput(f"family {self.family!r} is slot-symmetric: it takes no offsets")

    @property
    def n_fitted(self) -> int:
        """Fitted numbers: the family's scalars and fitted offsets."""
        fitted = self.offsets is not None and self.offsets.source == "fitted"
        return len(ALL_FAMILIES[self.family]) + (self.offsets.n_learned if fitted else 0)

    @property
    def n_read(self) -> int:
        """Learned numbers read from the model's weights: the kernel's and read offsets'."""
        read = self.offsets is not None and self.offsets.source != "fitted"
        return self.kernel.n_learned + (self.offsets.n_learned if read else 0)

    @property
    def n_parameters(self) -> int:
        """Every learned number the algorithm uses: fitted plus read from the model."""
        return self.n_fitted + self.n_read

    def step(self, points: Tensor, centroids: Tensor) -> Tensor:
        """One update: new centroids (b, k, d) from points (b, n, d) and centroids (b, k, d)."""
        offsets = None if self.offsets is None else self.offsets.values.double()
        if offsets is not None and offsets.shape[0] != centroids.shape[1]:
            raise InvalidInput(f"offsets are for {offsets.shape[0]} slots, the centroids have {centroids.shape[1]}")
        return _step(self.family, self.kernel, {name: torch.as_tensor(value, dtype=torch.float64)
                                                for name, value in self.parameters.items()}, points, centroids,
                     offsets)

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
          centroids: Tensor, offsets: Tensor | None = None) -> Tensor:
    """The family's update (module docstring), differentiable in ``parameters`` and ``offsets``; in float64."""
    points64, centroids64 = points.double(), centroids.double()
    seen = centroids64
    if family in SLOT_FAMILIES:
        rho = parameters["rho"]
        seen = rho * centroids64 + (1 - rho) * KEY_CENTRE  # where each slot looks, before its offset
    weights = torch.softmax(parameters["beta"] * kernel.scores(points64, seen, offsets), dim=-1)  # (b, n, k)
    if family == "attend":  # each centroid attends over the points by how strongly they are assigned to it
        attention = torch.softmax(parameters["alpha"] * weights, dim=1)  # (b, n, k), each column sums to 1
        return centroids64 + parameters["lam"] * (attention.transpose(1, 2) @ points64 - centroids64)
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
    """A fitted ``DistilledAlgorithm`` and its R^2 of the update on the fit tasks; ``n_parameters`` counts every
    learned number it uses (``DistilledAlgorithm.n_parameters``: fitted plus read from the model)."""

    algorithm: DistilledAlgorithm
    r2_fit: float
    n_parameters: int

    @property
    def n_fitted(self) -> int:
        return self.algorithm.n_fitted

    @property
    def n_read(self) -> int:
        return self.algorithm.n_read


def _initial(family: str) -> dict[str, float]:
    """Starting values; beta and lam are replaced by the grid's best point."""
    return {"beta": 1.0, "lam": 1.0, "kappa": 0.0, "beta_c": 1.0, "rho": 1.0, "alpha": 10.0}


def _grid_point(kernel: AssignmentKernel, beta: float, points: Tensor, centroids: Tensor, targets: Tensor,
                free_lam: bool, offsets: Tensor | None = None) -> tuple[float, float]:
    """For fixed beta: lam (the least-squares one if ``free_lam``, else 1) and the squared error of the update."""
    mean = _step("soft", kernel, {"beta": torch.tensor(beta, dtype=torch.float64)}, points, centroids, offsets)
    move, wanted = mean - centroids, targets - centroids
    denominator = float((move * move).sum())
    lam = float((move * wanted).sum()) / denominator if free_lam and denominator > 0 else 1.0
    return lam, float(((wanted - lam * move) ** 2).sum())


def fit_distilled(family: str, kernel: AssignmentKernel, points: Tensor, centroids: Tensor, targets: Tensor,
                  max_iter: int = 100, offsets: SlotOffsets | None = None) -> DistilledFit:
    """Fit ``family`` with ``kernel`` to the one-step targets (b, k, d), the new centroids from ``centroids``
    (b, k, d) on ``points`` (b, n, d): least squares on the update, from the best grid point of beta (with the
    least-squares lam), refined by L-BFGS over all parameters (beta and beta_c on a log scale).

    A slot-specific family (``SLOT_FAMILIES``) takes ``offsets``: read ones (``model_slot_offsets``) are kept as they
    are; without them the offsets (k, key width) are fitted too, from 0."""
    check_choice(family, "family", tuple(ALL_FAMILIES))
    if not isinstance(kernel, AssignmentKernel):
        raise InvalidInputType(f"kernel must be an AssignmentKernel, got {type(kernel).__name__}")
    points, centroids = check_points_centroids(points, centroids)
    if not isinstance(targets, Tensor) or targets.shape != centroids.shape:
        raise InvalidInput(f"targets must have the centroids' shape {tuple(centroids.shape)}")
    if offsets is not None and family not in SLOT_FAMILIES:
        raise InvalidInput(f"family {family!r} is slot-symmetric: it takes no offsets")
    if offsets is not None and not isinstance(offsets, SlotOffsets):
        raise InvalidInputType(f"offsets must be SlotOffsets, got {type(offsets).__name__}")
    points, centroids, targets = points.detach().double(), centroids.detach().double(), targets.detach().double()
    names = ALL_FAMILIES[family]
    if len(names) > MAX_PARAMETERS:
        raise InvalidInput(f"family {family!r} has more than {MAX_PARAMETERS} parameters")
    k = centroids.shape[1]
    fit_offsets = family in SLOT_FAMILIES and offsets is None
    if family in SLOT_FAMILIES:
        width = kernel.key_width or centroids.shape[2]
        if offsets is not None and tuple(offsets.values.shape) != (k, width):
            raise InvalidInput(f"offsets must have shape {(k, width)}, got {tuple(offsets.values.shape)}")
        start_offsets = (torch.zeros(k, width, dtype=torch.float64) if fit_offsets
                         else offsets.values.double().clone())
    else:
        start_offsets = None
    start = _initial(family)
    with torch.no_grad():
        grid = [(_grid_point(kernel, beta, points, centroids, targets, family != "soft", start_offsets), beta)
                for beta in BETA_GRID]
    (lam, _), beta = min(grid, key=lambda item: item[0][1])
    start["beta"], start["lam"] = beta, lam
    raw = torch.tensor([math.log(start[name]) if name in POSITIVE else start[name] for name in names],
                       dtype=torch.float64, requires_grad=True)
    free = [raw]
    if fit_offsets:
        moving = start_offsets.clone().requires_grad_(True)
        free.append(moving)
    else:
        moving = start_offsets

    def parameters_of(vector: Tensor) -> dict[str, Tensor]:
        return {name: vector[index].exp() if name in POSITIVE else vector[index] for index, name in enumerate(names)}

    wanted = targets - centroids
    normaliser = float((wanted * wanted).mean()) or 1.0
    optimiser = torch.optim.LBFGS(free, max_iter=max_iter, line_search_fn="strong_wolfe")

    def loss_of(vector: Tensor, shift: Tensor | None) -> Tensor:
        predicted = _step(family, kernel, parameters_of(vector), points, centroids, shift)
        return ((predicted - targets) ** 2).mean() / normaliser

    def closure() -> Tensor:
        optimiser.zero_grad()
        loss = loss_of(raw, moving)
        loss.backward()
        return loss

    initial = [value.detach().clone() for value in free]
    optimiser.step(closure)
    with torch.no_grad():
        final_loss = loss_of(raw, moving)
        start_loss = loss_of(initial[0], initial[1] if fit_offsets else moving)
        if not torch.isfinite(final_loss) or final_loss > start_loss:  # keep the grid start if L-BFGS lost it
            for value, first in zip(free, initial):
                value.copy_(first)
        fitted = {name: float(value) for name, value in parameters_of(raw).items()}
        slot_offsets = None
        if family in SLOT_FAMILIES:
            slot_offsets = SlotOffsets(moving.detach().clone()) if fit_offsets else offsets
        algorithm = DistilledAlgorithm(family, kernel, fitted, slot_offsets)
        r2 = r2_score(algorithm.step(points, centroids) - centroids, wanted)
    return DistilledFit(algorithm, r2, algorithm.n_parameters)


def score(algorithm: DistilledAlgorithm, points: Tensor, centroids: Tensor, targets: Tensor) -> float:
    """R^2 of the update: targets - centroids (b, k, d) explained by the algorithm's update from ``centroids``."""
    points, centroids = check_points_centroids(points, centroids)
    with torch.no_grad():
        return r2_score(algorithm.step(points, centroids) - centroids.double(), targets.double() - centroids.double())
