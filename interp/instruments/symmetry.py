"""Slot-symmetric and slot-specific parts of a one-step update, and what reads slot identity.

A step maps points X (b, n, d) and centroids C (b, k, d) to C' = f(X, C). For a permutation pi of the k slots,
(C_pi)_j = C_pi(j); the step run on C_pi and mapped back is

    g_pi(X, C)_pi(j) = f(X, C_pi)_j.

An algorithm that ignores slot order (Lloyd, soft k-means, the exact constructions, a model without codes) has
g_pi = f for every pi. The *symmetric part* is the average over all k! permutations, S = E_pi g_pi, itself exactly
equivariant; the *slot-specific part* is f - S. For large k the average is estimated from M random permutations,
S_M; its Monte Carlo error is E||S_M - S||^2 = V / M, V = E_pi ||g_pi - S||^2, estimated by the spread of the M
outputs (``SymmetricSplit.monte_carlo_error``). Updates are g - C.

What reads slot identity:

* ``specific_by_path``: the path decomposition (``interp.instruments.decompose``) of every permuted run, mapped back
  and averaged, gives each path's symmetric part; the path's slot-specific part is its value minus that, and these
  parts sum to the slot-specific part of the update.
* ``symmetrise_blocks``: a copy of the model with chosen weight blocks replaced by their average over permutations
  of the code features: for a one-hot model, with E the code features and R = diag(I, P) permuting them, W ->
  avg_P R W R^T, i.e. code -> code block a I + b 11^T (a, b: the mean diagonal and off-diagonal entries), code ->
  data block with equal columns, data -> code block with equal rows, code biases equal. A one-hot model with every
  block projected is exactly equivariant. For a binary model the same formulas treat the bits as exchangeable,
  which does not make the model slot-equivariant (a slot permutation does not permute bits).
* ``slot_blind``: a copy of the model in which one attention matrix reads every token's code as the mean slot code
  (the code columns' contribution at the mean code moved into the bias), so that it gives every slot the same output.
* ``slot_mass``: attn_xc's attention mass and arg-max share per slot, averaged over tasks: 1/k each for an
  equivariant model on tasks with random initial centroids.

Where it lives, on one example: ``crowded_pair`` takes the two centroids closest to each other that start in one true
component (a crowded pair, where the slot-specific part is largest), runs the step with the slots as given and with the
pair's two slots swapped, and returns the moves, their symmetric and slot-specific parts, attn_xc's weights on the
component's points and a 2-D view (``interp.report.plots.crowded_pair_figure`` draws it). The task geometry it uses
(``component_means``, ``nearest_other``, ``component_of``, ``swap_slots``) is shared with
analyses/studies/slots/measure.py.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_generator, check_points_centroids, check_positive_int
from interp.algorithms import log_objective
from interp.instruments.decompose import decompose_update, r2_score, variance_share
from interp.model import KMeansTransformer

StepFunction = Callable[[Tensor, Tensor], Tensor]  # (points (b, n, d), centroids (b, k, d)) -> new centroids (b, k, d)
ALL_PERMUTATIONS_UP_TO = 8  # k! permutations enumerated only for k <= 8 (40,320)
NEGLIGIBLE = 1e-12  # a slot-specific variance below this fraction of the symmetric one is rounding: no path shares
MATRICES = ("W_Q", "W_K", "W_V")
BLOCKS = ("code->code", "code->data", "data->code")
ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")


@dataclass(frozen=True)
class SymmetricSplit:
    """A one-step update split into its slot-symmetric part and the slot-specific remainder (module docstring)."""

    update: Tensor  # (b, k, d): f(X, C) - C
    symmetric: Tensor  # (b, k, d): S_M - C
    specific: Tensor  # (b, k, d): update - symmetric
    n_permutations: int  # M (k! when every permutation was used)
    exhaustive: bool  # True when the M permutations are all k! of them (S_M = S exactly)
    r2_symmetric: float  # R^2 of the update explained by the symmetric part
    r2_symmetric_corrected: float  # the same with the Monte Carlo error of S_M removed (= r2_symmetric if exhaustive)
    symmetric_share: float  # Cov(symmetric, update) / Var(update)
    specific_share: float  # Cov(specific, update) / Var(update) = 1 - symmetric_share
    permutation_spread: float  # V / Var(update): the slot-specific variance, estimated across permutations
    monte_carlo_error: float  # V / (M Var(update)): expected squared error of S_M (0 if exhaustive)


@dataclass(frozen=True)
class SlotAveragedRun:
    """The model averaged over slot permutations at every step (``slot_averaged_run``)."""

    trajectory: Tensor  # (b, T + 1, k, d): initial centroids, then the averaged output of every step
    permutation_spread: Tensor  # (T,): V / Var(step's update) at each step (the slot-specific share of the step)
    n_permutations: int  # permutations per step (model forwards per step)


# ----- permutations ----------------------------------------------------------------------------------------------


def slot_permutations(k: int, count: int | None = None, generator: torch.Generator | int = 0) -> Tensor:
    """Slot permutations (M, k) int64: all k! in lexicographic order when ``count`` is None (k <= 8), else ``count``
    uniformly random ones (independent draws) from ``generator``."""
    check_positive_int(k, "k")
    if count is None:
        if k > ALL_PERMUTATIONS_UP_TO:
            raise InvalidInput(f"all {math.factorial(k)} permutations of k={k} slots are too many; pass a count")
        return torch.tensor(list(itertools.permutations(range(k))), dtype=torch.int64).reshape(-1, k)
    check_positive_int(count, "count")
    generator = check_generator(generator, allow_none=False)
    return torch.stack([torch.randperm(k, generator=generator) for _ in range(count)])  # (M, k)


def model_step(model: KMeansTransformer, generator: torch.Generator | int | None = None) -> StepFunction:
    """One step of ``model`` in eval mode as a function (points, centroids) -> new centroids (b, k, d)."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")

    @torch.no_grad()
    def step(points: Tensor, centroids: Tensor) -> Tensor:
        was_training = model.training
        model.eval()
        try:
            return model(points, centroids, steps=1, generator=generator, slot_order="fixed").centroids
        finally:
            model.train(was_training)

    return step


def unpermute(values: Tensor, permutation: Tensor) -> Tensor:
    """Map per-slot values (b, k, ...) of a run on C_pi back to the original slots: out[:, pi(j)] = values[:, j]."""
    out = torch.empty_like(values)
    out[:, permutation] = values
    return out


@torch.no_grad()
def permuted_outputs(step: StepFunction, points: Tensor, centroids: Tensor, permutations: Tensor) -> Tensor:
    """g_pi(X, C) for every permutation (M, k): the step run on C_pi and mapped back, (M, b, k, d)."""
    points, centroids = check_points_centroids(points, centroids)
    _check_permutations(permutations, centroids.shape[1])
    return torch.stack([unpermute(step(points, centroids[:, permutation]), permutation)
                        for permutation in permutations])


def _check_permutations(permutations: object, k: int) -> Tensor:
    if not isinstance(permutations, Tensor) or permutations.dim() != 2 or permutations.shape[1] != k:
        raise InvalidInput(f"permutations must be an (M, {k}) tensor of slot permutations")
    if not bool((permutations.sort(dim=1).values == torch.arange(k)).all()):
        raise InvalidInput("every row of permutations must be a permutation of 0..k-1")
    return permutations


def _is_exhaustive(permutations: Tensor) -> bool:
    """True when the rows are all k! permutations, each once."""
    k = permutations.shape[1]
    if k > ALL_PERMUTATIONS_UP_TO or len(permutations) != math.factorial(k):
        return False
    return len({tuple(row) for row in permutations.tolist()}) == len(permutations)


def split_from_outputs(update: Tensor, outputs: Tensor, centroids: Tensor, exhaustive: bool) -> SymmetricSplit:
    """The ``SymmetricSplit`` of ``update`` (b, k, d) given the mapped-back outputs g_pi (M, b, k, d) from
    ``centroids`` (b, k, d)."""
    update = update.double()
    outputs = outputs.double() - centroids.double()  # (M, b, k, d): mapped-back updates
    count = outputs.shape[0]
    symmetric = outputs.mean(0)  # (b, k, d)
    total = float(((update - update.mean()) ** 2).sum())
    squares = float(((outputs - symmetric) ** 2).sum())
    if exhaustive:  # S_M = S: the spread is the exact mean over the group, no Monte Carlo error
        spread, error = squares / count / total, 0.0
    else:  # unbiased spread; E||update - S_M||^2 = ||update - S||^2 + V / M
        spread = squares / (count - 1) / total if count > 1 else math.nan
        error = spread / count
    r2 = r2_score(symmetric, update)
    share = variance_share(symmetric, update)
    return SymmetricSplit(update=update, symmetric=symmetric, specific=update - symmetric, n_permutations=count,
                          exhaustive=exhaustive, r2_symmetric=r2, r2_symmetric_corrected=r2 + error,
                          symmetric_share=share, specific_share=1 - share, permutation_spread=spread,
                          monte_carlo_error=error)


@torch.no_grad()
def symmetric_split(model: KMeansTransformer | StepFunction, points: Tensor, centroids: Tensor,
                    n_permutations: int | None = 64, generator: torch.Generator | int = 0) -> SymmetricSplit:
    """Split the one-step update of ``model`` (a KMeansTransformer, run in eval mode, or a step function) from
    ``centroids`` (b, k, d) into its symmetric part, averaged over ``n_permutations`` random slot permutations (None:
    all k!), and the slot-specific remainder."""
    step = model_step(model) if isinstance(model, KMeansTransformer) else model
    points, centroids = check_points_centroids(points, centroids)
    permutations = slot_permutations(centroids.shape[1], n_permutations, generator)
    outputs = permuted_outputs(step, points, centroids, permutations)  # (M, b, k, d)
    update = step(points, centroids) - centroids
    return split_from_outputs(update, outputs, centroids, _is_exhaustive(permutations))


@torch.no_grad()
def symmetric_convergence(model: KMeansTransformer | StepFunction, points: Tensor, centroids: Tensor,
                          counts: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                          generator: torch.Generator | int = 0) -> list[dict]:
    """How the symmetric-part estimate settles with the number M of permutations (``convergence_from_outputs`` on
    one sequence of max(counts) random permutations)."""
    step = model_step(model) if isinstance(model, KMeansTransformer) else model
    points, centroids = check_points_centroids(points, centroids)
    counts = sorted({check_positive_int(count, "counts") for count in counts})
    permutations = slot_permutations(centroids.shape[1], counts[-1], generator)
    outputs = permuted_outputs(step, points, centroids, permutations)  # (M, b, k, d)
    return convergence_from_outputs(step(points, centroids) - centroids, outputs, centroids, counts)


def convergence_from_outputs(update: Tensor, outputs: Tensor, centroids: Tensor, counts: Sequence[int]) -> list[dict]:
    """For each M in ``counts`` (at most len(outputs)), the split from the first M mapped-back outputs (M, b, k, d):
    rows {n_permutations, r2_symmetric, r2_symmetric_corrected, monte_carlo_error, distance_to_largest},
    distance_to_largest = ||S_M - S_all||^2 / ||update - mean||^2 (a fraction of the update's variance)."""
    update = update.double()
    total = float(((update - update.mean()) ** 2).sum())
    largest = outputs.double().mean(0)  # (b, k, d)
    rows = []
    for count in counts:
        if not 1 <= count <= len(outputs):
            raise InvalidInput(f"counts must lie in 1..{len(outputs)}, got {count}")
        split = split_from_outputs(update, outputs[:count], centroids, exhaustive=False)
        distance = float(((outputs[:count].double().mean(0) - largest) ** 2).sum()) / total
        rows.append({"n_permutations": count, "r2_symmetric": split.r2_symmetric,
                     "r2_symmetric_corrected": split.r2_symmetric_corrected,
                     "monte_carlo_error": split.monte_carlo_error, "distance_to_largest": distance})
    return rows


@torch.no_grad()
def slot_averaged_run(model: KMeansTransformer | StepFunction, points: Tensor, centroids: Tensor, steps: int = 20,
                      n_permutations: int = 8, generator: torch.Generator | int = 0) -> SlotAveragedRun:
    """Iterate the symmetric part: at every step, the model's output averaged over ``n_permutations`` fresh random slot
    permutations (``n_permutations`` forwards per step, so that many times the model's compute)."""
    step = model_step(model) if isinstance(model, KMeansTransformer) else model
    points, centroids = check_points_centroids(points, centroids)
    check_positive_int(steps, "steps")
    check_positive_int(n_permutations, "n_permutations")
    generator = check_generator(generator)
    current, trajectory, spreads = centroids, [centroids], []
    for _ in range(steps):
        permutations = slot_permutations(centroids.shape[1], n_permutations, generator)
        outputs = permuted_outputs(step, points, current, permutations)  # (M, b, k, d)
        averaged = outputs.mean(0)
        update = averaged.double() - current.double()
        spread = ((outputs.double() - averaged.double()) ** 2).sum() / max(n_permutations - 1, 1)
        spreads.append(float(spread / ((update - update.mean()) ** 2).sum()) if n_permutations > 1 else math.nan)
        current = averaged
        trajectory.append(current)
    return SlotAveragedRun(torch.stack(trajectory, dim=1), torch.tensor(spreads, dtype=torch.float64),
                           n_permutations)


# ----- which paths carry the slot-specific part ----------------------------------------------------------------------


@torch.no_grad()
def specific_by_path(model: KMeansTransformer, points: Tensor, centroids: Tensor, permutations: Tensor) -> dict:
    """Each path of the update decomposition split into symmetric and slot-specific parts (module docstring).

    Returns {"symmetric": {path: (b, k, d)}, "specific": {path: (b, k, d)}, "symmetric_shares": {path: share of the
    symmetric part's variance}, "specific_shares": {path: share of the slot-specific part's variance; NaN when that
    part is rounding only}} for the coarse paths and, under the same keys prefixed "fine_", for the paths split by the
    input feature block they read."""
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    _check_permutations(permutations, centroids.shape[1])
    raw = decompose_update(model, points, centroids)
    sums = {name: torch.zeros_like(part) for name, part in {**raw.parts, **_fine(raw)}.items()}
    for permutation in permutations:
        run = decompose_update(model, points, centroids[:, permutation])
        for name, part in {**run.parts, **_fine(run)}.items():
            sums[name] += unpermute(part, permutation)
    count = len(permutations)
    result = {}
    for prefix, names in (("", raw.parts), ("fine_", _fine(raw))):
        symmetric = {name: sums[name] / count for name in names}
        specific = {name: ({**raw.parts, **_fine(raw)})[name] - symmetric[name] for name in names}
        symmetric_total, specific_total = sum(symmetric.values()), sum(specific.values())
        negligible = float(((specific_total - specific_total.mean()) ** 2).sum()) <= NEGLIGIBLE * float(
            ((symmetric_total - symmetric_total.mean()) ** 2).sum())  # an equivariant model: shares of rounding
        result[prefix + "symmetric"] = symmetric
        result[prefix + "specific"] = specific
        result[prefix + "symmetric_shares"] = {name: variance_share(part, symmetric_total)
                                               for name, part in symmetric.items()}
        result[prefix + "specific_shares"] = {name: math.nan if negligible else variance_share(part, specific_total)
                                              for name, part in specific.items()}
    return result


def _fine(decomposition) -> dict[str, Tensor]:
    """The fine parts that, together, sum to the update: attn_cx's and attn_cc's source-by-block parts and biases."""
    return dict(decomposition.fine_parts) | ({"ffn_centroids": decomposition.parts["ffn_centroids"]}
                                             if "ffn_centroids" in decomposition.parts else {})


# ----- symmetrising weight blocks -------------------------------------------------------------------------------------


def code_blocks(model: KMeansTransformer) -> list[str]:
    """Names of the weight blocks that touch the code features: "{attention}.{W_Q|W_K|W_V}.{code->code|code->data|
    data->code}" and "{attention}.{b_Q|b_K|b_V}.code" (data: every non-code feature, the norm slot included)."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    if model.config.scratch_width == 0:
        return []
    names = [f"{attention}.{matrix}.{block}" for attention in ATTENTIONS for matrix in MATRICES for block in BLOCKS]
    names += [f"{attention}.{bias}.code" for attention in ATTENTIONS for bias in ("b_Q", "b_K", "b_V")
              if getattr(model.config, attention).bias]
    return names


def _average_block(weight: Tensor, block: str, code: slice, rest: Tensor) -> None:
    """In place: replace one block of ``weight`` (D, D) by its average over permutations of the code features."""
    if block == "code->code":
        square = weight[code, code]  # (e, e)
        e = square.shape[0]
        if e < 2:
            return
        diagonal = square.diagonal().mean()
        off_diagonal = (square.sum() - square.diagonal().sum()) / (e * e - e)
        weight[code, code] = off_diagonal + (diagonal - off_diagonal) * torch.eye(e, dtype=weight.dtype)
    elif block == "code->data":  # rows: non-code outputs, columns: code inputs -> equal columns
        weight[rest[:, None], torch.arange(code.start, code.stop)[None, :]] = \
            weight[rest][:, code].mean(dim=1, keepdim=True)
    else:  # data->code: rows: code outputs, columns: non-code inputs -> equal rows
        weight[torch.arange(code.start, code.stop)[:, None], rest[None, :]] = \
            weight[code][:, rest].mean(dim=0, keepdim=True)


def symmetrise_blocks(model: KMeansTransformer, blocks: Sequence[str]) -> KMeansTransformer:
    """A copy of ``model`` with each named block (``code_blocks``) replaced by its average over permutations of the
    code features (module docstring); "all" names every block."""
    names = code_blocks(model)
    blocks = names if list(blocks) == ["all"] else list(blocks)
    unknown = [name for name in blocks if name not in names]
    if unknown:
        raise InvalidInput(f"unknown code blocks {unknown}; the model has {names[:3]}... (see code_blocks)")
    config = model.config
    code = slice(config.d, config.d + config.scratch_width)
    rest = torch.tensor([i for i in range(config.d_model) if not code.start <= i < code.stop], dtype=torch.int64)
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for name in blocks:
            attention, matrix, block = name.split(".")
            for weights in copied.layers:
                tensor = getattr(getattr(weights, attention), matrix)
                if matrix.startswith("b_"):
                    tensor[code] = tensor[code].mean()
                else:
                    _average_block(tensor, block, code, rest)
    return copied


def slot_blind(model: KMeansTransformer, attention: str = "attn_xc", matrix: str = "W_K") -> KMeansTransformer:
    """A copy of ``model`` whose ``attention``'s ``matrix`` reads every token's code as the mean code of the k slots.

    With E the code features (the scratch slots that hold slot identity, paper 1 Thm 2.1, paper 2 Thm 2.1) and
    e_bar = (1/k) sum_j e_j the mean slot code, W z + b becomes W_rest z_rest + (b + W_E e_bar): the code columns'
    contribution at the mean code moves into the bias and the columns become 0. On the centroid stream, whose code
    features are the slot codes, the matrix then gives every slot the same output, so what it reads cannot tell the
    slots apart (the slot identity that ``analyses/studies/slots/measure.py`` H5 tests).

    Parameters
    ----------
    model : KMeansTransformer
        A model with code features (``scratch_width`` > 0) and slot-specific weights (not ``slot_equivariant``).
    attention : {"attn_xc", "attn_xx", "attn_cx", "attn_cc"}
        The attention whose matrix is made slot-blind, in every layer.
    matrix : {"W_Q", "W_K", "W_V"}
        The matrix; its bias (b_Q, b_K, b_V) takes the mean code's contribution.

    Returns
    -------
    KMeansTransformer
        The copy; ``model`` is unchanged.

    Raises
    ------
    InvalidInputType
        When ``model`` is not a ``KMeansTransformer``.
    InvalidInput
        For a model without code features or with slot-tied weights, an unknown ``attention`` or ``matrix``, or an
        attention without a bias where the mean code's contribution is not 0.
    """
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    config = model.config
    if config.scratch_width == 0:
        raise InvalidInput("the model has no code features: it cannot read slot identity")
    if config.slot_equivariant:
        raise InvalidInput("slot-tied weights are slot-equivariant already")
    if matrix not in ("W_Q", "W_K", "W_V"):
        raise InvalidInput(f"matrix must be W_Q, W_K or W_V, got {matrix!r}")
    if attention not in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
        raise InvalidInput(f"attention must be attn_xc, attn_xx, attn_cx or attn_cc, got {attention!r}")
    code = slice(config.d, config.d + config.scratch_width)
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for weights in copied.layers:
            block = getattr(weights, attention)
            weight, bias = getattr(block, matrix), getattr(block, "b_" + matrix[-1])
            contribution = weight[:, code] @ copied.codes.to(weight).mean(0)  # (D,): the columns at the mean code
            if bias is not None:
                bias += contribution
            elif bool((contribution != 0).any()):
                raise InvalidInput(f"{attention} has no bias to hold the mean code's contribution")
            weight[:, code] = 0
    return copied


@torch.no_grad()
def block_symmetrisation(model: KMeansTransformer, points: Tensor, centroids: Tensor, groups: dict[str, Sequence[str]],
                         permutations: Tensor) -> list[dict]:
    """For each named group of blocks: how much slot-specific variance the model keeps when the group is symmetrised
    (``symmetrise_blocks``), with the same permutations throughout. Rows {group, blocks, specific_remaining (the
    spread V of the permuted outputs, the slot-specific variance, relative to the intact model's), specific_variance
    (V relative to the intact update's variance), symmetric_r2 (R^2 of the intact symmetric part by the new one),
    update_r2 (of the intact update by the new one), log_objective (mean, after the one step)}."""
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    _check_permutations(permutations, centroids.shape[1])
    exhaustive = _is_exhaustive(permutations)

    def split_of(candidate: KMeansTransformer) -> tuple[SymmetricSplit, Tensor]:
        step = model_step(candidate)
        outputs = permuted_outputs(step, points, centroids, permutations)
        after = step(points, centroids)
        return split_from_outputs(after - centroids, outputs, centroids, exhaustive), after

    intact, after = split_of(model)
    total = float(((intact.update - intact.update.mean()) ** 2).sum())

    def specific_variance(split: SymmetricSplit) -> float:  # V in absolute units (the spread is relative)
        return split.permutation_spread * float(((split.update - split.update.mean()) ** 2).sum())

    intact_specific = specific_variance(intact)
    rows = [{"group": "intact", "blocks": [], "specific_remaining": 1.0, "symmetric_r2": 1.0, "update_r2": 1.0,
             "specific_variance": intact_specific / total, "log_objective": float(log_objective(points, after).mean())}]
    for group, blocks in groups.items():
        split, after = split_of(symmetrise_blocks(model, blocks))
        specific = specific_variance(split)
        rows.append({"group": group, "blocks": list(blocks),
                     "specific_remaining": specific / intact_specific if intact_specific > NEGLIGIBLE * total
                     else math.nan,
                     "symmetric_r2": r2_score(split.symmetric, intact.symmetric),
                     "update_r2": r2_score(split.update, intact.update),
                     "specific_variance": specific / total,
                     "log_objective": float(log_objective(points, after).mean())})
    return rows


def block_groups(model: KMeansTransformer) -> dict[str, list[str]]:
    """Default groups for ``block_symmetrisation``: every attention's code blocks, each attention-matrix pair's, and
    all blocks together."""
    names = code_blocks(model)
    groups: dict[str, list[str]] = {}
    for attention in ATTENTIONS:
        mine = [name for name in names if name.startswith(attention + ".")]
        if mine:
            groups[attention] = mine
        for matrix in ("W_Q", "W_K", "W_V"):
            selected = [name for name in mine if name.split(".")[1] in (matrix, "b_" + matrix[-1])]
            if selected:
                groups[f"{attention}.{matrix[-1]}"] = selected
    if names:
        groups["all"] = names
    return groups


@torch.no_grad()
def slot_mass(model: KMeansTransformer, points: Tensor, centroids: Tensor) -> dict[str, list[float]]:
    """Per slot j, averaged over tasks and points: attn_xc's attention mass on slot j ("mass") and the share of points
    whose largest weight is on slot j ("argmax_share"), beside the share of points nearest to centroid j
    ("lloyd_share"). All are 1/k in expectation for an equivariant model on tasks with random initial centroids."""
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(points, centroids, steps=1, names_filter=["blocks.0.attn_xc.hook_pattern"],
                                        slot_order="fixed")
    finally:
        model.train(was_training)
    pattern = cache["blocks.0.attn_xc.hook_pattern"].double()  # (b, n, k)
    k = centroids.shape[1]
    argmax = torch.nn.functional.one_hot(pattern.argmax(-1), k).double()  # (b, n, k)
    nearest = torch.cdist(points.double(), centroids.double()).argmin(-1)  # (b, n)
    return {"mass": pattern.mean((0, 1)).tolist(), "argmax_share": argmax.mean((0, 1)).tolist(),
            "lloyd_share": torch.nn.functional.one_hot(nearest, k).double().mean((0, 1)).tolist()}


# ----- one crowded pair: the slot-specific part where two centroids share a true component ---------------------------


def component_means(points: Tensor, labels: Tensor, k: int) -> Tensor:
    """The mean of each of ``k`` components' points (b, k, d) (float64) from points (b, n, d) and their generating
    components ``labels`` (b, n); a component without points gets the task's mean."""
    points = points.double()
    onehot = torch.nn.functional.one_hot(labels, k).double()  # (b, n, k)
    counts = onehot.sum(1)  # (b, k)
    sums = onehot.transpose(1, 2) @ points  # (b, k, d)
    fallback = points.mean(1, keepdim=True).expand_as(sums)
    return torch.where(counts[..., None] > 0, sums / counts.clamp_min(1)[..., None], fallback)


def nearest_other(centroids: Tensor) -> tuple[Tensor, Tensor]:
    """Distance (b, k) from every centroid to its nearest other centroid and that centroid's index (b, k)."""
    centroids = centroids.double()
    distances = torch.cdist(centroids, centroids)
    distances.diagonal(dim1=1, dim2=2).fill_(math.inf)
    return distances.min(-1)


def component_of(centroids: Tensor, means: Tensor) -> Tensor:
    """The component (b, k) whose mean (``means``, (b, components, d)) is nearest to each centroid (b, k, d)."""
    return torch.cdist(centroids.double(), means.double()).argmin(-1)


def swap_slots(values: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """``values`` (b, k, ...) with, in every task t, slots first[t] and second[t] exchanged (an involution: it also
    maps a run on the swapped centroids back)."""
    out = values.clone()
    rows = torch.arange(values.shape[0])
    out[rows, first], out[rows, second] = values[rows, second], values[rows, first]
    return out


ATTN_XC_PATTERN = "blocks.0.attn_xc.hook_pattern"  # (b, n, k): each point's attention weights over the slots
ROUNDING = 1000  # a slot-specific part below ROUNDING x the dtype's eps x the move's norm is rounding
DESTINATIONS_SHOWN = 2  # components other than the shared one that ``crowded_pair`` projects (where moves end)


@dataclass(frozen=True)
class CrowdedPair:
    """Two centroids that start in one true component, their moves under one step of a model in the given slot order
    and with their two slots swapped, and a 2-D view (``crowded_pair``). Row 0 of every pair-shaped tensor is
    centroid A (in slot ``slots[0]`` in the given order), row 1 centroid B (slot ``slots[1]``); after the swap A sits in
    slot ``slots[1]`` and B in ``slots[0]``, and the rows still follow the centroids. Full-space tensors are float64
    (d features); the 2-D ones are their coordinates in the plane (``origin``, ``basis``)."""

    task: int  # the task of the batch the pair was found in
    slots: tuple[int, int]  # (slot of A, slot of B) in the given order, the smaller first
    component: int  # the true component both start in (nearest component mean)
    distance: float  # ||A - B||
    n_permutations: int  # slot orders averaged in the symmetric part
    exhaustive: bool  # True when they are all k! orders (the symmetric part is exact)
    centroids: Tensor  # (2, d): A and B
    points: Tensor  # (m, d): the component's points
    component_mean: Tensor  # (d,)
    moves: Tensor  # (2, d): the step's update of A and B in the given slot order
    swapped_moves: Tensor  # (2, d): their update with the two slots swapped
    symmetric_moves: Tensor  # (2, d): the update averaged over slot orders (the same for both orders)
    monte_carlo_error: Tensor  # (2,): standard error of symmetric_moves' estimate, sqrt(V / M) (0 if exhaustive)
    specific: Tensor  # (2, d): moves - symmetric_moves, the slot-specific parts in the given order
    swapped_specific: Tensor  # (2, d): swapped_moves - symmetric_moves
    attention: Tensor  # (m, 2): attn_xc's weight of every component point on A and on B, given order
    swapped_attention: Tensor  # (m, 2): the same with the slots swapped
    specific_fraction: Tensor  # (2,): ||specific|| / ||moves|| of A and B (given order)
    at_rounding_level: bool  # every slot-specific part and the swap's change below ROUNDING x eps x the moves' size
    swap_cosine: Tensor  # (2,): cosine of A's slot-specific part after the swap with B's before, and of B's with A's
    #   (1: each centroid took over the other's slot-specific direction; NaN at rounding level)
    taken_over: float  # share of each other's slot-specific part taken over under the swap (the measure of
    #   analyses/studies/slots/measure.py's H2: (<a' - a, s_B - s_A> + <b' - b, s_A - s_B>) / (2 ||s_A - s_B||^2),
    #   a, a' A's moves before and after, s its slot-specific part; 1: the parts follow the slots, 0: the centroids;
    #   NaN at rounding)
    swap_change: float  # max |swapped_moves - moves|: 0 up to rounding for a slot-equivariant model
    slot_share: Tensor  # (2,): slot slots[0]'s share of the pair's attn_xc weight on the component's points, in the
    #   given order (where it holds A) and with the slots swapped (where it holds B)
    end_components: Tensor  # (2, 2) int64: the component whose mean is nearest to where A, B end; rows: given, swapped
    destinations: tuple[int, ...]  # up to DESTINATIONS_SHOWN other components nearest to an end point
    destination_covered: tuple[bool, ...]  # whether each destination held a centroid at the start
    origin: Tensor  # (d,): the midpoint of A and B
    basis: Tensor  # (2, d): orthonormal rows; axis 1 oriented towards the component's mean
    plane_share: float  # share of the squared length of the six moves (given, swapped, symmetric) in the plane
    points_2d: Tensor  # (m, 2)
    centroids_2d: Tensor  # (2, 2)
    component_mean_2d: Tensor  # (2,)
    moves_2d: Tensor  # (2, 2)
    swapped_moves_2d: Tensor  # (2, 2)
    symmetric_moves_2d: Tensor  # (2, 2)
    destination_means_2d: Tensor  # (len(destinations), 2)
    destination_points_2d: tuple[Tensor, ...]  # (m_r, 2) per destination


def closest_shared_pair(centroids: Tensor, means: Tensor, task: int | None = None) -> tuple[int, int, int] | None:
    """(task, i, j), i < j: the two centroids (b, k, d) closest to each other among those whose nearest component mean
    (``means``, (b, components, d)) is the same, over all tasks (or in ``task`` only); None when no two centroids
    share a component."""
    distances = torch.cdist(centroids.double(), centroids.double())  # (b, k, k)
    components = component_of(centroids, means)  # (b, k)
    k = centroids.shape[1]
    shared = (components[:, :, None] == components[:, None, :]) & ~torch.eye(k, dtype=torch.bool)
    distances = distances.masked_fill(~shared, math.inf)
    if task is not None:
        distances = distances.masked_fill(torch.arange(len(distances))[:, None, None] != task, math.inf)
    flat = int(distances.flatten().argmin())
    if not math.isfinite(float(distances.flatten()[flat])):
        return None
    index, i, j = flat // (k * k), flat % (k * k) // k, flat % k
    return index, min(i, j), max(i, j)


@torch.no_grad()
def crowded_pair(model: KMeansTransformer, points: Tensor, centroids: Tensor, labels: Tensor,
                 n_permutations: int = 256, generator: torch.Generator | int = 0,
                 task: int | None = None) -> CrowdedPair | None:
    """The slot-specific part of one step of ``model`` (eval mode) on one crowded pair.

    The pair: over the tasks (points (b, n, d), initial centroids (b, k, d), true components ``labels`` (b, n)), the
    two centroids closest to each other that start in one true component (the component whose mean is nearest;
    ``closest_shared_pair``), or the closest such pair of ``task``; None when no two centroids share a component.
    On that task: the step in the given slot order and with the pair's two slots swapped (mapped back), attn_xc's
    weights of the component's points on the two, and the symmetric part, averaged over all k! slot orders when there
    are at most ``n_permutations`` of them, else over ``n_permutations`` random ones from ``generator``.

    The plane: through the pair's midpoint, spanned by the two leading right singular vectors of the six moves (given,
    swapped, symmetric, of A and B) -- the plane that holds the most of the moves (``plane_share``); axis 1 is
    oriented towards the component's mean, axis 2 so that the longest move has a positive coordinate. Also projected:
    the components other than the shared one nearest to where the moves end (``destinations``)."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    dtype = model.codes.dtype
    points, centroids = check_points_centroids(points.to(dtype), centroids.to(dtype), d=model.config.d)
    if not isinstance(labels, Tensor) or labels.shape != points.shape[:2] or labels.dtype != torch.int64:
        raise InvalidInput(f"labels must be an int64 tensor of shape {tuple(points.shape[:2])} (true components)")
    k = centroids.shape[1]
    check_positive_int(n_permutations, "n_permutations")
    if task is not None and (isinstance(task, bool) or not isinstance(task, int) or not 0 <= task < len(points)):
        raise InvalidInput(f"task must be None or an index of the {len(points)} tasks, got {task!r}")
    means = component_means(points, labels, int(labels.max()) + 1)  # (b, components, d)
    found = closest_shared_pair(centroids, means, task)
    if found is None:
        return None
    task, i, j = found
    x, c = points[task:task + 1], centroids[task:task + 1]  # (1, n, d), (1, k, d)
    swap = torch.arange(k)
    swap[i], swap[j] = j, i
    orders = torch.stack([torch.arange(k), swap])  # (2, k): the given order and the swap (its own inverse)
    was_training = model.training
    model.eval()
    try:
        out, cache = model.run_with_cache(x.expand(2, -1, -1), c[0][orders], steps=1, names_filter=[ATTN_XC_PATTERN],
                                          slot_order="fixed")
        if math.factorial(k) <= n_permutations:
            permutations = slot_permutations(k)
        else:
            permutations = slot_permutations(k, n_permutations, generator)
        outputs = []
        for chunk in permutations.split(16):  # (m, k): m forwards of the one task at a time
            run = model(x.expand(len(chunk), -1, -1), c[0][chunk], steps=1, slot_order="fixed").centroids  # (m, k, d)
            outputs.append(torch.stack([unpermute(row[None], order)[0] for row, order in zip(run, chunk)]))
    finally:
        model.train(was_training)
    start = c[0].double()  # (k, d)
    runs = torch.stack([unpermute(out.centroids[r:r + 1], orders[r])[0] for r in range(2)]).double() - start
    outputs = torch.cat(outputs).double()  # (M, k, d): every slot order's output, mapped back
    symmetric = outputs.mean(0) - start  # (k, d)
    exhaustive = len(permutations) == math.factorial(k)
    spread = ((outputs - outputs.mean(0)) ** 2).sum(-1).sum(0) / max(len(outputs) - 1, 1)  # (k,): V per centroid
    error = torch.zeros(k, dtype=torch.float64) if exhaustive else (spread / len(outputs)).sqrt()
    pair = [i, j]
    moves, swapped_moves, symmetric_moves = runs[0, pair], runs[1, pair], symmetric[pair]  # (2, d) each
    specific, swapped_specific = moves - symmetric_moves, swapped_moves - symmetric_moves
    component = int(component_of(start[pair][None], means[task:task + 1])[0, 0])
    mine = labels[task] == component  # (n,): the component's points
    pattern = cache[ATTN_XC_PATTERN].double()[:, mine]  # (2, m, k), columns by slot
    attention = pattern[0][:, pair]  # (m, 2): A in slot i, B in slot j
    swapped_attention = pattern[1][:, [j, i]]  # A now in slot j, B in slot i
    masses = torch.stack([attention.sum(0), swapped_attention.sum(0)])  # (2 orders, 2 centroids: A, B)

    def cosine(u: Tensor, v: Tensor) -> float:
        norm = float(u.norm() * v.norm())
        return float(u @ v) / norm if norm > 0 else math.nan

    scale = float(moves.norm(dim=-1).max())
    rounding = ROUNDING * torch.finfo(dtype).eps * scale
    at_rounding = bool(specific.norm(dim=-1).max() <= rounding and swapped_specific.norm(dim=-1).max() <= rounding
                       and (swapped_moves - moves).norm(dim=-1).max() <= rounding)
    gap = specific[1] - specific[0]
    change = swapped_specific - specific
    taken = math.nan if at_rounding else float(change[0] @ gap - change[1] @ gap) / max(2 * float(gap @ gap), 1e-300)
    cosines = [math.nan if at_rounding else cosine(u, v)
               for u, v in ((swapped_specific[0], specific[1]), (swapped_specific[1], specific[0]))]
    ends = torch.stack([start[pair] + moves, start[pair] + swapped_moves])  # (2 orders, 2, d)
    end_components = component_of(ends, means[task:task + 1].expand(2, -1, -1))  # (2, 2)
    covered = set(component_of(start[None], means[task:task + 1])[0].tolist())
    others = [int(r) for r in dict.fromkeys(end_components.flatten().tolist()) if r != component]
    destinations = tuple(others[:DESTINATIONS_SHOWN])

    origin = start[pair].mean(0)  # (d,)
    stacked = torch.cat([moves, swapped_moves, symmetric_moves])  # (6, d)
    vh = torch.linalg.svd(stacked, full_matrices=False).Vh  # (6, d): right singular vectors, largest first
    basis = vh[:2].clone()  # (2, d)
    if float((means[task, component] - origin) @ basis[0]) < 0:
        basis[0] = -basis[0]
    longest = stacked[stacked.norm(dim=-1).argmax()]
    if float(longest @ basis[1]) < 0:
        basis[1] = -basis[1]
    total = float((stacked ** 2).sum())
    share = float(((stacked @ basis.T) ** 2).sum()) / total if total > 0 else 1.0

    def project(positions: Tensor) -> Tensor:  # (..., d) -> (..., 2)
        return (positions.double() - origin) @ basis.T

    task_points = points[task].double()
    return CrowdedPair(
        task=task, slots=(i, j), component=component, distance=float((start[i] - start[j]).norm()),
        n_permutations=len(permutations), exhaustive=exhaustive,
        centroids=start[pair], points=task_points[mine], component_mean=means[task, component],
        moves=moves, swapped_moves=swapped_moves, symmetric_moves=symmetric_moves, monte_carlo_error=error[pair],
        specific=specific,
        swapped_specific=swapped_specific, attention=attention, swapped_attention=swapped_attention,
        specific_fraction=specific.norm(dim=-1) / moves.norm(dim=-1).clamp_min(1e-300),
        at_rounding_level=at_rounding, swap_cosine=torch.tensor(cosines, dtype=torch.float64),
        taken_over=taken, swap_change=float((swapped_moves - moves).abs().max()),
        slot_share=torch.stack([masses[0, 0], masses[1, 1]]) / masses.sum(1).clamp_min(1e-300),
        end_components=end_components,
        destinations=destinations, destination_covered=tuple(r in covered for r in destinations),
        origin=origin, basis=basis, plane_share=share, points_2d=project(task_points[mine]),
        centroids_2d=project(start[pair]), component_mean_2d=project(means[task, component]),
        moves_2d=moves @ basis.T, swapped_moves_2d=swapped_moves @ basis.T,
        symmetric_moves_2d=symmetric_moves @ basis.T,
        destination_means_2d=project(means[task, list(destinations)]).reshape(len(destinations), 2),
        destination_points_2d=tuple(project(task_points[labels[task] == r]) for r in destinations))
