"""The slot-specific part of the learned models' step, explained by interventions whose predictions were fixed first.

The learned one-layer models (main-onehot, main-binary) give every centroid a slot with a fixed code. The slot order
carries no information, yet the one-step update depends on it: the slot-symmetric part (the output averaged over
random slot permutations, each run mapped back: ``interp.instruments.symmetry``) explains R^2 0.54 of the update and
the rest, the slot-specific part, is unexplained by it. This script tests hypotheses about what that part computes,
each by an intervention, against predictions written to ``analyses/predictions/slots.json`` and committed before any
intervention was run on the held-out tasks (the commit is recorded as ``prediction_commit``):

* H1a, a push apart: the two centroids of a crowded pair are pushed to opposite sides along their axis.
* H1b, re-seeding: where two centroids start in the same true component, the slot-specific part breaks their tie
  and sends one of them towards a component with no centroid.
* H2, the slots decide which: swapping the slots of a crowded pair swaps the two centroids' roles (its measure is
  also taken on random weights of the same architecture, as a control).
* H2b, no fixed priority: no ranking of the slots predicts which of a crowded pair wins.
* H3, isolated centroids: with one centroid per component the slot-specific part is nearly gone, and swapping the
  slots of two isolated centroids changes (almost) nothing.
* H4, a bias under a fixed order: along a trajectory with a fixed slot order the slot-specific parts of consecutive
  steps point the same way; with a fresh random order per step they are uncorrelated.
* H5, where: the slot identity that attn_xc's keys read causes most of it (``slot_blind``).

Measurements, on ``--tasks`` held-out tasks of the main configuration (n = 512, d = 32, k = 10, random starts,
seed ``--seed``, not the exploration seed the hypotheses were designed on), each with the standard error over tasks:

* the crowding table: by quartile of the distance from a centroid to its nearest other centroid, the mean norm of
  the slot-specific part, of the update and of the symmetric part, and the share of centroids whose true component
  holds another centroid (``crowding_table``);
* the interventions (``swap_slots``: a transposition of two slots per task; ``slot_blind``: a copy of the model whose
  attention matrix reads the mean code; starts with one centroid per component, ``one_per_component``; the symmetric
  step; trajectories with fixed and with shuffled slot orders, ``specific_along_trajectory``), their measured values,
  the predictions and the verdict of ``analyses.studies.failures.measure.verdict`` (confirmed / refuted);
* H2's control (``h2_control``): the same measure on the same tasks and pairs, through the same code, for models of
  the learned model's architecture with random weights (``random_weights``, seeds ``CONTROL_SEEDS``; the first is the
  recorded figure), to tell what the measure shows of the learned models from what any slot-dependent model gives;
* the 20-step mean log objective of the model (fixed slot order), one random slot order per step (1x compute), the
  slot-averaged model (8 orders per step) and Lloyd's algorithm, on the same tasks and starts.

Run from the repository root:

    python -m analyses.studies.slots.measure [--quick] [--tasks 128] [--seed 20261701]
        [--out analyses/results/slots.json]
    python -m analyses.studies.slots.measure --from-json --results-md      # only the RESULTS.md section, from --out
    python -m analyses.studies.slots.measure --controls-only [--results-md]  # only H2's control, merged into --out
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

from analyses import _shared, _studies
from analyses._shared import file_commit, run_model, section_from_json, write_json
from analyses.framework import preregistration
from analyses.framework.formatting import fixed
from analyses.framework.preregistration import Prediction, prediction_of, verdict
from interp import _arguments as arguments
from interp._checks import InvalidInput, InvalidInputType, check_output_file
from interp.instruments.symmetry import component_means, component_of, nearest_other, slot_blind, swap_slots

PROG = "python -m analyses.slots"
HERE = _studies.HERE  # the analyses/ folder
ROOT = _shared.ROOT
PREDICTIONS = HERE / "predictions" / "slots.json"
DEFAULT_OUT = HERE / "results" / "slots.json"
SECTION_KEY = "slots"
SECTION_COMMAND = "python -m analyses.slots --from-json --results-md"
MODELS = ("main-onehot", "main-binary")
EXPLORATION_SEED = 20261601  # the tasks the hypotheses were designed on (never measured here)
HELD_OUT_SEED = 20261701  # the default tasks of the measured predictions
K, N, D = 10, 512, 32  # the main configuration
XC_PATTERN = "blocks.0.attn_xc.hook_pattern"
QUARTILES = 4


@dataclass(frozen=True)
class SlotSettings:
    """Sizes of a run; every figure is seeded from ``seed``."""

    tasks: int = 128  # held-out tasks (random starts; the same points with one centroid per component)
    seed: int = HELD_OUT_SEED
    permutations: int = 64  # slot permutations of the symmetric part
    trajectory_tasks: int = 32  # tasks of the trajectories (H4): 2 x steps x (1 + trajectory_permutations) forwards
    trajectory_permutations: int = 16  # permutations per step of the slot-specific part along a trajectory
    steps: int = 20  # steps of the trajectories and of the objective figures
    average_permutations: int = 8  # permutations per step of the slot-averaged model


QUICK = SlotSettings(tasks=8, permutations=8, trajectory_tasks=4, trajectory_permutations=4, steps=5)


# ----- tasks ---------------------------------------------------------------------------------------------------------


def draw(count: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``count`` main-configuration tasks (float32): points (b, n, d), random-subset starts (b, k, d) (as
    ``analyses._shared.draw_tasks``: seeds ``seed`` and ``seed + 1``) and the generating component of every point."""
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    tasks = sample_tasks(TaskConfig(n=N, d=D, k=K), count, seed)
    return tasks.points, init_centroids(tasks.points, K, "random", seed + 1), tasks.labels


def one_per_component(points: Tensor, labels: Tensor, k: int, seed: int) -> Tensor:
    """Starts with one centroid per component (b, k, d): slot j holds a uniformly random point of component j (the
    component's mean when it has no point)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(labels.shape, generator=generator)  # (b, n)
    means = component_means(points, labels, k).to(points.dtype)
    rows = []
    for component in range(k):
        mine = labels == component  # (b, n)
        index = torch.where(mine, scores, -1.0).argmax(1)  # (b,)
        chosen = points[torch.arange(points.shape[0]), index]  # (b, d)
        rows.append(torch.where(mine.any(1)[:, None], chosen, means[:, component]))
    return torch.stack(rows, dim=1)


# ----- instruments ---------------------------------------------------------------------------------------------------


def shares_component(centroids: Tensor, means: Tensor) -> Tensor:
    """(b, k) bool: the centroid's component (``component_of``) holds another centroid too."""
    components = component_of(centroids, means)
    k = means.shape[1]
    counts = torch.nn.functional.one_hot(components, k).sum(1)  # (b, k): centroids per component
    return counts.gather(1, components) >= 2


def covered(centroids: Tensor, means: Tensor) -> Tensor:
    """Per task (b,), the number of components that are the nearest component of at least one centroid."""
    components = component_of(centroids, means)
    return (torch.nn.functional.one_hot(components, means.shape[1]).sum(1) > 0).sum(1).double()


def crowding_table(specific: Tensor, update: Tensor, symmetric: Tensor, centroids: Tensor,
                   crowded: Tensor | None = None) -> list[dict]:
    """By quartile (closest first) of the distance from a centroid to its nearest other centroid, over all centroids
    of all tasks: rows {quartile, count, nn_distance, specific, update, symmetric (mean norms of the (b, k, d) parts),
    shares_component (fraction of ``crowded`` (b, k) bool, if given)}. Quartile edges: ``torch.quantile`` (linear
    interpolation) of all distances; a centroid on an edge goes to the lower quartile."""
    distance, _ = nearest_other(centroids)
    flat = distance.flatten()
    edges = torch.quantile(flat, torch.tensor([0.25, 0.5, 0.75], dtype=flat.dtype))
    bins = torch.bucketize(distance, edges)  # (b, k): 0..3, right edges inclusive
    norms = {"specific": specific.double().norm(dim=-1), "update": update.double().norm(dim=-1),
             "symmetric": symmetric.double().norm(dim=-1)}
    rows = []
    for quartile in range(QUARTILES):
        chosen = bins == quartile
        row = {"quartile": quartile + 1, "count": int(chosen.sum()),
               "nn_distance": float(distance[chosen].mean()) if chosen.any() else math.nan}
        row.update({name: float(values[chosen].mean()) if chosen.any() else math.nan
                    for name, values in norms.items()})
        if crowded is not None:
            row["shares_component"] = float(crowded[chosen].double().mean()) if chosen.any() else math.nan
        rows.append(row)
    return rows


def swap_fraction(before: Tensor, after: Tensor, first: Tensor, second: Tensor,
                  reference: Tensor | None = None) -> Tensor:
    """Per task (b,): how far the outputs of centroids A = first[t] and B = second[t] moved when their slots were
    swapped, as a fraction of the difference between the two centroids' ``reference`` values (b, k, d) (default: the
    outputs before): (<a' - a, r_B - r_A> + <b' - b, r_A - r_B>) / (2 ||r_A - r_B||^2), with a, b the outputs before
    and a', b' after (both mapped back to the centroids). With the outputs as reference, 1: the two outputs traded
    places, 0: unchanged. With the slot-specific parts as reference (the symmetric part is the same for every slot
    order, so a' - a is the change of A's slot-specific part), 1: each centroid took over the other's slot-specific
    part, 0: each kept its own."""
    rows = torch.arange(before.shape[0])
    reference = before if reference is None else reference
    change_a = (after[rows, first] - before[rows, first]).double()
    change_b = (after[rows, second] - before[rows, second]).double()
    gap = (reference[rows, second] - reference[rows, first]).double()
    numerator = (change_a * gap).sum(-1) - (change_b * gap).sum(-1)
    return numerator / (2 * (gap * gap).sum(-1)).clamp_min(1e-300)


def relative_change(before: Tensor, after: Tensor, update: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """Per task (b,): (||a' - a|| + ||b' - b||) / (||u_A|| + ||u_B||): the change of the two centroids' outputs
    relative to their updates u (b, k, d)."""
    rows = torch.arange(before.shape[0])
    change = sum((after[rows, i] - before[rows, i]).double().norm(dim=-1) for i in (first, second))
    return change / sum(update[rows, i].double().norm(dim=-1) for i in (first, second)).clamp_min(1e-300)


def along_axis_fraction(specific: Tensor, centroids: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """Per task (b,): the fraction of the squared norm of the slot-specific parts of centroids first[t] and second[t]
    that lies along the line through the two centroids."""
    rows = torch.arange(specific.shape[0])
    axis = (centroids[rows, first] - centroids[rows, second]).double()
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    pair = torch.stack([specific[rows, first], specific[rows, second]], 1).double()  # (b, 2, d)
    return ((pair * axis[:, None]).sum(-1) ** 2).sum(1) / (pair * pair).sum((1, 2)).clamp_min(1e-300)


def recording_step(model):
    """A step function (points, centroids) -> new centroids in eval mode, as ``symmetry.model_step``, that also
    appends attn_xc's attention mass per slot (b, k) (the pattern summed over the points) to the returned list."""
    masses: list[Tensor] = []

    @torch.no_grad()
    def step(points: Tensor, centroids: Tensor) -> Tensor:
        was_training = model.training
        model.eval()
        try:
            out, cache = model.run_with_cache(points, centroids, steps=1, names_filter=[XC_PATTERN])
        finally:
            model.train(was_training)
        masses.append(cache[XC_PATTERN].double().sum(1))
        return out.centroids

    return step, masses


@torch.no_grad()
def specific_along_trajectory(step, points: Tensor, init: Tensor, steps: int, permutations: int, shuffle: bool,
                              generator: torch.Generator) -> Tensor:
    """The slot-specific parts (steps, b, k, d) along a trajectory of ``step``, indexed by centroid: at each step the
    centroids are put in the identity order (``shuffle`` False) or a fresh random order, the step's output (mapped
    back) minus the mean of ``permutations`` fresh random orders' outputs is that step's slot-specific part, and the
    output is the next step's centroids."""
    from interp.instruments.symmetry import permuted_outputs, slot_permutations, unpermute

    current, parts = init, []
    k = init.shape[1]
    for _ in range(steps):
        order = slot_permutations(k, 1, generator)[0] if shuffle else torch.arange(k)
        out = unpermute(step(points, current[:, order]), order)
        symmetric = permuted_outputs(step, points, current, slot_permutations(k, permutations, generator)).mean(0)
        parts.append(out.double() - symmetric.double())
        current = out
    return torch.stack(parts)


def consecutive_cosines(parts: Tensor) -> Tensor:
    """Per task (b,): the mean over consecutive steps t, t + 1 of the cosine between the slot-specific parts (T, b, k,
    d) of all centroids of the task at the two steps (each step's parts of a task as one vector)."""
    first, second = parts[:-1].flatten(2).double(), parts[1:].flatten(2).double()  # (T - 1, b, k d)
    cosines = (first * second).sum(-1) / (first.norm(dim=-1) * second.norm(dim=-1)).clamp_min(1e-300)
    return cosines.mean(0)


def closest_pair(centroids: Tensor, means: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The closest pair of every task: (first, second, same), first (b,) the centroid with the smallest distance to
    its nearest other centroid, second (b,) that nearest other, same (b,) bool: the two start in one component."""
    distance, nearest = nearest_other(centroids)
    rows = torch.arange(centroids.shape[0])
    first = distance.argmin(1)
    second = nearest[rows, first]
    components = component_of(centroids, means)
    return first, second, components[rows, first] == components[rows, second]


def pair_swap(model, points: Tensor, init: Tensor, direct: Tensor, split, first: Tensor,
              second: Tensor) -> dict[str, Tensor]:
    """H2's intervention and measurements, per task (b,): ``model``'s step run with the slots of centroids first[t]
    and second[t] swapped (outputs mapped back; ``direct`` the outputs in the given order, ``split`` the symmetric
    split of the update from ``init``): ``taken_over``, the share of each other's slot-specific part taken over
    (``swap_fraction`` with the slot-specific parts as reference); ``outputs_traded``, the share of the way to each
    other's output; ``change_over_update``, the change of the two outputs relative to their updates."""
    from interp.instruments.symmetry import model_step

    swapped = swap_slots(model_step(model)(points, swap_slots(init, first, second)), first, second)
    return {"taken_over": swap_fraction(direct, swapped, first, second, reference=split.specific),
            "outputs_traded": swap_fraction(direct, swapped, first, second),
            "change_over_update": relative_change(direct, swapped, split.update, first, second)}


def crowded_pairs(centroids: Tensor, means: Tensor) -> list[tuple[int, int, int]]:
    """(task, i, j), i < j: centroids that are each other's nearest and start in the same component."""
    _, nearest = nearest_other(centroids)
    components = component_of(centroids, means)
    pairs = []
    for task in range(centroids.shape[0]):
        for i in range(centroids.shape[1]):
            j = int(nearest[task, i])
            if i < j and int(nearest[task, j]) == i and components[task, i] == components[task, j]:
                pairs.append((task, i, j))
    return pairs


def pair_wins(masses: Tensor, orders: Tensor, pairs: list[tuple[int, int, int]]) -> list[tuple[int, int, int, bool]]:
    """For runs with the slot orders ``orders`` (R, k) and attn_xc masses (R, b, k) mapped back to the centroids: per
    run and pair (task, i, j), (task, slot of i, slot of j, i got more mass)."""
    out = []
    for run, order in enumerate(orders):
        slot = torch.empty_like(order)
        slot[order] = torch.arange(len(order))  # centroid -> its slot in this run
        for task, i, j in pairs:
            out.append((task, int(slot[i]), int(slot[j]), bool(masses[run, task, i] > masses[run, task, j])))
    return out


def fit_ranking(wins: list[tuple[int, int, int, bool]], k: int) -> list[int]:
    """Slots ordered by their win rate (mean over opponents of the fraction of pairs won), best first."""
    won, played = torch.zeros(k, k), torch.zeros(k, k)
    for _, first, second, first_won in wins:
        won[first, second] += first_won
        won[second, first] += not first_won
        played[first, second] += 1
        played[second, first] += 1
    rate = (won / played.clamp_min(1)).sum(1) / (played > 0).sum(1).clamp_min(1)
    return [int(slot) for slot in rate.argsort(descending=True, stable=True)]


def ranking_accuracy(wins: list[tuple[int, int, int, bool]], ranking: list[int], tasks: int) -> Tensor:
    """Per task (b,; NaN without pairs): the fraction of (run, pair) whose winner is the slot ranked higher."""
    rank = {slot: place for place, slot in enumerate(ranking)}
    hits, counts = torch.zeros(tasks, dtype=torch.float64), torch.zeros(tasks, dtype=torch.float64)
    for task, first, second, first_won in wins:
        hits[task] += (rank[first] < rank[second]) == first_won
        counts[task] += 1
    return torch.where(counts > 0, hits / counts.clamp_min(1), torch.full_like(hits, math.nan))


def mass_imbalance(masses: Tensor, pairs: list[tuple[int, int, int]]) -> Tensor:
    """Mean over pairs of |m_i - m_j| / (m_i + m_j) for masses (b, k)."""
    values = [abs(float(masses[t, i] - masses[t, j])) / float(masses[t, i] + masses[t, j]) for t, i, j in pairs]
    return torch.tensor(values, dtype=torch.float64).mean() if values else torch.tensor(math.nan)


# ----- statistics ----------------------------------------------------------------------------------------------------


def mean_se(values: Tensor) -> dict:
    """{mean, se, tasks} over the finite per-task values."""
    values = values.double()
    values = values[torch.isfinite(values)]
    count = len(values)
    return {"mean": float(values.mean()) if count else math.nan,
            "se": float(values.std() / math.sqrt(count)) if count > 1 else math.nan, "tasks": count}


def ratio_se(numerator: Tensor, denominator: Tensor) -> dict:
    """{mean, se, tasks} of the ratio of means mean(x) / mean(y) over tasks, its standard error by the delta method:
    sd(x - r y) / (sqrt(N) |mean(y)|)."""
    x, y = numerator.double(), denominator.double()
    count = len(x)
    ratio = float(x.mean() / y.mean())
    se = float((x - ratio * y).std() / (math.sqrt(count) * abs(float(y.mean())))) if count > 1 else math.nan
    return {"mean": ratio, "se": se, "tasks": count}


def per_task_spread(outputs: Tensor, update: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor]:
    """Per task (b,): the slot-specific variance V_t (spread of the mapped-back outputs (M, b, k, d) around their
    mean, unbiased) and the update's sum of squares around the update's grand mean (``split_from_outputs``'s V and
    Var(update), task by task)."""
    moves = outputs.double() - centroids.double()
    spread = ((moves - moves.mean(0)) ** 2).sum((0, 2, 3)) / (len(outputs) - 1)
    update = update.double()
    return spread, ((update - update.mean()) ** 2).sum((1, 2))


def log_objectives(points: Tensor, centroids: Tensor) -> Tensor:
    from interp.algorithms import log_objective

    return log_objective(points.double(), centroids.detach().double())


# ----- predictions ---------------------------------------------------------------------------------------------------


def as_prediction(entry: dict) -> Prediction:
    """A committed entry as a ``Prediction``, its method the entry's derivation."""
    return prediction_of(entry, "derivation")


def load_predictions(path: Path = PREDICTIONS) -> dict:
    """The committed predictions file (``analyses.framework.preregistration.load_predictions``), its entries checked
    as ``Prediction``s."""
    return preregistration.load_predictions(path, as_prediction)


def hypothesis_record(key: str, predictions: dict, intervention: str, measured: dict, **figures) -> dict:
    """A hypothesis test: the committed prediction, the intervention, the measured value (mean, se, tasks) and the
    verdict of ``analyses.framework.preregistration.verdict`` on the mean."""
    entry = predictions["predictions"][key]
    prediction = as_prediction(entry)
    value = measured["mean"]
    return {"hypothesis": entry["hypothesis"], "hypothesis_text": entry["hypothesis_text"],
            "intervention": intervention, "prediction": asdict(prediction),
            "rule": entry["rule"], "measured": measured, **figures,
            "verdict": verdict(prediction, value if math.isfinite(value) else None)}


# ----- one model -----------------------------------------------------------------------------------------------------


def measure_model(name: str, model, settings: SlotSettings, predictions: dict) -> dict:
    """Every measurement and test of one model (module docstring)."""
    from interp.algorithms import lloyd
    from interp.instruments.symmetry import (
        model_step,
        permuted_outputs,
        slot_averaged_run,
        slot_permutations,
        split_from_outputs,
        unpermute,
    )

    started = time.perf_counter()
    seed = settings.seed
    points, init, labels = draw(settings.tasks, seed)
    means = component_means(points, labels, K)
    record: dict = {}
    tasks = settings.tasks

    # the symmetric split from random starts, recording attn_xc's masses of every run
    step, masses = recording_step(model)
    permutations = slot_permutations(K, settings.permutations, seed + 2)
    outputs = permuted_outputs(step, points, init, permutations)  # (M, b, k, d)
    run_masses = torch.stack([unpermute(mass, order) for mass, order in zip(masses, permutations)])  # (M, b, k)
    direct = step(points, init)
    own_masses = masses[-1]
    split = split_from_outputs(direct - init, outputs, init, exhaustive=False)
    crowded = shares_component(init, means)
    record["split"] = {"r2_symmetric": split.r2_symmetric, "specific_share": split.specific_share,
                       "permutation_spread": split.permutation_spread, "n_permutations": split.n_permutations}
    record["crowding"] = crowding_table(split.specific, split.update, split.symmetric, init, crowded)

    # the closest pair of every task, used where a crowded pair is needed
    distance, _ = nearest_other(init)
    first, second, same = closest_pair(init, means)
    record["closest_pairs"] = {"same_component": int(same.sum()), "tasks": tasks,
                               "distance": float(distance.min(1).values.mean())}
    pairs = crowded_pairs(init, means)
    record["attn_xc_mass_imbalance"] = {
        "pairs": len(pairs), "model": float(mass_imbalance(own_masses, pairs)),
        "per_permutation": float(torch.stack([mass_imbalance(m, pairs) for m in run_masses]).mean()),
        "permutation_averaged": float(mass_imbalance(run_masses.mean(0), pairs)),
        "note": "crowded pairs (mutual nearest, same component): |m_i - m_j| / (m_i + m_j) of attn_xc's mass in the "
                "model's run, in each permuted run (mean) and of the masses averaged over the permutations"}

    tests = {}
    along = along_axis_fraction(split.specific, init, first, second)
    tests["H1a"] = hypothesis_record(
        "H1a", predictions, "none beyond the symmetric split: the slot-specific part of the closest same-component "
        "pair of each task, projected on the line through the two centroids", mean_se(along[same]))

    # H1b: one step of the symmetric part in place of the model's step
    gain_model = covered(direct, means) - covered(init, means)
    gain_lost = covered(direct, means) - covered(init + split.symmetric.to(init.dtype), means)
    tests["H1b"] = hypothesis_record(
        "H1b", predictions, f"the model's step replaced by its symmetric part (output averaged over "
        f"{settings.permutations} slot permutations): components covered after one step",
        ratio_se(gain_lost, gain_model),
        covered={"initial": mean_se(covered(init, means)), "model": mean_se(covered(direct, means)),
                 "symmetric": mean_se(covered(init + split.symmetric.to(init.dtype), means))})

    # H2: swap the slots of the closest same-component pair
    swap = pair_swap(model, points, init, direct, split, first, second)
    tests["H2"] = hypothesis_record(
        "H2", predictions, "the slots of the closest same-component pair of each task swapped (one transposition), "
        "outputs mapped back", mean_se(swap["taken_over"][same]),
        outputs_traded=mean_se(swap["outputs_traded"][same]),
        change_over_update=mean_se(swap["change_over_update"][same]))

    # H2b: a ranking of the slots, fitted on the exploration tasks
    entry = predictions["predictions"]["H2b"]
    ranking = entry["ranking"][name]
    orders = torch.cat([torch.arange(K)[None], permutations])
    wins = pair_wins(torch.cat([own_masses[None], run_masses]), orders, pairs)
    tests["H2b"] = hypothesis_record(
        "H2b", predictions, f"none: the model's run and {settings.permutations} permuted runs; the slot ranked higher "
        "(ranking fitted on the exploration tasks) predicted to take more of attn_xc's mass in every crowded pair",
        mean_se(ranking_accuracy(wins, ranking, tasks)), ranking=ranking, comparisons=len(wins))

    # H3: one centroid per component; swapping two isolated centroids
    isolated_start = one_per_component(points, labels, K, seed + 5)
    iso_step, _ = recording_step(model)
    iso_outputs = permuted_outputs(iso_step, points, isolated_start, permutations)
    iso_direct = iso_step(points, isolated_start)
    iso_split = split_from_outputs(iso_direct - isolated_start, iso_outputs, isolated_start, exhaustive=False)
    spread, total = per_task_spread(iso_outputs, iso_direct - isolated_start, isolated_start)
    random_spread, random_total = per_task_spread(outputs, direct - init, init)
    tests["H3"] = hypothesis_record(
        "H3", predictions, "starts with one centroid per component (a random point of each) in place of random "
        "starts: slot-specific variance (spread of the permuted runs) / variance of the update",
        ratio_se(spread, total), random_starts=ratio_se(random_spread, random_total),
        specific_over_update={"one_per_component": float(iso_split.specific.norm(dim=-1).mean()
                                                         / iso_split.update.norm(dim=-1).mean()),
                              "random": float(split.specific.norm(dim=-1).mean() / split.update.norm(dim=-1).mean())})
    lone = ~crowded  # (b, k): alone in its component
    far = torch.cdist(init.double(), init.double())
    far = far.masked_fill(~(lone[:, :, None] & lone[:, None, :]), math.inf)
    far.diagonal(dim1=1, dim2=2).fill_(math.inf)
    flat = far.flatten(1).argmin(1)
    iso_first, iso_second = flat // K, flat % K
    has_pair = torch.isfinite(far.flatten(1).min(1).values)
    iso_swapped = swap_slots(model_step(model)(points, swap_slots(init, iso_first, iso_second)), iso_first,
                             iso_second)
    tests["H3_swap"] = hypothesis_record(
        "H3_swap", predictions, "the slots of the closest two centroids that are each alone in their component "
        "swapped (one transposition), outputs mapped back",
        mean_se(swap_fraction(direct, iso_swapped, iso_first, iso_second)[has_pair]),
        specific_taken_over=mean_se(swap_fraction(direct, iso_swapped, iso_first, iso_second,
                                                  reference=split.specific)[has_pair]),
        change_over_update=mean_se(relative_change(direct, iso_swapped, split.update, iso_first,
                                                   iso_second)[has_pair]))

    # H5: attn_xc's keys read the mean code
    blind = slot_blind(model, "attn_xc", "W_K")
    blind_step = model_step(blind)
    blind_outputs = permuted_outputs(blind_step, points, init, permutations)
    blind_direct = blind_step(points, init)
    blind_spread, _ = per_task_spread(blind_outputs, blind_direct - init, init)
    blind_split = split_from_outputs(blind_direct - init, blind_outputs, init, exhaustive=False)
    tests["H5"] = hypothesis_record(
        "H5", predictions, "attn_xc's key matrix made slot-blind (its code columns read the mean code, through the "
        "bias): slot-specific variance left, relative to the intact model's, same permutations",
        ratio_se(blind_spread, random_spread),
        one_step_log_objective={"intact": mean_se(log_objectives(points, direct)),
                                "slot_blind": mean_se(log_objectives(points, blind_direct))},
        covered_after_one_step={"intact": mean_se(covered(direct, means)),
                                "slot_blind": mean_se(covered(blind_direct, means)),
                                "slot_blind_symmetric": mean_se(covered(init + blind_split.symmetric.to(init.dtype),
                                                                        means))})

    # H4: consecutive slot-specific parts along trajectories
    count = min(settings.trajectory_tasks, tasks)
    plain = model_step(model)
    cosines = {}
    for label, shuffle in (("fixed", False), ("shuffled", True)):
        generator = torch.Generator().manual_seed(seed + (8 if shuffle else 7))
        parts = specific_along_trajectory(plain, points[:count], init[:count], settings.steps,
                                          settings.trajectory_permutations, shuffle, generator)
        cosines[label] = consecutive_cosines(parts)
    tests["H4_fixed"] = hypothesis_record(
        "H4_fixed", predictions, f"{settings.steps}-step trajectories with the fixed slot order; each step's "
        f"slot-specific part against {settings.trajectory_permutations} fresh permutations", mean_se(cosines["fixed"]))
    tests["H4_shuffled"] = hypothesis_record(
        "H4_shuffled", predictions, f"{settings.steps}-step trajectories with a fresh random slot order at every step "
        "(the 1x remedy); the same measurement", mean_se(cosines["shuffled"]))
    record["tests"] = tests

    # the objective after `steps` steps
    fixed_end = run_model(model, points, init, settings.steps)
    one_order = slot_averaged_run(model, points, init, settings.steps, 1, seed + 3).trajectory[:, -1]
    averaged = slot_averaged_run(model, points, init, settings.steps, settings.average_permutations,
                                 seed + 4).trajectory[:, -1]
    lloyd_end = lloyd(points, init, settings.steps).centroids
    values = {"model": log_objectives(points, fixed_end),
              "one_random_order_per_step": log_objectives(points, one_order),
              f"slot_averaged_{settings.average_permutations}": log_objectives(points, averaged),
              "lloyd": log_objectives(points, lloyd_end)}
    record["objective"] = {"steps": settings.steps, "initial": mean_se(log_objectives(points, init)),
                           **{key: mean_se(value) for key, value in values.items()},
                           "difference_from_model": {key: mean_se(value - values["model"])
                                                     for key, value in values.items() if key != "model"}}
    record["seconds"] = time.perf_counter() - started
    return record


# ----- H2's control: the same measure on random weights ---------------------------------------------------------------


CONTROL_SEEDS = (0, 1, 2)  # torch.manual_seed of the random-weight models; the first is the recorded control


def random_weights(model, seed: int):
    """A model of ``model``'s architecture (its config: for main-onehot and main-binary ``learned_model_config(32, 10,
    embedding)``, up to the Gumbel temperature their softmax does not use) with fresh weights: the constructor's
    initialisation (PyTorch's nn.Linear default) drawn after ``torch.manual_seed(seed)``, the global random state
    restored afterwards; eval mode, the model's dtype."""
    from interp.model import KMeansTransformer

    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = KMeansTransformer(model.config)
    return fresh.to(next(model.parameters()).dtype).eval()


def swap_per_task(model, points: Tensor, init: Tensor, means: Tensor, permutations: Tensor) -> dict[str, Tensor]:
    """H2's measurements per task (b,) on ``model`` as ``measure_model`` takes them: the symmetric split from
    ``permutations`` (``recording_step``'s runs), the closest pair of every task (``closest_pair``) and its slot swap
    (``pair_swap``); ``same`` marks the tasks whose closest pair starts in one component (the tasks H2 is measured on),
    ``spread`` and ``total`` are the slot-specific variance and the update's (``per_task_spread``)."""
    from interp.instruments.symmetry import permuted_outputs, split_from_outputs

    step, _ = recording_step(model)
    outputs = permuted_outputs(step, points, init, permutations)
    direct = step(points, init)
    split = split_from_outputs(direct - init, outputs, init, exhaustive=False)
    first, second, same = closest_pair(init, means)
    spread, total = per_task_spread(outputs, direct - init, init)
    return {**pair_swap(model, points, init, direct, split, first, second), "same": same, "spread": spread,
            "total": total}


def h2_control(model, settings: SlotSettings, recorded: float | None = None) -> dict:
    """H2's measure on models of ``model``'s architecture with random weights (``random_weights``, seeds
    ``CONTROL_SEEDS``), on the tasks, starts, permutations and closest pairs of ``settings`` (those of
    ``measure_model``), through the same code (``swap_per_task``). The record: the first seed's share of each other's
    slot-specific part taken over (mean, se over tasks), its difference from ``model``'s on the same tasks (paired),
    the swap's other figures, the slot-specific variance / update variance of both, and every seed's share.
    ``model``'s share is recomputed here; ``recorded`` (its H2 mean from ``measure_model``), if given, must agree."""
    from interp.instruments.symmetry import slot_permutations

    points, init, labels = draw(settings.tasks, settings.seed)
    means = component_means(points, labels, K)
    permutations = slot_permutations(K, settings.permutations, settings.seed + 2)
    started = time.perf_counter()
    learned = swap_per_task(model, points, init, means, permutations)
    same = learned["same"]
    measured = mean_se(learned["taken_over"][same])
    if recorded is not None and not math.isclose(measured["mean"], recorded, rel_tol=0.0, abs_tol=1e-9):
        raise InvalidInput(f"the model's H2 share recomputed on the recorded tasks is {measured['mean']:.6f}, not the "
                           f"recorded {recorded:.6f}: the results file was written from other tasks or code")
    runs = {seed: swap_per_task(random_weights(model, seed), points, init, means, permutations)
            for seed in CONTROL_SEEDS}
    control = runs[CONTROL_SEEDS[0]]
    return {
        **mean_se(control["taken_over"][same]), "seed": CONTROL_SEEDS[0],
        "model": "KMeansTransformer(the learned model's config: learned_model_config(32, 10, embedding)) with the "
                 "constructor's random initialisation (PyTorch's nn.Linear default) drawn after "
                 f"torch.manual_seed({CONTROL_SEEDS[0]})",
        "difference_from_model": mean_se((control["taken_over"] - learned["taken_over"])[same]),
        "outputs_traded": mean_se(control["outputs_traded"][same]),
        "change_over_update": mean_se(control["change_over_update"][same]),
        "slot_specific_over_update": {"random_weights": ratio_se(control["spread"], control["total"]),
                                      "model": ratio_se(learned["spread"], learned["total"])},
        "seeds": [{"seed": seed, **mean_se(run["taken_over"][same]),
                   "slot_specific_over_update": ratio_se(run["spread"], run["total"])["mean"]}
                  for seed, run in runs.items()],
        "model_recomputed": measured["mean"], "seconds": time.perf_counter() - started,
        "note": "the same tasks, starts, permutations and closest same-component pairs as the model's H2 measure, "
                "through the same code (swap_per_task). Swapping the pair's positions with the slots kept is the same "
                "input as swapping their slots with the positions kept (the model reads a centroid's slot only from "
                "its row's code): that run read slot by slot gives 1 - psi, so it is no separate measurement.",
    }


@torch.no_grad()
def explore(model, tasks: int = 64, permutations: int = 32, seed: int = EXPLORATION_SEED) -> dict:
    """The figures the hypotheses were designed on, from the exploration tasks (seed ``EXPLORATION_SEED``): the
    crowding table, the closest same-component pairs' slot-specific part along their axis, the components covered
    after one step of the model and of its symmetric part, attn_xc's mass imbalance in crowded pairs and the slot
    ranking of H2b (``fit_ranking``) with its in-sample accuracy. None of the other interventions is run here."""
    from interp.instruments.symmetry import permuted_outputs, slot_permutations, split_from_outputs, unpermute

    points, init, labels = draw(tasks, seed)
    means = component_means(points, labels, K)
    step, masses = recording_step(model)
    orders = slot_permutations(K, permutations, seed + 2)
    outputs = permuted_outputs(step, points, init, orders)
    run_masses = torch.stack([unpermute(mass, order) for mass, order in zip(masses, orders)])
    direct = step(points, init)
    split = split_from_outputs(direct - init, outputs, init, exhaustive=False)
    distance, nearest = nearest_other(init)
    first = distance.argmin(1)
    second = nearest[torch.arange(tasks), first]
    components = component_of(init, means)
    same = components[torch.arange(tasks), first] == components[torch.arange(tasks), second]
    pairs = crowded_pairs(init, means)
    wins = pair_wins(run_masses, orders, pairs)
    ranking = fit_ranking(wins, K)
    return {"tasks": tasks, "seed": seed, "permutations": permutations, "r2_symmetric": split.r2_symmetric,
            "crowding": crowding_table(split.specific, split.update, split.symmetric, init,
                                       shares_component(init, means)),
            "along_axis_fraction": mean_se(along_axis_fraction(split.specific, init, first, second)[same]),
            "covered": {"initial": mean_se(covered(init, means)), "model": mean_se(covered(direct, means)),
                        "symmetric": mean_se(covered(init + split.symmetric.to(init.dtype), means))},
            "attn_xc_mass_imbalance": {"model": float(mass_imbalance(masses[-1], pairs)),
                                       "permutation_averaged": float(mass_imbalance(run_masses.mean(0), pairs))},
            "ranking": ranking, "ranking_accuracy_in_sample": mean_se(ranking_accuracy(wins, ranking, tasks))}


# ----- driver --------------------------------------------------------------------------------------------------------


def run(models: list[str], settings: SlotSettings, out: Path, command: str, quick: bool) -> dict:
    from interp.model.checkpoint import load_model

    predictions = load_predictions()
    data = {"command": command, "quick": quick, "settings": asdict(settings),
            "exploration_seed": EXPLORATION_SEED, "threads": torch.get_num_threads(),
            "prediction_commit": file_commit(PREDICTIONS), "predictions_file": str(PREDICTIONS.relative_to(ROOT)),
            "models": {}}
    for name in models:
        model = load_model(name).eval()
        record = measure_model(name, model, settings, predictions)
        record["tests"]["H2"]["control_random_weights"] = h2_control(model, settings,
                                                                     record["tests"]["H2"]["measured"]["mean"])
        data["models"][name] = record
        write_json(data, out)
        print(f"{name}: {data['models'][name]['seconds']:.0f} s", file=sys.stderr, flush=True)
    return data


def add_controls(out: Path, models: list[str] | None, command: str) -> dict:
    """Compute H2's random-weight control (``h2_control``) for ``models`` (default: every model in ``out``) on the
    tasks recorded in ``out`` and merge it into their H2 records there (written after every model); no other figure
    changes. The model's H2 share is recomputed first and must equal the recorded one."""
    from interp.model.checkpoint import load_model

    try:
        data = json.loads(out.read_text())
        recorded = {name: record["tests"]["H2"]["measured"]["mean"] for name, record in data["models"].items()}
        settings = SlotSettings(**data["settings"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InvalidInput(f"--out {out} is not a results file of {PROG} with H2 records ({error!r})") from None
    missing = [name for name in models or () if name not in recorded]
    if missing:
        raise InvalidInput(f"--out {out} has no record of {', '.join(missing)}: run the study for it first")
    for name in [name for name in MODELS if name in recorded and (models is None or name in models)]:
        control = h2_control(load_model(name).eval(), settings, recorded[name])
        data["models"][name]["tests"]["H2"]["control_random_weights"] = {**control, "command": command}
        write_json(data, out)
        print(f"{name}: H2 control {control['mean']:.3f} (se {control['se']:.3f}), model {recorded[name]:.3f}; "
              f"{control['seconds']:.0f} s", file=sys.stderr, flush=True)
    return data


def summary(data: dict) -> str:
    lines = []
    for name, record in data["models"].items():
        lines.append(f"== {name} ({record['seconds']:.0f} s)")
        for key, test in record["tests"].items():
            measured = test["measured"]
            lines.append(f"  {key:12s} {measured['mean']:+.3f} (se {measured['se']:.3f}, {measured['tasks']} tasks)  "
                         f"predicted {test['rule']}  -> {test['verdict']}")
            if "control_random_weights" in test:
                control = test["control_random_weights"]
                lines.append(f"  {'':12s} control, random weights (seed {control['seed']}): {control['mean']:+.3f} "
                             f"(se {control['se']:.3f})")
        objective = record["objective"]
        lines.append("  objective: " + ", ".join(f"{key} {value['mean']:.3f}" for key, value in objective.items()
                                                 if isinstance(value, dict) and "mean" in value))
    return "\n".join(lines)


# ----- RESULTS.md ----------------------------------------------------------------------------------------------------


HYPOTHESES = ("H1a", "H1b", "H2", "H2b", "H3", "H3_swap", "H4_fixed", "H4_shuffled", "H5")
EXPLANATION = (  # (tests, the verdict the clause needs in every model, the clause or a function of the data giving
    #   it) of the "explains" bullet
    (("H3",), "confirmed", "the slot-specific part exists where centroids start in a shared component: with one "
                           "centroid per component it all but vanishes"),
    (("H1a",), "refuted", "it is not a push of a crowded pair to opposite sides"),
    (("H1b",), "confirmed", "it carries more than half of the first step's re-seeding of empty components"),
    (("H2",), "confirmed", lambda data: _h2_clause(data)),
    (("H2b",), "confirmed", "with no fixed priority among the slots"),
    (("H5",), "confirmed", "most of it enters through the slot codes that attn_xc's keys read"),
    (("H4_fixed", "H4_shuffled"), "confirmed", "under a fixed slot order the same push repeats from step to step, "
                                               "and a fresh random order per step decorrelates it at no extra "
                                               "compute"),
)
SHORT = {  # the table's description of each test (full definitions: analyses/predictions/slots.json)
    "H1a": "none (symmetric split): share of the slot-specific parts of the closest same-component pair along the "
           "pair's axis",
    "H1b": "the step replaced by its symmetric part: share of the one-step gain in covered components lost",
    "H2": "the slots of the closest same-component pair swapped: share of each other's slot-specific part taken over "
          "(1: the parts follow the slots, 0: the centroids); after the verdict, the same measure on a model of the "
          "same architecture with random weights (control)",
    "H2b": "none (the model's and the permuted runs): accuracy of a slot ranking fitted on the exploration tasks at "
           "naming the winner of attn_xc's mass in crowded pairs",
    "H3": "one centroid per component as the start: slot-specific variance / variance of the update",
    "H3_swap": "the slots of the two closest isolated centroids swapped: share of the way their outputs moved to each "
               "other's",
    "H4_fixed": "a trajectory in the fixed slot order: cosine of the slot-specific parts of consecutive steps",
    "H4_shuffled": "a trajectory with a fresh random slot order per step: the same cosine",
    "H5": "attn_xc's keys made slot-blind: slot-specific variance left / the intact model's",
}


def _m(measured: dict, digits: int = 3) -> str:
    return f"{fixed(measured['mean'], digits)} (se {fixed(measured['se'], digits)})"


def _rule(prediction: dict) -> str:
    """The prediction's rule as a bound: "≥ 0.800", "≤ 0.279" or "0.000 ± 0.100"."""
    value, tolerance, kind = prediction["value"], prediction["tolerance"], prediction["kind"]
    if kind == "at_least":
        return f"≥ {value - tolerance:.3f}"
    if kind == "at_most":
        return f"≤ {value + tolerance:.3f}"
    return f"{value:.3f} ± {tolerance:.3f}"


def _margin(test: dict) -> float:
    """Distance of the measured mean inside (+) or outside (-) the prediction's bound, in standard errors."""
    prediction, measured = test["prediction"], test["measured"]
    value, tolerance, mean = prediction["value"], prediction["tolerance"], measured["mean"]
    if prediction["kind"] == "at_least":
        inside = mean - (value - tolerance)
    elif prediction["kind"] == "at_most":
        inside = value + tolerance - mean
    else:
        inside = tolerance - abs(mean - value)
    return inside / measured["se"] if measured["se"] and math.isfinite(measured["se"]) else math.nan


def _z(test: dict) -> float:
    """The measured mean in standard errors."""
    measured = test["measured"]
    return measured["mean"] / measured["se"] if measured["se"] else math.nan


def _verdict(test: dict) -> str:
    return f"**{test['verdict']}**"


def _control(data: dict, name: str) -> dict | None:
    """H2's random-weight control of model ``name`` (``h2_control``), or None where none is recorded."""
    return data["models"][name]["tests"]["H2"].get("control_random_weights")


def _controls(data: dict) -> dict[str, dict] | None:
    """H2's random-weight controls of every model, or None unless every model has one."""
    controls = {name: _control(data, name) for name in data["models"]}
    return controls if all(controls.values()) else None


def _control_budget(data: dict) -> str:
    controls = _controls(data)
    if controls is None:
        return "no random-weight control of H2 recorded"
    seeds = sorted({seed["seed"] for control in controls.values() for seed in control["seeds"]})
    return (f"H2's control on random weights of seeds {', '.join(str(seed) for seed in seeds)} (seed "
            f"{next(iter(controls.values()))['seed']} in the table)")


def _control_time(data: dict, name: str) -> str:
    control = _control(data, name)
    return f" (+ H2's control {control['seconds'] / 60:.1f} min)" if control and "seconds" in control else ""


def _control_meets_prediction(data: dict) -> bool:
    """Every model's random-weight control alone meets H2's committed prediction."""
    controls = _controls(data)
    return controls is not None and all(
        verdict(Prediction(**record["tests"]["H2"]["prediction"]), controls[name]["mean"]) == "confirmed"
        for name, record in data["models"].items())


def _h2_clause(data: dict) -> str:
    """The H2 clause of the "explains" bullet: as much as the random-weight control allows."""
    controls = _controls(data)
    if controls is None:
        return ("the slots, not the positions, set which centroid of a crowded pair does what (no random-weight "
                "control recorded)")
    figures = ", ".join(f"{name} {fixed(control['mean'])}" for name, control in controls.items())
    if _control_meets_prediction(data):
        return ("swapping a crowded pair's slots swaps their slot-specific parts, as it does with random weights of "
                f"the same architecture ({figures}), so this shows only that the part goes with the slots, not that "
                "the learned roles are specific")
    if all(-control["difference_from_model"]["mean"] > 2 * control["difference_from_model"]["se"]
           for control in controls.values()):
        return ("the slots, not the positions, set which centroid of a crowded pair does what, more so than in a "
                f"model of the same architecture with random weights ({figures})")
    return ("the slot-specific parts of a crowded pair go with the slots when the slots are swapped; a model of the "
            f"same architecture with random weights gives {figures}, not distinguishably less in every model")


def results_section(data: dict) -> str:
    """The RESULTS.md section (between ``<!-- study:slots -->`` markers); every figure is read from ``data``."""
    models = list(data["models"])
    settings = data["settings"]
    commit = data["prediction_commit"]
    lines = ["## The slot-specific part, explained by interventions (`python -m analyses.slots`)", "",
             f"Command: `{data['command']}`  ", f"Section: `{SECTION_COMMAND}` (from analyses/results/slots.json)  ",
             f"Predictions: `{data['predictions_file']}`, committed before the run in {commit['commit'] or 'n/a'}"
             + (" (the file has changed since)" if commit.get("modified_since") else "") + "  ",
             f"Budget: {settings['tasks']} held-out tasks of the main configuration (n=512, d=32, k=10, random "
             f"starts, seed {settings['seed']}; the hypotheses were designed on other tasks, seed "
             f"{data['exploration_seed']}); symmetric part from {settings['permutations']} slot permutations; "
             f"trajectories on {min(settings['trajectory_tasks'], settings['tasks'])} tasks x {settings['steps']} "
             f"steps, {settings['trajectory_permutations']} permutations per step; slot-averaged model with "
             f"{settings['average_permutations']} permutations per step; " + _control_budget(data)
             + f"; {data['threads']} thread(s). Run time: "
             + ", ".join(f"{name} {data['models'][name]['seconds'] / 60:.1f} min" + _control_time(data, name)
                         for name in models)
             + (". **Quick run (CI size): figures are not the study's.**" if data.get("quick") else ""), ""]

    lines += ["Crowding: by quartile of the distance from a centroid to its nearest other centroid (closest first), "
              "the mean norm of the slot-specific part / of the update / of the symmetric part, and the share of "
              "centroids that start in a true component holding another centroid:", ""]
    header = "| quartile | " + " | ".join(f"{name}: nn distance | slot-specific / update / symmetric | same component"
                                          for name in models) + " |"
    lines += [header, "|---|" + "---|---|---|" * len(models)]
    for quartile in range(QUARTILES):
        cells = []
        for name in models:
            row = data["models"][name]["crowding"][quartile]
            cells += [fixed(row["nn_distance"]), f"{fixed(row['specific'])} / {fixed(row['update'])} / "
                      f"{fixed(row['symmetric'])}", fixed(row["shares_component"], 2)]
        lines.append(f"| {quartile + 1} | " + " | ".join(cells) + " |")
    lines.append("")

    lines += ["Each hypothesis, its intervention and measurement (the full definitions are in the predictions file), "
              "the prediction committed before the run (the rule of `analyses.failures.verdict` on the mean over "
              "tasks) and the measured value (mean over tasks, standard error) with its verdict:", "",
              "| hypothesis | intervention: measured quantity | predicted | " + " | ".join(models) + " |",
              "|---|---|---|" + "---|" * len(models)]
    for key in HYPOTHESES:
        tests = [data["models"][name]["tests"][key] for name in models]
        lines.append(f"| {key} | {SHORT[key]} | {_rule(tests[0]['prediction'])} | "
                     + " | ".join(f"{_m(test['measured'])} {_verdict(test)}"
                                  + (f"; random weights {_m(test['control_random_weights'])}"
                                     if "control_random_weights" in test else "") for test in tests) + " |")
    lines.append("")

    objective_keys = ["model", "one_random_order_per_step", f"slot_averaged_{settings['average_permutations']}",
                      "lloyd"]
    labels = {"model": "model (fixed slot order)", "one_random_order_per_step": "one random slot order per step (1x)",
              f"slot_averaged_{settings['average_permutations']}":
                  f"slot-averaged ({settings['average_permutations']} orders per step)", "lloyd": "Lloyd"}
    lines += [f"Mean log objective after {settings['steps']} steps from the same starts (standard error over tasks; "
              "difference from the model's fixed order, with the standard error of the per-task differences):", "",
              "| run | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    lines.append("| initial | " + " | ".join(_m(data["models"][name]["objective"]["initial"]) for name in models)
                 + " |")
    for key in objective_keys:
        cells = []
        for name in models:
            objective = data["models"][name]["objective"]
            cell = _m(objective[key])
            if key != "model":
                difference = objective["difference_from_model"][key]
                cell += f"; {fixed(difference['mean'], sign=True)} (se {fixed(difference['se'])})"
            cells.append(cell)
        lines.append(f"| {labels[key]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += _reading(data)
    return "\n".join(lines) + "\n"


def _each(data: dict, value, digits: int = 3) -> str:
    """``value(record)`` of every model, as "main-onehot 0.123, main-binary 0.456"."""
    return ", ".join(f"{name} {fixed(value(record), digits)}" for name, record in data["models"].items())


def _tested(data: dict, key: str, digits: int = 3) -> str:
    """A test's measured means, rule and verdicts: "main-onehot 0.123 (se 0.004), ... (predicted ...): confirmed /
    refuted"."""
    tests = {name: record["tests"][key] for name, record in data["models"].items()}
    measured = ", ".join(f"{name} {fixed(test['measured']['mean'], digits)} "
               f"(se {fixed(test['measured']['se'], digits)}; "
                         f"{fixed(_margin(test), 1, sign=True)} se from the bound)" for name, test in tests.items())
    verdicts = sorted({test["verdict"] for test in tests.values()})
    said = verdicts[0] if len(verdicts) == 1 else "; ".join(f"{name} {test['verdict']}" for name, test in tests.items())
    return f"{measured} (predicted {_rule(next(iter(tests.values()))['prediction'])}): **{said}**"


def _h2_control_sentences(data: dict) -> str:
    """The H2 bullet's control: the figures of ``h2_control`` and what H2's measure does and does not show given
    them (ending with a space)."""
    controls = _controls(data)
    if controls is None:
        return ("No random-weight control is recorded (`--controls-only` adds it): whether the measure tells these "
                "models from any slot-dependent one is not known. ")
    first = next(iter(controls.values()))
    seeds = "; ".join(f"{name} " + " / ".join(fixed(seed["mean"]) for seed in control["seeds"])
                      for name, control in controls.items())
    spread = lambda key: ", ".join(  # noqa: E731
        f"{name} {fixed(control['slot_specific_over_update'][key]['mean'], 5 if key == 'random_weights' else 3)}"
        for name, control in controls.items())
    text = ("*Control* (the same measure, tasks, starts, permutations and pairs, through the same code, on a model of "
            "the same architecture with random weights: `KMeansTransformer(learned_model_config(32, 10, embedding))` "
            f"initialised after `torch.manual_seed({first['seed']})`): "
            + ", ".join(f"{name} {_m(control)}" for name, control in controls.items())
            + f" (seeds {', '.join(str(seed['seed']) for seed in first['seeds'])}: {seeds}); random weights minus "
            "the learned model, paired by task: "
            + ", ".join(f"{name} {fixed(control['difference_from_model']['mean'], sign=True)} "
                        f"(se {fixed(control['difference_from_model']['se'])})" for name, control in controls.items())
            + ". The random-weight models' slot-specific part is small (slot-specific variance / update variance "
            + spread("random_weights") + ", against the learned models' " + spread("model") + "; the swap moves the "
            "pair's outputs by " + ", ".join(f"{name} {fixed(control['change_over_update']['mean'])}"
                                             for name, control in controls.items())
            + " of their update's norm). ")
    if _control_meets_prediction(data):
        text += ("Random weights alone meet the prediction: the parts follow the slots in a slot-dependent model "
                 "with no trained roles at all, so this measure shows that the learned models' slot-specific part "
                 "goes with the slots rather than with the positions, not that the learned roles are specific; what "
                 "tells the learned models apart in this swap is the size of the part it moves, not the way it goes"
                 + ("" if not all(control["difference_from_model"]["mean"] > 2 * control["difference_from_model"]["se"]
                                  for control in controls.values())
                    else " (and the learned models' parts follow the slots less than random weights' do)") + ". ")
    else:
        text += "Random weights alone do not meet the prediction in every model. "
    return text + ("Swapping the pair's positions with the slots kept is the same input to the model (the share read "
                   "by position is 1 minus this one), so it is no separate control. ")


def _reading(data: dict) -> list[str]:
    """The bullet points: every mechanistic sentence names its intervention and measurement and says the verdict."""
    records = data["models"]
    steps = data["settings"]["steps"]
    averaged = f"slot_averaged_{data['settings']['average_permutations']}"
    first = next(iter(records.values()))
    lines = ["### Reading", "",
             "Brackets after a measured value: its standard error over tasks and how many standard errors the mean "
             "lies inside (+) or outside (-) the predicted bound.", ""]
    lines.append(
        "* **Where it is** (crowding table, symmetric split). The two closest quartiles are exactly the centroids that "
        "start in a true component holding another centroid (share "
        + _each(data, lambda r: r["crowding"][0]["shares_component"], 2) + " in the closest quartile); there the "
        "slot-specific part's mean norm is " + _each(data, lambda r: r["crowding"][0]["specific"]) + " against an "
        "update of " + _each(data, lambda r: r["crowding"][0]["update"]) + "; in the farthest quartile (no shared "
        "component) " + _each(data, lambda r: r["crowding"][3]["specific"]) + " against "
        + _each(data, lambda r: r["crowding"][3]["update"]) + f". Random starts cover "
        f"{fixed(first['tests']['H1b']['covered']['initial']['mean'], 2)} of the 10 components on average, so most "
        "tasks "
        "have shared and empty components.")
    lines.append(
        "* **H1a, a push apart along the pair's axis** (symmetric split; the slot-specific parts of the closest "
        "same-component pair projected on the line through the two): share along the axis " + _tested(data, "H1a")
        + ". The slot-specific part of a crowded pair is not a push to opposite sides.")
    lines.append(
        "* **H1b, re-seeding** (one step of the model replaced by its symmetric part; components covered, a component "
        "counting when it is the nearest of some centroid): covered after the model's step "
        + _each(data, lambda r: r["tests"]["H1b"]["covered"]["model"]["mean"], 2) + ", after the symmetric part "
        + _each(data, lambda r: r["tests"]["H1b"]["covered"]["symmetric"]["mean"], 2) + "; share of the model's gain "
        "lost without the slot-specific part " + _tested(data, "H1b") + ". In the same runs attn_xc's mass is split "
        "unevenly within crowded pairs (|m_i - m_j| / (m_i + m_j): model's run "
        + _each(data, lambda r: r["attn_xc_mass_imbalance"]["model"], 2) + "; the masses averaged over the "
        "permutations " + _each(data, lambda r: r["attn_xc_mass_imbalance"]["permutation_averaged"], 2) + ").")
    lines.append(
        "* **H2, slots or positions** (the slots of the closest same-component pair swapped): share of each "
        "other's slot-specific part taken over " + _tested(data, "H2") + "; the swap moves the pair's outputs by "
        + _each(data, lambda r: r["tests"]["H2"]["change_over_update"]["mean"], 2) + " of their update's norm and "
        + _each(data, lambda r: r["tests"]["H2"]["outputs_traded"]["mean"], 2) + " of the way to each other's output. "
        + _h2_control_sentences(data) + "**H2b, no fixed priority** (no intervention; the model's and the permuted "
        "runs): a slot ranking fitted on the exploration tasks names the slot that takes more of attn_xc's mass in a "
        "crowded pair with accuracy "
        + _tested(data, "H2b") + ".")
    lines.append(
        "* **H3, isolated centroids** (starts with one centroid per true component in place of random starts): "
        "slot-specific variance / update variance " + _tested(data, "H3") + ", against "
        + _each(data, lambda r: r["tests"]["H3"]["random_starts"]["mean"]) + " from random starts on the same points: "
        "without a shared component the slot-specific part all but vanishes. Swapping the slots of the two closest "
        "isolated centroids of a random start: share of the way their outputs moved to each other's "
        + _tested(data, "H3_swap") + ". That measure is insensitive (isolated outputs lie far apart): the same swap "
        "moves their outputs by " + _each(data, lambda r: r["tests"]["H3_swap"]["change_over_update"]["mean"], 2)
        + " of their update's norm and transfers " + _each(
            data, lambda r: r["tests"]["H3_swap"]["specific_taken_over"]["mean"], 2) + " of each other's slot-specific "
        "part, so in a task with shared components the isolated centroids carry a slot-specific part too; it is "
        "the shared components, not the crowding of the centroid itself, that the one-per-component start removes.")
    lines.append(
        f"* **H4, a bias under a fixed order** ({steps}-step trajectories, each step's slot-specific part against "
        "fresh permutations, tracked by centroid): cosine of consecutive steps with the fixed order "
        + _tested(data, "H4_fixed", 2) + "; with a fresh random order per step " + _tested(data, "H4_shuffled", 2)
        + ". With a fixed order the slot-specific push repeats from step to step; a fresh order decorrelates it."
        + "".join(f" With a fresh order {name}'s residual cosine is "
          f"{fixed(abs(_z(record['tests']['H4_shuffled'])), 1)} "
                  "standard errors from 0: the argument behind that prediction fixes the expected inner product of "
                  "consecutive parts at 0, not their mean cosine." for name, record in records.items()
                  if abs(_z(record["tests"]["H4_shuffled"])) > 3))
    lines.append(
        "* **H5, attn_xc's keys** (a copy of the model whose attn_xc key matrix reads the mean code, `slot_blind`): "
        "slot-specific variance left " + _tested(data, "H5") + "; its one-step mean log objective "
        + _each(data, lambda r: r["tests"]["H5"]["one_step_log_objective"]["slot_blind"]["mean"]) + " (intact "
        + _each(data, lambda r: r["tests"]["H5"]["one_step_log_objective"]["intact"]["mean"]) + ") and components "
        "covered after one step " + _each(data, lambda r: r["tests"]["H5"]["covered_after_one_step"]["slot_blind"]
                                          ["mean"], 2)
        + " (intact " + _each(data, lambda r: r["tests"]["H5"]["covered_after_one_step"]["intact"]["mean"], 2) + ").")
    lines.append(
        f"* **{steps} steps** (mean log objective, same starts): model with its fixed order "
        + _each(data, lambda r: r["objective"]["model"]["mean"]) + "; one random slot order per step (1x compute) "
        + _each(data, lambda r: r["objective"]["one_random_order_per_step"]["mean"]) + "; slot-averaged ("
        f"{data['settings']['average_permutations']} orders per step) "
        + _each(data, lambda r: r["objective"][averaged]["mean"]) + "; Lloyd "
        + _each(data, lambda r: r["objective"]["lloyd"]["mean"]) + ".")
    explained, unsupported = [], []
    for keys, wanted, clause in EXPLANATION:
        clause = clause(data) if callable(clause) else clause
        holds = all(record["tests"][key]["verdict"] == wanted for record in records.values() for key in keys)
        (explained if holds else unsupported).append(f"{clause} ({', '.join(keys)})")
    if explained:
        lines.append("* **What this explains** (the clauses whose predictions came out as their hypothesis needs, in "
                     "every model): " + "; ".join(explained) + ".")
    if unsupported:
        lines.append("* **Not supported by this run:** " + "; ".join(unsupported) + ".")
    lines.append(
        "* **What it does not explain.** The direction of the slot-specific part beyond the pair's axis (H1a measures "
        "only that); the part of the re-seeding that the symmetric part keeps (H1b); how the pair of slot codes and "
        "the geometry decide which centroid wins (H2b rules out only a fixed ranking)" + (
            "; whether the learned models' slot-specific part follows the slots in a way a slot-dependent model with "
            "random weights does not (H2's measure meets its prediction for random weights too)"
            if _control_meets_prediction(data) else "") + "; where the slot-specific "
        "variance left with slot-blind attn_xc keys (H5) enters. That the repeated push is "
        f"what costs the fixed order its {steps}-step objective is an inference from H4 and the objective table, not "
        "tested by an intervention of its own.")
    verdicts = [test["verdict"] for record in records.values() for test in record["tests"].values()]
    lines.append(f"* **Verdicts.** {verdicts.count('confirmed')} confirmed, {verdicts.count('refuted')} refuted of "
                 f"{len(verdicts)} predictions (hypotheses x models).")
    return lines


def write_results_md(out: Path = DEFAULT_OUT, results_md: Path | None = None) -> str:
    """Write the section from the JSON into RESULTS.md (``analyses._studies.write_section``); returns it."""
    from analyses._studies import RESULTS_MD, write_section

    text = results_section(json.loads(Path(out).read_text()))
    write_section(SECTION_KEY, text, results_md or RESULTS_MD)
    return text


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI size: 8 tasks, 8 permutations, 5 steps")
    parser.add_argument("--tasks", type=arguments.int_at_least(4), default=None,
                        help=f"held-out tasks (default {SlotSettings.tasks}, --quick {QUICK.tasks}; four at least)")
    parser.add_argument("--seed", type=arguments.seed, default=None,
                        help=f"seed of the held-out tasks (default {HELD_OUT_SEED}; not the exploration seed "
                             f"{EXPLORATION_SEED})")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=None, help="default: both")
    parser.add_argument("--threads", type=arguments.threads, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--results-md", action="store_true", help="put the section into analyses/RESULTS.md")
    parser.add_argument("--from-json", action="store_true", help="compute nothing: only write the RESULTS.md section "
                        "from --out")
    parser.add_argument("--controls-only", action="store_true", help="compute only H2's random-weight control on the "
                        "tasks recorded in --out and merge it into --out's H2 records (about 1-2 min per model)")
    args = parser.parse_args(argv)
    if args.from_json and not args.results_md:
        raise InvalidInput("--from-json only writes the RESULTS.md section: add --results-md")
    if args.controls_only and args.from_json:
        raise InvalidInput("--controls-only computes the control, --from-json nothing: give one of them")
    if args.controls_only and (args.quick or args.tasks is not None or args.seed is not None):
        raise InvalidInput("--controls-only measures on the tasks recorded in --out: drop --quick, --tasks and --seed")
    if args.seed in (EXPLORATION_SEED, EXPLORATION_SEED + 1):
        raise InvalidInput(f"--seed {args.seed}: the hypotheses were designed on the tasks of seed {EXPLORATION_SEED};"
                           " give held-out tasks another seed")
    if args.results_md:
        from analyses._studies import RESULTS_MD

        check_output_file(RESULTS_MD, "--results-md")
    if args.from_json:
        return section_from_json(args.out, write_results_md)
    check_output_file(args.out, "--out")
    command = ("python -m analyses.slots " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    if args.controls_only:
        if not args.out.is_file():
            raise InvalidInput(f"--controls-only adds to --out {args.out}, which does not exist or is not a file")
        data = add_controls(args.out, args.models, command)
    else:
        load_predictions()
        settings = QUICK if args.quick else SlotSettings()
        settings = replace(settings, seed=HELD_OUT_SEED if args.seed is None else args.seed,
                           tasks=args.tasks or settings.tasks)
        data = run([name for name in MODELS if name in (args.models or MODELS)], settings, args.out, command,
                   args.quick)
    print(summary(data))
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.results_md:
        write_results_md(args.out)
    return data


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="nothing is kept unless a model finished (then it is in --out)"))
