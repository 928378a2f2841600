"""Interchange interventions and distributed alignment search (DAS) against Lloyd's step as a causal model.

The high-level model is one Lloyd step (paper 2 Alg. 2): A, per point a_i = argmin_j ||x_i - c_j||^2, then M, per
centroid M_j = mean{x_i : a_i = j}. An *alignment* says where a variable lives in the transformer: a hook's
activation h (b, t, D) and a subspace of it, the span of an orthonormal basis B (D, m) or a coordinate slice. The
interchange intervention (Geiger et al., "Causal Abstractions of Neural Networks"; "Inducing Causal Structure for
Interpretable Neural Networks") runs the model on a *base* task with that subspace taken from a *source* run,

    h' = h_base + B B^T (h_source - h_base)        (a slice: h'[..., s] = h_source[..., s]),

and compares its output centroids with Lloyd's counterfactual: the base task with A (or M) set to its value on the
source task. For A the source assignment of point i is the nearest source centroid of source point i (points paired
by index) and M = the means of the *base* points under those labels; for M the counterfactual centroids are the
source's means. Later steps continue Lloyd's algorithm on the base points. The interchange-intervention accuracy
(IIA) is the share of base/source pairs whose intervened output centroids are within ``tol`` (max absolute
coordinate difference) of the counterfactual's. The construction of "Transformer Circuits Can Realize Clustering
Algorithms" (Thm 2.1; binary codes: "Leaner Transformers Can Easily Learn to Cluster", §2) places A in the scratch
slots d..d+e-1 of ``blocks.{l}.hook_points_resid_post`` (written by attn_xc) and M in features 0..d-1 of
``blocks.{l}.hook_centroids_resid_post``: both have IIA 1 (``known_alignment``).

DAS ("Finding Alignments Between Interpretable Causal Variables and Distributed Neural Representations", Geiger,
Wu, Potts, Icard, Goodman) learns the subspace: an orthogonal R = R_0 exp(S - S^T) (R_0 a seeded Haar-random
rotation, S trained from 0 by Adam; the model's weights stay frozen) and B = the first m columns of R (the first m
coordinates of R^T h are swapped), trained so the intervened output centroids match the counterfactual (a squared
error on a log scale, ``das``). It needs gradients through what runs after the hook. In the one-hot construction
that is attn_cx, normalised *linear* attention, differentiable at any gamma: gamma only sets how exact the source's
codes are, and a finite gamma = 1e6 is near-exact on unit-cube tasks (a runner-up centre weighs exp(-1e6 gap)). A
*softmax* centre update (binary codes, one-hot ``centroid_update="hardmax"``) at such a gamma is flat almost
everywhere in R; ``DASSettings.temper`` then trains through a tempered copy of it, sharpened as the subspace is found.
A start can end in a local optimum (seen: only some of the code bits found); ``DASSettings.restarts`` keeps the
start with the lowest training loss.

Identifiability: the source tasks must have *other points* than the base tasks (and other starts), as
``sample_pairs`` draws them. With shared points, a subspace that also swaps x coordinates of the points stream would
reproduce the counterfactual just as well (the swapped x are the base's own), so the alignment would not be
determined; with other points, swapping any x direction moves the means to the source's points, which the
counterfactual does not do. Within the scratch slots only the code differences matter: one-hot codes differ
within the sum-zero subspace (k - 1 dimensions), so an m = k - 1 basis inside the slots is as good as all k
(``DASResult.overlap`` measures the share of the learned subspace inside the known one, not equality).

Empty clusters: Lloyd's step is undefined there (each implementation has its own rule), so a pair on which the
counterfactual meets an empty cluster at any step (on the base's path, the source's path before the intervention, at
the intervened step or after it) is not scored: ``IIAResult.skipped`` counts them, and DAS leaves them out of its
loss. With ``centre_tasks`` models the source run is made in the base task's coordinates (its ``hook_anchor`` set to
the base's anchor), so a centroid taken from the source means the same point in the base run.

pyvene is not used: its wrappers target Hugging Face modules, not this two-stream ``HookedRootModule``, and installing
it would pull matplotlib, plotnine, statsmodels and ipywidgets for what is a few lines here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import (
    MAX_STEPS,
    MAX_TASKS,
    InvalidInput,
    InvalidInputType,
    check_count,
    check_float_tensor,
    check_points_centroids,
    check_positive_int,
)
from interp.algorithms import assign, cluster_sums, lloyd
from interp.instruments.interventions import retemper
from interp.model import KMeansTransformer
from interp.primitives import centre_tasks, task_anchor
from interp.result import ClusteringOutput
from interp.task_config import TaskConfig
from interp.tasks import init_centroids, sample_tasks

VARIABLES = ("assignment", "means")
# hooks (inside block l) on the stream each variable lives in: per point for A, per centroid for M
SITES = {
    "assignment": ("hook_points_resid_pre", "attn_xc.hook_out", "attn_xx.hook_out", "hook_points_resid_post",
                   "ffn_points.hook_out"),
    "means": ("hook_centroids_resid_pre", "attn_cx.hook_out", "attn_cc.hook_out", "hook_centroids_resid_post",
              "ffn_centroids.hook_out"),
}
KNOWN_SITES = {"assignment": "hook_points_resid_post", "means": "hook_centroids_resid_post"}
DEFAULT_TOL = 1e-6  # IIA's agreement: max |intervened - counterfactual| over a task's centroid coordinates
MAX_DAS_STEPS = 100_000  # Adam steps of one DAS start
MAX_RESTARTS = 1_000  # random starts of one DAS search
TEMPER_RISE = 0.7  # tempering reaches its final inverse temperature after this share of the Adam steps
FINAL_WINDOW = 10  # a start's final training loss: the mean of its last this many steps
TINY = 1e-30  # a task's variance is clamped here (all points equal)


# ----- alignments -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Alignment:
    """Where ``variable`` lives: the subspace of ``hook``'s activation (b, t, D) spanned by ``basis`` (D, m),
    orthonormal columns, or the coordinates ``features`` (a slice); exactly one of the two is given."""

    variable: str  # "assignment" (points stream, per point) or "means" (centroids stream, per centroid)
    hook: str  # blocks.{l}.<site>, a site of SITES[variable]
    basis: Tensor | None = None  # (D, m) orthonormal columns
    features: slice | None = None  # coordinates of the stream

    def __post_init__(self) -> None:
        _check_variable(self.variable)
        if not isinstance(self.hook, str):
            raise InvalidInputType(f"hook must be a str such as 'blocks.0.{KNOWN_SITES[self.variable]}', "
                                   f"got {type(self.hook).__name__}")
        _hook_step(self.hook, self.variable)
        if (self.basis is None) == (self.features is None):
            raise InvalidInput("an Alignment takes exactly one of basis (a (D, m) orthonormal tensor) and features "
                               "(a slice)")
        if self.features is not None and not isinstance(self.features, slice):
            raise InvalidInputType(f"features must be a slice, got {type(self.features).__name__}")
        if self.basis is not None:
            basis = check_float_tensor(self.basis, "basis", 2, "(D, m)")
            gram = basis.T.double() @ basis.double()  # (m, m)
            off = float((gram - torch.eye(gram.shape[0], dtype=torch.float64)).abs().max())
            limit = 100 * math.sqrt(torch.finfo(basis.dtype).eps)
            if basis.shape[1] > basis.shape[0] or off > limit:
                raise InvalidInput(f"basis must have orthonormal columns (D, m), m <= D: shape {tuple(basis.shape)}, "
                                   f"|B^T B - I| = {off:.3g} (allowed {limit:.1g})")

    @property
    def step(self) -> int:
        """The 0-based step (block) of ``hook``."""
        return _hook_step(self.hook, self.variable)

    @property
    def dim(self) -> int | None:
        """m, the subspace's dimension (None for a slice: it depends on the stream's width)."""
        return None if self.basis is None else int(self.basis.shape[1])


def _check_variable(variable: object) -> str:
    if variable not in VARIABLES:
        raise InvalidInput(f"variable must be one of {VARIABLES}, got {variable!r}")
    return variable  # type: ignore[return-value]


def _hook_step(hook: str, variable: str) -> int:
    """The block index of a hook ``blocks.{l}.<site>`` whose site is on ``variable``'s stream."""
    parts = hook.split(".", 2)
    if len(parts) != 3 or parts[0] != "blocks" or not parts[1].isdigit() or parts[2] not in SITES[variable]:
        raise InvalidInput(f"hook must be 'blocks.{{l}}.<site>' with a site of the {variable!r} stream "
                           f"{SITES[variable]}, got {hook!r}")
    return int(parts[1])


def _basis(alignment: Alignment, width: int, dtype: torch.dtype) -> Tensor:
    """The alignment's basis (width, m) in ``dtype``; a slice as columns of the identity."""
    if alignment.basis is not None:
        if alignment.basis.shape[0] != width:
            raise InvalidInput(f"basis has {alignment.basis.shape[0]} rows but the model's stream has width D={width}")
        return alignment.basis.to(dtype)
    columns = range(width)[alignment.features]
    if len(columns) == 0:
        raise InvalidInput(f"features {alignment.features} select no coordinate of the width-{width} stream")
    return torch.eye(width, dtype=dtype)[:, list(columns)]  # (width, m)


def known_alignment(model: KMeansTransformer, variable: str, step: int = 0) -> Alignment:
    """The constructions' alignment at step ``step``: A = the scratch slots d..d+e-1 of
    ``blocks.{step}.hook_points_resid_post`` (the code attn_xc writes; e = k one-hot, ceil(log2 k) binary), M = the
    features 0..d-1 of ``blocks.{step}.hook_centroids_resid_post`` (the new centroids)."""
    model = _check_model(model)
    variable = _check_variable(variable)
    step = check_positive_int(step, "step", minimum=0)
    config = model.config
    if variable == "means":
        return Alignment("means", f"blocks.{step}.{KNOWN_SITES['means']}", features=slice(0, config.d))
    if config.scratch_width == 0:
        raise InvalidInput(f"model has embedding={config.embedding!r}: its points stream has no scratch slots, so "
                           "there is no known alignment of the assignment")
    return Alignment("assignment", f"blocks.{step}.{KNOWN_SITES['assignment']}",
                     features=slice(config.d, config.d + config.scratch_width))


def subspace_overlap(basis: Tensor, known: Tensor) -> tuple[float, tuple[float, ...]]:
    """||K^T B||_F^2 / m in [0, 1] (the share of span B, m dimensions, inside span K: 1 iff span B is in span K; a
    random m-subspace of R^D scores about dim K / D) and the cosines of the principal angles between the two
    subspaces (singular values of K^T B, descending), for orthonormal bases B (D, m), K (D, m_K)."""
    cross = known.T.double() @ basis.double()  # (m_K, m)
    share = float((cross * cross).sum() / basis.shape[1])
    return min(1.0, share), tuple(float(c) for c in torch.linalg.svdvals(cross).clamp(max=1.0))


# ----- base / source pairs ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Pairs:
    """Base and source tasks, paired by index (task b with task b, point i with point i)."""

    base_points: Tensor  # (b, n, d)
    base_centroids: Tensor  # (b, k, d)
    source_points: Tensor  # (b, n, d)
    source_centroids: Tensor  # (b, k, d)

    def __post_init__(self) -> None:
        _check_pairs(self.base_points, self.base_centroids, self.source_points, self.source_centroids)

    def __len__(self) -> int:
        return int(self.base_points.shape[0])

    def subset(self, index: Tensor) -> Pairs:
        """The pairs ``index`` (a 1-D int64 tensor)."""
        return Pairs(self.base_points[index], self.base_centroids[index], self.source_points[index],
                     self.source_centroids[index])


def _check_pairs(base_points, base_centroids, source_points, source_centroids) -> tuple[Tensor, ...]:
    base_points, base_centroids = check_points_centroids(base_points, base_centroids)
    source_points = check_float_tensor(source_points, "source_points", 3, "(batch, n, d)")
    source_centroids = check_float_tensor(source_centroids, "source_centroids", 3, "(batch, k, d)")
    if source_points.shape != base_points.shape:
        raise InvalidInput(f"source_points must have the base points' shape {tuple(base_points.shape)} (pairs and "
                           f"points are matched by index), got {tuple(source_points.shape)}")
    if source_centroids.shape != base_centroids.shape:
        raise InvalidInput(f"source_centroids must have the base centroids' shape {tuple(base_centroids.shape)}, "
                           f"got {tuple(source_centroids.shape)}")
    if source_points.dtype != base_points.dtype or source_centroids.dtype != base_points.dtype:
        raise InvalidInputType(f"source_points and source_centroids must have the base points' dtype "
                               f"{base_points.dtype}, got {source_points.dtype} and {source_centroids.dtype}")
    return base_points, base_centroids, source_points, source_centroids


def sample_pairs(config: TaskConfig, count: int, seed: int, dtype: torch.dtype = torch.float64) -> Pairs:
    """``count`` base/source pairs of ``config`` tasks: base and source are independent draws (other points, other
    random-subset starts) from one seeded generator, as the identifiability of an alignment needs (module
    docstring)."""
    if not isinstance(config, TaskConfig):
        raise InvalidInputType(f"config must be a TaskConfig, got {type(config).__name__}")
    count = check_count(count, "count", MAX_TASKS)
    seed = check_positive_int(seed, "seed", minimum=0)
    generator = torch.Generator().manual_seed(seed)
    base = sample_tasks(config, count, generator, dtype=dtype).points  # (b, n, d)
    source = sample_tasks(config, count, generator, dtype=dtype).points  # (b, n, d)
    base_init = init_centroids(base, config.k, "random", generator)  # (b, k, d)
    source_init = init_centroids(source, config.k, "random", generator)  # (b, k, d)
    return Pairs(base, base_init, source, source_init)


# ----- the intervention ------------------------------------------------------------------------------------------
def _check_model(model: object) -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    return model


def _total_steps(step: int, steps: object) -> int:
    """The steps a run intervening at step ``step`` makes: ``steps``, default step + 1; at least that many."""
    if steps is None:
        return step + 1
    steps = check_count(steps, "steps", MAX_STEPS)
    if steps <= step:
        raise InvalidInput(f"steps={steps} does not reach the intervention at step {step} (needs steps >= {step + 1})")
    return steps


def _anchor_hooks(model: KMeansTransformer, base_points: Tensor, source_points: Tensor) -> list:
    """For a ``centre_tasks`` model: a hook running the source in the base task's coordinates (its anchor set to the
    base's), where the two anchors differ; else none."""
    if not model.config.centre_tasks:
        return []
    base_anchor, source_anchor = task_anchor(base_points), task_anchor(source_points)  # (b, 1, d)
    if torch.equal(base_anchor, source_anchor):
        return []
    return [("hook_anchor", lambda anchor, hook: base_anchor.to(anchor))]


@torch.no_grad()
def _source_activation(model: KMeansTransformer, base_points: Tensor, source_points: Tensor, source_centroids: Tensor,
                      name: str) -> Tensor:
    """The activation (b, t, D) at hook ``name`` on the source tasks, in the base tasks' coordinates (module
    docstring)."""
    step = int(name.split(".")[1])
    kept: dict[str, Tensor] = {}

    def keep(activation: Tensor, hook) -> None:
        kept["value"] = activation.detach().clone()

    hooks = _anchor_hooks(model, base_points, source_points) + [(name, keep)]
    model.run_with_hooks(source_points, source_centroids, steps=step + 1, fwd_hooks=hooks, slot_order="fixed")
    return kept["value"]


def _intervened_run(model: KMeansTransformer, base_points: Tensor, base_centroids: Tensor, source_value: Tensor,
                    name: str, basis: Tensor, steps: int, extra_hooks: list | None = None) -> ClusteringOutput:
    """The base run with h' = h + (h_source - h) B B^T at hook ``name``; differentiable in ``basis`` (D, m)."""

    def swap(activation: Tensor, hook) -> Tensor:
        local = basis.to(activation)  # (D, m)
        change = (source_value - activation) @ local  # (b, t, m): the subspace coordinates to replace
        return activation + change @ local.T  # (b, t, D)

    hooks = [(name, swap)] + (extra_hooks or [])
    return model.run_with_hooks(base_points, base_centroids, steps=steps, fwd_hooks=hooks, slot_order="fixed")


def interchange(model: KMeansTransformer, base_points: Tensor, base_centroids: Tensor, source_points: Tensor,
                source_centroids: Tensor, alignment: Alignment, steps: int | None = None) -> ClusteringOutput:
    """The model run on the base tasks (b, n, d) / (b, k, d) for ``steps`` steps (default: through the alignment's
    step, ``alignment.step + 1``) with the aligned subspace of ``alignment.hook`` taken from the source run."""
    model = _check_model(model)
    if not isinstance(alignment, Alignment):
        raise InvalidInputType(f"alignment must be an Alignment, got {type(alignment).__name__}")
    base_points, base_centroids, source_points, source_centroids = _check_pairs(
        base_points, base_centroids, source_points, source_centroids)
    steps = _total_steps(alignment.step, steps)
    width, dtype = model.config.d_model, base_points.dtype
    basis = _basis(alignment, width, dtype)  # (D, m); checks the width
    source_value = _source_activation(model, base_points, source_points, source_centroids, alignment.hook)
    if alignment.features is None:
        with torch.no_grad():
            return _intervened_run(model, base_points, base_centroids, source_value, alignment.hook, basis, steps)

    def copy(activation: Tensor, hook) -> Tensor:
        patched = activation.clone()
        patched[..., alignment.features] = source_value[..., alignment.features]  # exact copy of the coordinates
        return patched

    with torch.no_grad():
        return model.run_with_hooks(base_points, base_centroids, steps=steps, fwd_hooks=[(alignment.hook, copy)],
                                    slot_order="fixed")


# ----- the high-level model --------------------------------------------------------------------------------------
def _means(points: Tensor, labels: Tensor, k: int, previous: Tensor) -> tuple[Tensor, Tensor]:
    """Cluster means (b, k, d) of points (b, n, d) under labels (b, n), an empty cluster keeping ``previous`` (b, k, d)
    (such pairs are not scored), and the empty mask (b, k)."""
    sums, counts = cluster_sums(points, labels, k)  # (b, k, d), (b, k)
    empty = counts == 0  # (b, k)
    means = torch.where(empty[..., None], previous, sums / counts.clamp_min(1)[..., None])
    return means, empty


@torch.no_grad()
def counterfactual(variable: str, base_points: Tensor, base_centroids: Tensor, source_points: Tensor,
                   source_centroids: Tensor, step: int = 0, steps: int | None = None) -> ClusteringOutput:
    """Lloyd's algorithm on the base tasks for ``steps`` steps (default ``step + 1``) with ``variable`` set at step
    ``step`` to its value on the source tasks (module docstring), computed from ``interp.algorithms`` alone.

    ``empty_clusters[:, t]`` (b, T, k) flags the clusters left empty at step t on any path the counterfactual reads:
    the base's, before the intervention also the source's, and at step ``step`` the intervened step's (for A: the
    source labels); a pair with any flag is not scored by ``iia``."""
    variable = _check_variable(variable)
    base_points, base_centroids, source_points, source_centroids = _check_pairs(
        base_points, base_centroids, source_points, source_centroids)
    step = check_positive_int(step, "step", minimum=0)
    steps = _total_steps(step, steps)
    k = base_centroids.shape[1]
    base_path = lloyd(base_points, base_centroids, steps=step, empty="keep") if step else None
    source_path = lloyd(source_points, source_centroids, steps=step + 1, empty="keep")
    base_now = base_centroids if base_path is None else base_path.centroids  # (b, k, d): c_base^(step)
    trajectory = [base_centroids] + ([] if base_path is None else list(base_path.centroid_trajectory[:, 1:].unbind(1)))
    empties = [] if base_path is None else list((base_path.empty_clusters | source_path.empty_clusters[:, :step])
                                                .unbind(1))
    if variable == "means":
        new = source_path.centroids  # (b, k, d): M from the source
        empty = source_path.empty_clusters[:, step]  # (b, k)
    else:
        labels = source_path.assignment_trajectory[:, step]  # (b, n): A from the source, point i <- source point i
        centred_points, centred_now, anchor = centre_tasks(base_points, base_now)  # (b, n, d), (b, k, d), (b, 1, d)
        new, empty = _means(centred_points, labels, k, centred_now)
        new = new + anchor  # (b, k, d)
    trajectory.append(new)
    empties.append(empty)
    if steps > step + 1:
        after = lloyd(base_points, new, steps=steps - step - 1, empty="keep")
        trajectory.extend(after.centroid_trajectory[:, 1:].unbind(1))
        empties.extend(after.empty_clusters.unbind(1))
    centroids = trajectory[-1]  # (b, k, d)
    centred_points, centred_centroids, _ = centre_tasks(base_points, centroids)
    labels = torch.stack([assign(*centre_tasks(base_points, c)[:2]) for c in trajectory[:-1]], dim=1)  # (b, T, n)
    if variable == "assignment":
        labels[:, step] = source_path.assignment_trajectory[:, step]
    return ClusteringOutput(
        centroids=centroids,
        assignments=assign(centred_points, centred_centroids),  # (b, n)
        centroid_trajectory=torch.stack(trajectory, dim=1),  # (b, T + 1, k, d)
        assignment_trajectory=labels,
        empty_clusters=torch.stack(empties, dim=1),  # (b, T, k)
    )


# ----- interchange-intervention accuracy -------------------------------------------------------------------------
@dataclass(frozen=True)
class IIAResult:
    """Interchange-intervention accuracy over the scored pairs (those whose counterfactual meets no empty cluster)."""

    accuracy: float  # share of scored pairs with max |intervened - counterfactual| <= tol over the output centroids
    pairs: int  # scored pairs
    standard_error: float  # sqrt(accuracy (1 - accuracy) / pairs), binomial (0 when accuracy is 0 or 1)
    tol: float
    skipped: int  # pairs not scored: the counterfactual meets an empty cluster
    assignment_accuracy: float  # share of the scored pairs' base points whose label (nearest output centroid) agrees
    max_error: float  # largest |intervened - counterfactual| coordinate over the scored pairs


def _check_tol(tol: object) -> float:
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (math.isfinite(tol) and tol > 0):
        raise InvalidInput(f"tol must be a positive finite number, got {tol!r}")
    return float(tol)


def score(intervened: ClusteringOutput, target: ClusteringOutput, tol: float = DEFAULT_TOL) -> IIAResult:
    """IIA of an intervened output against its counterfactual (both on the same base tasks)."""
    tol = _check_tol(tol)
    scored = ~target.empty_clusters.flatten(1).any(dim=1)  # (b,)
    pairs = int(scored.sum())
    if pairs == 0:
        raise InvalidInput(f"every one of the {scored.numel()} pairs meets an empty cluster in its counterfactual: "
                           "nothing to score (use more points per cluster)")
    error = (intervened.centroids.detach().double() - target.centroids.double()).abs().flatten(1).amax(dim=1)  # (b,)
    error = torch.nan_to_num(error, nan=math.inf)[scored]  # (pairs,)
    accuracy = float((error <= tol).double().mean())
    labels = (intervened.assignments == target.assignments)[scored]  # (pairs, n)
    return IIAResult(accuracy=accuracy, pairs=pairs, standard_error=math.sqrt(accuracy * (1 - accuracy) / pairs),
                     tol=tol, skipped=int(scored.numel()) - pairs, assignment_accuracy=float(labels.double().mean()),
                     max_error=float(error.max()))


def iia(model: KMeansTransformer, base_points: Tensor, base_centroids: Tensor, source_points: Tensor,
        source_centroids: Tensor, alignment: Alignment, steps: int | None = None,
        tol: float = DEFAULT_TOL) -> IIAResult:
    """Interchange-intervention accuracy of ``alignment``: ``interchange`` against ``counterfactual`` of the
    alignment's variable at its step, over ``steps`` steps (default ``alignment.step + 1``)."""
    tol = _check_tol(tol)
    intervened = interchange(model, base_points, base_centroids, source_points, source_centroids, alignment, steps)
    target = counterfactual(alignment.variable, base_points, base_centroids, source_points, source_centroids,
                            alignment.step, _total_steps(alignment.step, steps))
    return score(intervened, target, tol)


# ----- distributed alignment search ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DASSettings:
    """One DAS search: a subspace of ``dim`` = m dimensions (1 <= m <= D, checked against the model); per start,
    ``steps`` Adam steps of learning rate ``lr`` (cosine-decayed to 0) on ``batch`` pairs drawn without replacement
    each step; ``restarts`` random starts, the one with the lowest final training loss kept; ``seed`` fixes the
    starts and the batches; ``loss_scale`` sets where the loss turns from quadratic to logarithmic (``das``);
    ``temper`` = (from, to) raises the inverse temperature of the softmax attentions after the hook geometrically
    from ``from`` to ``to`` (at most their own gamma) over the first 70 % of the steps (None: the model as it is);
    the held-out IIA is scored at ``tol``."""

    dim: int
    steps: int = 600
    lr: float = 0.05
    seed: int = 0
    batch: int = 32
    restarts: int = 1
    tol: float = 1e-3
    loss_scale: float = 0.1
    temper: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        check_positive_int(self.dim, "dim")
        check_count(self.steps, "steps", MAX_DAS_STEPS)
        check_count(self.batch, "batch", MAX_TASKS)
        check_count(self.restarts, "restarts", MAX_RESTARTS)
        check_positive_int(self.seed, "seed", minimum=0)
        _check_positive_number(self.lr, "lr")
        _check_positive_number(self.loss_scale, "loss_scale")
        _check_tol(self.tol)
        if self.temper is not None:
            if not isinstance(self.temper, tuple) or len(self.temper) != 2:
                raise InvalidInput(f"temper must be None or a pair (from, to) of inverse temperatures, "
                                   f"got {self.temper!r}")
            low, high = (_check_positive_number(value, "temper") for value in self.temper)
            if low > high:
                raise InvalidInput(f"temper must rise: from {low:g} > to {high:g}")


def _check_positive_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise InvalidInput(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True, eq=False)
class DASResult:
    """A learned alignment and how well it and its random start do on held-out pairs."""

    alignment: Alignment  # basis (D, m): the first m columns of the learned rotation
    iia: IIAResult  # on the held-out pairs, at settings.tol
    overlap: float  # subspace_overlap with the known alignment, [0, 1] (nan where there is none)
    cosines: tuple[float, ...]  # cosines of the principal angles to the known subspace, descending
    initial_iia: IIAResult  # the kept start's random basis (R_0's first m columns) on the held-out pairs, a control
    initial_overlap: float
    losses: tuple[float, ...]  # the kept start's training loss at each Adam step
    final_losses: tuple[float, ...]  # every start's final training loss (mean of its last 10 steps)


def random_rotation(width: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """A Haar-random orthogonal (width, width) matrix: Q of the QR of a Gaussian matrix, columns signed by diag R."""
    gaussian = torch.randn((width, width), generator=generator, dtype=torch.float64)  # (D, D)
    q, r = torch.linalg.qr(gaussian)
    return (q * torch.sign(torch.diagonal(r))).to(dtype)  # (D, D)


def _rotation_basis(start: Tensor, skew: Tensor, dim: int) -> Tensor:
    """The first ``dim`` columns (D, m) of R = R_0 exp(S - S^T), orthogonal for any S (D, D)."""
    return (start @ torch.linalg.matrix_exp(skew - skew.T))[:, :dim]


# the attentions of the hook's own block that read a site's value (directly or through a later part of the block)
_READERS = {"hook_points_resid_pre": ("attn_xc", "attn_xx", "attn_cx"),
            "hook_centroids_resid_pre": ("attn_xc", "attn_cx", "attn_cc")}
_READERS.update({site: ("attn_cx",) for site in SITES["assignment"] if site != "hook_points_resid_pre"})
_READERS.update({site: () for site in SITES["means"] if site != "hook_centroids_resid_pre"})
TEMPERED_NORMALISERS = ("softmax", "sparsemax")


def _downstream(model: KMeansTransformer, hook: str, step: int, steps: int) -> list[tuple[str, float, list[int]]]:
    """The softmax (sparsemax) attentions at finite gamma that run after ``hook``: (name, gamma, 0-based steps)."""
    site = hook.split(".", 2)[2]
    found = []
    for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
        config = getattr(model.config, name)
        if config.identity or config.normaliser not in TEMPERED_NORMALISERS or math.isinf(config.gamma):
            continue
        at = ([step] if name in _READERS[site] else []) + list(range(step + 1, steps))
        if at:
            found.append((name, float(config.gamma), at))
    return found


def _temper_hooks(model: KMeansTransformer, tempered: list, settings: DASSettings, adam_step: int) -> list:
    """retemper hooks setting each tempered attention's inverse temperature at Adam step ``adam_step`` to
    min(gamma, from (to / from)^r), r rising linearly from 0 to 1 over the first 70 % of the steps."""
    if settings.temper is None:
        return []
    low, high = settings.temper
    rise = min(1.0, adam_step / max(1.0, TEMPER_RISE * settings.steps))
    target = low * (high / low) ** rise
    hooks = []
    for name, gamma, at in tempered:
        hooks.extend(retemper(model, name, min(1.0, target / gamma), steps=at))
    return hooks


def das(model: KMeansTransformer, variable: str, train: Pairs, held_out: Pairs, settings: DASSettings,
        step: int = 0, steps: int | None = None, hook: str | None = None) -> DASResult:
    """Learn an m-dimensional alignment of ``variable`` at ``hook`` (default the known site,
    ``blocks.{step}.hook_points_resid_post`` / ``hook_centroids_resid_post``) from Haar-random rotations R_0
    (module docstring); runs make ``steps`` steps (default ``step + 1``). Only S trains; gradients are taken with
    ``torch.autograd.grad``, so nothing of the model changes.

    Loss, per training pair b: e_b = the mean squared error of the intervened output centroids against the
    counterfactual, v_b = the base task's per-coordinate variance; loss = mean_b log(1 + e_b / (loss_scale v_b)).
    Near the solution this is the MSE (scaled); far from it a pair's gradient is bounded. A plain MSE fails from a
    random start on the one-hot construction: there the centre update is normalised *linear* attention, whose
    normaliser sum_i y'_ij nearly vanishes on a few pairs when a random subspace is swapped, and those pairs'
    errors steer the rotation (docs/causal_abstraction.md).

    ``settings.temper``: a centre update that is a softmax at a near-exact gamma (binary codes, one-hot with
    ``centroid_update="hardmax"``) is flat almost everywhere in the rotation; tempering trains through a smoother
    copy of the attentions after the hook (``interventions.retemper``), sharpened as the subspace is found. The
    held-out IIA is always measured on the model as it is."""
    model = _check_model(model)
    variable = _check_variable(variable)
    for value, name in ((train, "train"), (held_out, "held_out")):
        if not isinstance(value, Pairs):
            raise InvalidInputType(f"{name} must be Pairs, got {type(value).__name__}")
    if not isinstance(settings, DASSettings):
        raise InvalidInputType(f"settings must be DASSettings, got {type(settings).__name__}")
    step = check_positive_int(step, "step", minimum=0)
    hook = f"blocks.{step}.{KNOWN_SITES[variable]}" if hook is None else hook
    if not isinstance(hook, str) or _hook_step(hook, variable) != step:
        raise InvalidInput(f"hook must be a hook of block {step} (step={step}), got {hook!r}")
    width, dtype = model.config.d_model, train.base_points.dtype
    if settings.dim > width:
        raise InvalidInput(f"dim must be at most the stream width D={width}, got {settings.dim}")
    if settings.batch > len(train):
        raise InvalidInput(f"batch={settings.batch} exceeds the {len(train)} training pairs")
    steps = _total_steps(step, steps)
    tempered = _downstream(model, hook, step, steps)
    if settings.temper is not None and not tempered:
        raise InvalidInput(f"temper: no softmax attention at a finite gamma runs after {hook!r} in this model (a "
                           "linear-attention centre update has no temperature); pass temper=None")

    source_value = _source_activation(model, train.base_points, train.source_points, train.source_centroids, hook)
    target = counterfactual(variable, train.base_points, train.base_centroids, train.source_points,
                            train.source_centroids, step, steps)
    scored = torch.nonzero(~target.empty_clusters.flatten(1).any(dim=1)).flatten()  # (pairs,) indices
    if scored.numel() < settings.batch:
        raise InvalidInput(f"batch={settings.batch} exceeds the {scored.numel()} training pairs whose counterfactual "
                           "meets no empty cluster")
    spread = settings.loss_scale * train.base_points.var(dim=1).mean(dim=1).clamp_min(TINY)  # (b,)
    generator = torch.Generator().manual_seed(settings.seed)
    runs = []
    for _ in range(settings.restarts):
        start = random_rotation(width, generator, dtype)  # (D, D): R_0
        skew = torch.zeros((width, width), dtype=dtype, requires_grad=True)  # (D, D): S, trained from 0
        optimiser = torch.optim.Adam([skew], lr=settings.lr)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, settings.steps)  # lr -> 0 at the end
        losses = []
        for adam_step in range(settings.steps):
            index = scored[torch.randperm(scored.numel(), generator=generator)[: settings.batch]]  # (batch,)
            hooks = _temper_hooks(model, tempered, settings, adam_step)
            with torch.enable_grad():
                basis = _rotation_basis(start, skew, settings.dim)  # (D, m)
                out = _intervened_run(model, train.base_points[index], train.base_centroids[index],
                                      source_value[index], hook, basis, steps, hooks)
                error = ((out.centroids - target.centroids[index]) ** 2).flatten(1).mean(dim=1)  # (batch,)
                loss = torch.log1p(error / spread[index]).mean()
                (gradient,) = torch.autograd.grad(loss, [skew])
            optimiser.zero_grad(set_to_none=True)
            skew.grad = gradient
            optimiser.step()
            schedule.step()
            losses.append(float(loss.detach()))
        final = sum(losses[-FINAL_WINDOW:]) / len(losses[-FINAL_WINDOW:])
        runs.append((final if math.isfinite(final) else math.inf, start, skew.detach(), tuple(losses)))
    _, start, skew, losses = min(runs, key=lambda run: run[0])
    with torch.no_grad():
        learned = torch.linalg.qr(_rotation_basis(start, skew, settings.dim).double())[0].to(dtype)  # (D, m)
    alignment = Alignment(variable, hook, basis=learned)
    initial = Alignment(variable, hook, basis=start[:, : settings.dim].contiguous())
    held = (held_out.base_points, held_out.base_centroids, held_out.source_points, held_out.source_centroids)
    known = _known_basis(model, variable, step, width, dtype)
    overlap, cosines = subspace_overlap(learned, known) if known is not None else (math.nan, ())
    initial_overlap = subspace_overlap(initial.basis, known)[0] if known is not None else math.nan
    return DASResult(
        alignment=alignment,
        iia=iia(model, *held, alignment, steps, settings.tol),
        overlap=overlap,
        cosines=cosines,
        initial_iia=iia(model, *held, initial, steps, settings.tol),
        initial_overlap=initial_overlap,
        losses=losses,
        final_losses=tuple(run[0] for run in runs),
    )


def _known_basis(model: KMeansTransformer, variable: str, step: int, width: int, dtype: torch.dtype) -> Tensor | None:
    """The known alignment's basis (D, m_K), or None where the model has none (no scratch slots)."""
    try:
        return _basis(known_alignment(model, variable, step), width, dtype)
    except InvalidInput:
        return None
