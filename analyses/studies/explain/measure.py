"""What the learned models compute: every figure of the explanation instruments, written to a committed JSON.

For main-onehot, main-binary, main-none (the shipped checkpoints) and ``construction`` (the exact one-hot construction,
``lloyd_transformer(32, 10, 1, "onehot")``, float64), on unseen tasks of the main configuration (n = 512, d = 32,
k = 10, random initial centroids), one step from the initial centroids unless stated:

* ``decompose`` (``interp.instruments.decompose``): the update's exact parts by path (attn_cc; attn_cx reading the
  raw point stream, what attn_xc wrote, what attn_xx wrote, its value bias), their variance shares and cosines with
  Lloyd's update, the largest |sum of parts - update|, and attn_cx's pattern recomputed from partial key streams;
* ``kernels`` (``interp.instruments.kernels``): each attention's metric (eigenvalues of its Q^T K data block) and
  code block from the weights, and its measured inverse temperature, temperature and half-weight distance;
* ``symmetry`` (``interp.instruments.symmetry``): the symmetric part (average over random slot permutations) and the
  slot-specific remainder, the convergence of the estimate with the number of permutations, which paths carry the
  slot-specific part, how much of it each symmetrised group of code blocks removes, attn_xc's mass per slot;
* ``distill`` (``interp.instruments.distill``): every family x kernel fitted to the symmetric part of the update on
  training-distribution tasks, scored on the unseen tasks (R^2 of the symmetric part and of the raw update), and
  iterated for 20 steps beside the model, the slot-averaged model and Lloyd; the best family's R^2 along the
  slot-averaged model's trajectory, with the ceiling its Monte Carlo noise allows.

Run from the repository root (every section is resumable: results are merged into the existing JSON):

    python -m analyses.studies.explain.measure [--only decompose symmetry ...] [--models main-onehot ...] [--tasks 128]
                               [--permutations 64] [--out analyses/results/explain.json] [--results-md]

``--results-md`` puts the tables into analyses/RESULTS.md (between ``<!-- study:explain -->`` markers) from the JSON
and, when it exists, analyses/results/failures.json (``python -m analyses.studies.failures.measure``: each failure
case's prediction vs measurement); ``--from-json`` computes nothing and only rewrites that section from the files
(seconds):

    python -m analyses.studies.explain.measure --from-json --results-md
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from analyses import _studies
from analyses._shared import EXPLAIN_TEST_SEED, draw_tasks, file_commit, section_from_json, write_json
from analyses.framework.formatting import fixed, scientific
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file

PROG = "python -m analyses.explain"
HERE = _studies.HERE  # the analyses/ folder
DEFAULT_OUT = HERE / "results" / "explain.json"
FAILURES = HERE / "results" / "failures.json"
SECTION_COMMAND = "python -m analyses.explain --from-json --results-md"
MODELS = ("main-onehot", "main-binary", "main-none", "construction")
SECTIONS = ("decompose", "kernels", "symmetry", "distill")
TEST_SEED = EXPLAIN_TEST_SEED  # unseen tasks (not the training or evaluation seeds)
FIT_SEED = 20261401  # training-distribution tasks the distilled algorithms are fitted on
VALIDATION_SEED = 20261451  # tasks that choose among the fitted families (disjoint from fit and test)
GOAL_R2_SYMMETRIC = 0.90
GOAL_OBJECTIVE_GAP = 0.02
GOAL_R2_UPDATE = 0.85  # the whole-update algorithm: held-out R^2 of the raw one-step update
GOAL_MODEL_GAP = 0.05  # ... and its 20-step mean log objective within this of the model's own (fixed slot order)
PREDICTIONS = HERE / "predictions" / "distill.json"
ALONG_STEPS = (1, 2, 5, 10, 20)
STILL = 1e-4  # an update rms below this (the model at a fixed point) gives no meaningful R^2
# The most slot permutations a run averages over (each is one model step on every task); the committed run uses 64
# and its convergence table 256
MAX_PERMUTATIONS = 100_000


@dataclass(frozen=True)
class ExplainSettings:
    """Sizes of the run; every figure is seeded."""

    tasks: int = 128  # unseen tasks (decomposition, symmetric split, distilled scores, 20-step objectives)
    fit_tasks: int = 128  # training-distribution tasks the distilled algorithms are fitted on (symmetric part)
    raw_fit_tasks: int = 1024  # training-distribution tasks of the whole-update fits (the model's one step)
    validation_tasks: int = 128  # tasks that choose the family x kernel (VALIDATION_SEED)
    permutations: int = 64  # slot permutations of the symmetric part (targets of the distillation too)
    convergence: int = 256  # largest number of permutations in the convergence table
    path_tasks: int = 32  # tasks of the path split of the slot-specific part
    block_tasks: int = 32  # tasks of the block symmetrisation
    block_permutations: int = 16  # permutations per symmetrised model
    kernel_tasks: int = 16  # tasks of the measured kernels (attn_xx forms (b, n, n) scores)
    average_permutations: int = 8  # permutations per step of the slot-averaged model (the goal's reference)
    other_average_permutations: tuple[int, ...] = (1, 32)  # also run for models that read slot identity
    steps: int = 20


QUICK = ExplainSettings(tasks=6, fit_tasks=6, raw_fit_tasks=8, validation_tasks=6, permutations=3, convergence=4,
                        path_tasks=3, block_tasks=3, block_permutations=2, kernel_tasks=3, average_permutations=2,
                        other_average_permutations=(1,), steps=3)


def load(name: str):
    """A shipped checkpoint, or ``construction``: the exact one-hot construction of d = 32, k = 10 (float64)."""
    from interp.constructions import lloyd_transformer
    from interp.model.checkpoint import load_model

    if name == "construction":
        return lloyd_transformer(32, 10, 1, embedding="onehot")
    return load_model(name)


def model_name(text: str) -> str:
    """An argparse type: what ``load`` takes, ``construction`` or a shipped checkpoint name or path."""
    return text if text == "construction" else arguments.checkpoint(text)


class Symmetric:
    """The mapped-back permuted outputs of one model on one task set, computed once and shared by the sections."""

    def __init__(self, model, points, centroids, count: int, seed: int):
        from interp.instruments.symmetry import model_step, permuted_outputs, slot_permutations

        self.step = model_step(model)
        self.points, self.centroids = points, centroids
        self.permutations = slot_permutations(model.config.k, count, seed)
        self.outputs = permuted_outputs(self.step, points, centroids, self.permutations)  # (M, b, k, d)
        self.update = self.step(points, centroids) - centroids  # (b, k, d)

    def split(self, count: int):
        from interp.instruments.symmetry import split_from_outputs

        return split_from_outputs(self.update, self.outputs[:count], self.centroids, exhaustive=False)


# ----- sections ----------------------------------------------------------------------------------------------------


def decompose_section(model, points, centroids) -> dict:
    from interp.instruments.decompose import decompose_update, path_statistics, pattern_patching

    decomposition = decompose_update(model, points, centroids)
    return {
        "max_abs_sum_error": decomposition.residual,
        "update_rms": float(decomposition.update.pow(2).mean().sqrt()),
        "paths": [asdict(row) for row in path_statistics(decomposition.parts, decomposition.update,
                                                          decomposition.lloyd_update)],
        "fine_paths": [asdict(row) for row in path_statistics(decomposition.fine_parts, decomposition.update,
                                                               decomposition.lloyd_update)],
        "pattern_patching": [asdict(row) for row in pattern_patching(model, points, centroids)],
    }


def kernels_section(model, points, centroids) -> dict:
    from interp.instruments.kernels import measure_kernels, weight_kernels

    return {"weights": [asdict(row) for row in weight_kernels(model)],
            "measured": [asdict(row) for row in measure_kernels(model, points, centroids)]}


def symmetry_section(model, symmetric: Symmetric, settings: ExplainSettings) -> dict:
    from interp.instruments.symmetry import (
        block_groups,
        block_symmetrisation,
        convergence_from_outputs,
        slot_mass,
        slot_permutations,
        specific_by_path,
    )

    split = symmetric.split(settings.permutations)
    counts = [2 ** e for e in range(int(math.log2(settings.convergence)) + 1)]
    record = {
        "n_permutations": split.n_permutations,
        "r2_symmetric": split.r2_symmetric,
        "r2_symmetric_corrected": split.r2_symmetric_corrected,
        "symmetric_share": split.symmetric_share,
        "specific_share": split.specific_share,
        "permutation_spread": split.permutation_spread,
        "monte_carlo_error": split.monte_carlo_error,
        "mean_abs_permutation_change": float((symmetric.outputs[0].double() - symmetric.centroids.double()
                                              - split.update).abs().mean()),
        "mean_abs_update": float(split.update.abs().mean()),
        "convergence": convergence_from_outputs(symmetric.update, symmetric.outputs, symmetric.centroids, counts),
        "slot_mass": slot_mass(model, symmetric.points, symmetric.centroids),
    }
    points, centroids = symmetric.points[:settings.path_tasks], symmetric.centroids[:settings.path_tasks]
    by_path = specific_by_path(model, points, centroids, symmetric.permutations[:settings.permutations])
    record["paths"] = {"symmetric_shares": by_path["symmetric_shares"], "specific_shares": by_path["specific_shares"],
                       "fine_symmetric_shares": by_path["fine_symmetric_shares"],
                       "fine_specific_shares": by_path["fine_specific_shares"]}
    groups = block_groups(model)
    if groups:
        points, centroids = symmetric.points[:settings.block_tasks], symmetric.centroids[:settings.block_tasks]
        permutations = slot_permutations(model.config.k, settings.block_permutations, TEST_SEED + 7)
        record["blocks"] = block_symmetrisation(model, points, centroids, groups, permutations)
    return record


def distill_section(model, symmetric: Symmetric, settings: ExplainSettings, name: str = "") -> dict:
    """Every distilled family fitted twice: to the symmetric part of the update (``fits``, 128 fit tasks) and to the
    raw update (``whole``, ``raw_fit_tasks`` fit tasks); each choice among them is made on the validation tasks
    (VALIDATION_SEED), never on the test tasks, whose figures are reported for every row. ``name``: the model's name
    in the predictions file."""
    from interp.algorithms import lloyd, log_objective
    from interp.instruments.decompose import r2_score
    from interp.instruments.distill import FAMILIES, attention_kernel, euclidean_kernel, fit_distilled
    from interp.instruments.symmetry import slot_averaged_run

    fit_points, fit_init = draw_tasks(model, settings.fit_tasks, FIT_SEED)
    fit_symmetric = Symmetric(model, fit_points, fit_init, settings.permutations, FIT_SEED + 2)
    fit_targets = fit_init.double() + fit_symmetric.split(settings.permutations).symmetric  # (b, k, d)
    validation = draw_tasks(model, settings.validation_tasks, VALIDATION_SEED)
    validation_symmetric = Symmetric(model, *validation, settings.permutations, VALIDATION_SEED + 2)
    validation_split = validation_symmetric.split(settings.permutations)
    split = symmetric.split(settings.permutations)
    points, init = symmetric.points, symmetric.centroids
    test_targets = init.double() + split.symmetric
    raw_targets = init.double() + split.update

    def mean_log_objective(centroids) -> float:
        return float(log_objective(points, centroids.detach().to(points.dtype)).mean())

    averaged = slot_averaged_run(model, points, init, settings.steps, settings.average_permutations, TEST_SEED + 3)
    with torch.no_grad():
        model_trajectory = model.eval()(points, init, steps=settings.steps).centroid_trajectory  # (b, T + 1, k, d)
    model_output = model_trajectory[:, -1]
    references = {
        "model": mean_log_objective(model_output),
        "slot_averaged": mean_log_objective(averaged.trajectory[:, -1]),
        "lloyd": mean_log_objective(lloyd(points, init, settings.steps).centroids),
        "initial": mean_log_objective(init),
    }
    by_count = {settings.average_permutations: references["slot_averaged"]}
    if split.permutation_spread > 1e-9:  # reads slot identity: how the average depends on the permutations per step
        for count in settings.other_average_permutations:
            run = slot_averaged_run(model, points, init, settings.steps, count, TEST_SEED + 3)
            by_count[count] = mean_log_objective(run.trajectory[:, -1])
    references["slot_averaged_by_permutations"] = {str(count): by_count[count] for count in sorted(by_count)}
    kernels = {"euclidean": euclidean_kernel(), "attn_xc": attention_kernel(model)}
    fits, algorithms = [], []
    for family in FAMILIES:
        for kernel_name, kernel in kernels.items():
            started = time.perf_counter()
            fit = fit_distilled(family, kernel, fit_points, fit_init, fit_targets)
            algorithm = fit.algorithm
            trajectory = algorithm.run(points.double(), init.double(), settings.steps)
            with torch.no_grad():
                predicted = algorithm.step(points, init) - init.double()
                validation_predicted = algorithm.step(*validation) - validation[1].double()
            fits.append({"family": family, "kernel": kernel_name, "parameters": algorithm.parameters,
                         "n_parameters": fit.n_parameters, "n_fitted": fit.n_fitted, "n_read": fit.n_read,
                         "r2_fit": fit.r2_fit,
                         "r2_validation": r2_score(validation_predicted, validation_split.symmetric),
                         "r2_symmetric": r2_score(predicted, test_targets - init.double()),
                         "r2_update": r2_score(predicted, raw_targets - init.double()),
                         "log_objective": mean_log_objective(trajectory[:, -1]),
                         "seconds": time.perf_counter() - started})
            algorithms.append(algorithm)
    chosen = max(range(len(fits)), key=lambda index: fits[index]["r2_validation"])  # validation only
    best, best_algorithm = fits[chosen], algorithms[chosen]
    along = []
    for step in range(settings.steps):
        current, following = averaged.trajectory[:, step].double(), averaged.trajectory[:, step + 1].double()
        with torch.no_grad():
            predicted = best_algorithm.step(points, current.to(points.dtype)) - current
        actual = following - current
        noise = float(averaged.permutation_spread[step]) / averaged.n_permutations  # Monte Carlo error / Var
        scale = float((predicted * actual).sum() / (predicted * predicted).sum())  # least-squares gain on the update
        along.append({"step": step + 1, "r2": r2_score(predicted, actual), "ceiling": 1 - noise,
                      "update_rms": float(actual.pow(2).mean().sqrt()), "gain": scale})
    best_objective = min(fits, key=lambda row: row["log_objective"])
    return {
        "fit_tasks": settings.fit_tasks, "test_tasks": settings.tasks, "n_permutations": settings.permutations,
        "validation_tasks": settings.validation_tasks,
        "seeds": {"fit": FIT_SEED, "validation": VALIDATION_SEED, "test": TEST_SEED},
        "average_permutations": settings.average_permutations, "steps": settings.steps,
        "references": references,
        "slot_averaged_spread": averaged.permutation_spread.tolist(),
        "fits": fits,
        "best": {"family": best["family"], "kernel": best["kernel"], "selected_on": "validation",
                 "r2_validation": best["r2_validation"], "r2_symmetric": best["r2_symmetric"],
                 "r2_update": best["r2_update"], "log_objective": best["log_objective"]},
        "best_objective": {"family": best_objective["family"], "kernel": best_objective["kernel"],
                           "log_objective": best_objective["log_objective"]},
        "best_along_slot_averaged": along,
        "goal_r2_symmetric": best["r2_symmetric"] >= GOAL_R2_SYMMETRIC,
        "goal_objective": abs(best["log_objective"] - references["slot_averaged"]) <= GOAL_OBJECTIVE_GAP,
        "whole": whole_update_section(model, symmetric, split, validation, model_trajectory, settings, name),
    }


def whole_update_section(model, symmetric: Symmetric, split, validation, model_trajectory, settings: ExplainSettings,
                         name: str = "", predictions_path: Path | None = None) -> dict:
    """Every family (``ALL_FAMILIES``) x kernel fitted to the model's raw one-step update on ``raw_fit_tasks`` fit
    tasks; the family x kernel with the best R^2 on the validation tasks is ``selected`` (over every kernel) and
    ``euclidean`` (over the Euclidean kernel's rows, which read nothing from the model); on the test tasks each row's
    R^2 of the raw update, of the symmetric part and of the slot-specific part (the algorithm's own slot-specific part,
    from the same permutations, against the model's), and its 20-step mean log objective against the model's own
    (fixed slot order); the selected rows' R^2 along the model's trajectory; the committed predictions and their
    verdicts (``name``'s entries of ``predictions_path``, default analyses/predictions/distill.json)."""
    from interp.algorithms import log_objective
    from interp.instruments.decompose import r2_score
    from interp.instruments.distill import (
        ALL_FAMILIES,
        SLOT_FAMILIES,
        attention_kernel,
        euclidean_kernel,
        fit_distilled,
        model_slot_offsets,
    )
    from interp.instruments.symmetry import permuted_outputs

    started = time.perf_counter()
    raw_points, raw_init = draw_tasks(model, settings.raw_fit_tasks, FIT_SEED)
    with torch.no_grad():
        raw_targets = model.eval()(raw_points, raw_init, steps=1).centroids
        validation_targets = model(*validation, steps=1).centroids
    points, init = symmetric.points, symmetric.centroids
    update = split.update  # (b, k, d) the model's raw one-step update on the test tasks
    objectives = {"model": log_objective(points.double(), model_trajectory[:, -1].double())}  # (b,)
    kernels = {"euclidean": euclidean_kernel(), "attn_xc": attention_kernel(model)}
    read = model_slot_offsets(model) if model.config.scratch_width > 0 else None
    specific = split.permutation_spread > 1e-9  # the model reads slot identity (else its specific part is rounding)
    rows = []
    algorithms = []
    for family in ALL_FAMILIES:
        for kernel_name, kernel in kernels.items():
            offsets = None
            if family in SLOT_FAMILIES and kernel_name == "attn_xc":
                if read is None:  # no slot codes: nothing to read; the fitted Euclidean offsets remain
                    continue
                offsets = read
            begun = time.perf_counter()
            fit = fit_distilled(family, kernel, raw_points, raw_init, raw_targets, offsets=offsets)
            algorithm = fit.algorithm
            with torch.no_grad():
                predicted = algorithm.step(points, init) - init.double()
                validation_predicted = algorithm.step(*validation) - validation[1].double()
                own = permuted_outputs(algorithm.step, points, init, symmetric.permutations[:split.n_permutations])
                own_specific = algorithm.step(points, init) - own.double().mean(0)  # (b, k, d)
                end = algorithm.run(points.double(), init.double(), settings.steps)[:, -1]
            per_task = log_objective(points.double(), end) - objectives["model"]  # (b,)
            row = {"family": family, "kernel": kernel_name, "slot_specific": family in SLOT_FAMILIES,
                   "offsets": None if algorithm.offsets is None else algorithm.offsets.source,
                   "parameters": algorithm.parameters, "n_parameters": fit.n_parameters, "n_fitted": fit.n_fitted,
                   "n_read": fit.n_read, "r2_fit": fit.r2_fit,
                   "r2_validation": r2_score(validation_predicted, (validation_targets - validation[1]).double()),
                   "r2_update": r2_score(predicted, update), "r2_symmetric": r2_score(predicted, split.symmetric),
                   "r2_specific": r2_score(own_specific, split.specific) if specific else None,
                   "log_objective": float(log_objective(points.double(), end).mean()),
                   "model_gap": float(per_task.mean()), "model_gap_se": float(per_task.std() / len(per_task) ** 0.5),
                   "seconds": time.perf_counter() - begun}
            if algorithm.offsets is not None:
                norms = algorithm.offsets.values.double().norm(dim=1)
                row["offset_norms"] = norms.tolist()
                if algorithm.offsets.source == "fitted":
                    row["offset_values"] = algorithm.offsets.values.tolist()
            rows.append(row)
            algorithms.append(algorithm)
            print(f"  whole update: {family} {kernel_name} validation R^2 {row['r2_validation']:.3f} "
                  f"({row['seconds']:.0f} s)", file=sys.stderr, flush=True)

    def choose(candidates: list[int]) -> int:
        return max(candidates, key=lambda index: rows[index]["r2_validation"])  # validation only

    chosen = {"selected": choose(list(range(len(rows)))),
              "euclidean": choose([index for index, row in enumerate(rows) if row["kernel"] == "euclidean"])}
    record = {"raw_fit_tasks": settings.raw_fit_tasks, "validation_tasks": settings.validation_tasks,
              "test_tasks": settings.tasks, "fits": rows,
              "goal_r2_update": GOAL_R2_UPDATE, "goal_model_gap": GOAL_MODEL_GAP,
              "model_log_objective": float(objectives["model"].mean())}
    for label, index in chosen.items():
        row, algorithm = rows[index], algorithms[index]
        along = []
        for step in ALONG_STEPS:
            if step > settings.steps:
                continue
            current, following = model_trajectory[:, step - 1].double(), model_trajectory[:, step].double()
            with torch.no_grad():
                predicted = algorithm.step(points, current.to(points.dtype)) - current
            along.append({"step": step, "r2": r2_score(predicted, following - current),
                          "update_rms": float((following - current).pow(2).mean().sqrt())})
        record[label] = {"family": row["family"], "kernel": row["kernel"], "selected_on": "validation",
                         "n_parameters": row["n_parameters"], "n_fitted": row["n_fitted"], "n_read": row["n_read"],
                         "r2_validation": row["r2_validation"], "r2_update": row["r2_update"],
                         "r2_symmetric": row["r2_symmetric"], "r2_specific": row["r2_specific"],
                         "log_objective": row["log_objective"], "model_gap": row["model_gap"],
                         "model_gap_se": row["model_gap_se"],
                         "goal_r2_update": row["r2_update"] >= GOAL_R2_UPDATE,
                         "goal_model_gap": abs(row["model_gap"]) <= GOAL_MODEL_GAP,
                         "along_model": along}
    if read is not None:
        record["geometry"] = key_geometry(model)
        family = record["selected"]["family"] if record["selected"]["family"] in SLOT_FAMILIES else "attend"
        kernel, offsets = euclidean_metric_kernel(model)
        fit = fit_distilled(family, kernel, raw_points, raw_init, raw_targets, offsets=offsets)
        with torch.no_grad():
            validation_predicted = fit.algorithm.step(*validation) - validation[1].double()
            predicted = fit.algorithm.step(points, init) - init.double()
        record["geometry"]["euclidean_metric"] = {
            "family": family, "parameters": fit.algorithm.parameters,
            "r2_validation": r2_score(validation_predicted, (validation_targets - validation[1]).double()),
            "r2_update": r2_score(predicted, update)}
    record["predictions"] = prediction_verdicts(record, name, predictions_path or PREDICTIONS)
    record["seconds"] = time.perf_counter() - started
    return record


def key_geometry(model) -> dict:
    """The read offsets in data coordinates: with Q_d's pseudo-inverse, attn_xc's score of point x for slot j is
    -scale ||Q_d (x - (A c_j + t + delta_j))||^2 - scale ||P_perp (K_d c_j + b_K + u_j - b_Q)||^2, A = Q_d^+ K_d,
    t = Q_d^+ (b_K - b_Q), delta_j = Q_d^+ u_j, P_perp the projection off Q_d's range: slot j sees its centroid at
    A c_j + t + delta_j under the metric M = scale Q_d^T Q_d. Returns the eigenvalue ranges of A (real parts) and M,
    the norms of delta_j and the mean |off-range part of u_j|^2 * scale (what the first term leaves out of the slot
    terms)."""
    from interp.instruments.distill import attention_kernel, model_slot_offsets

    kernel = attention_kernel(model)
    offsets = model_slot_offsets(model).values.double()  # (k, D)
    inverse = torch.linalg.pinv(kernel.W_Q)  # (d, D)
    shrink = torch.linalg.eigvals(inverse @ kernel.W_K).real
    metric = torch.linalg.eigvalsh(kernel.W_Q.T @ kernel.W_Q * kernel.scale)
    delta = offsets @ inverse.T  # (k, d)
    off_range = offsets - delta @ kernel.W_Q.T  # (k, D)
    return {"shrink_eigenvalues": [float(shrink.min()), float(shrink.mean()), float(shrink.max())],
            "metric_eigenvalues": [float(metric.min()), float(metric.median()), float(metric.max())],
            "delta_norms": delta.norm(dim=1).tolist(),
            "off_range_penalty": float((off_range ** 2).sum(1).mean() * kernel.scale)}


def euclidean_metric_kernel(model):
    """The model's keys under the Euclidean metric: s(x, c_j) = -||x - (A c_j + t + delta_j)||^2 with A, t, delta_j
    of ``key_geometry`` (read from attn_xc's weights), i.e. attn_xc's score with the metric M replaced by the
    identity: the kernel and its offsets (a diagnostic of what the metric adds)."""
    from interp.instruments.distill import AssignmentKernel, SlotOffsets, attention_kernel, model_slot_offsets

    kernel = attention_kernel(model)
    read = model_slot_offsets(model)
    inverse = torch.linalg.pinv(kernel.W_Q)  # (d, D)
    zero = torch.zeros(kernel.W_Q.shape[0], dtype=torch.float64)
    shift = inverse @ ((zero if kernel.b_K is None else kernel.b_K) - (zero if kernel.b_Q is None else kernel.b_Q))
    identity = torch.eye(kernel.W_Q.shape[1], dtype=torch.float64)
    euclidean = AssignmentKernel("attn_xc keys, Euclidean metric", identity, inverse @ kernel.W_K, None, shift, 1.0)
    return euclidean, SlotOffsets(read.values.double() @ inverse.T, "attn_xc", read.n_learned)


def load_distill_predictions(path: Path = PREDICTIONS) -> dict | None:
    """The committed predictions of the whole-update algorithm, per model (``load_predictions``; None when the file
    is missing)."""
    return load_predictions(path, grouped=True, optional=True)


PREDICTED = {  # prediction key -> (the record's row label, the measured field)
    "selected_r2_update": ("selected", "r2_update"),
    "selected_model_gap": ("selected", "model_gap"),
    "euclidean_r2_update": ("euclidean", "r2_update"),
    "euclidean_model_gap": ("euclidean", "model_gap"),
}


def prediction_verdicts(record: dict, name: str, path: Path = PREDICTIONS) -> dict | None:
    """For ``name``'s committed predictions: each prediction, the measured test figure of the row it names and the
    verdict of ``analyses.framework.preregistration.verdict``; a prediction naming a family x kernel other than the one
    validation chose is scored on that named row. The commit that fixed the file and whether it changed since."""
    data = load_distill_predictions(path)
    if data is None or name not in data.get("predictions", {}):
        return None
    results = {}
    for key, entry in data["predictions"][name].items():
        label, field = PREDICTED[key]
        family, kernel = entry.get("family"), entry.get("kernel")
        row = next((row for row in record["fits"] if (row["family"], row["kernel"]) == (family, kernel)), None)
        measured = None if row is None else row[field]
        prediction = prediction_of(entry)
        results[key] = {"family": family, "kernel": kernel, "row": label,
                        "chosen_by_validation": (record[label]["family"], record[label]["kernel"]) == (family, kernel),
                        "prediction": asdict(prediction), "measured": measured,
                        "verdict": verdict(prediction, measured)}
    return {"file": str(path.relative_to(HERE.parent)) if path.is_relative_to(HERE.parent) else str(path),
            **file_commit(path), "results": results}


# ----- driver ------------------------------------------------------------------------------------------------------


def check_mergeable(out: Path, models: list[str], name: str = "--out") -> None:
    """Refuse, before any work, an existing ``out`` that a run could not merge its sections into (``run`` reads it
    first and writes it after every section): JSON holding an object whose ``models`` (if any) maps each model to an
    object, with ``seconds`` and ``commands`` objects where present. A new name passes."""
    if not out.exists():
        return

    def refuse(reason: str) -> InvalidInput:
        return InvalidInput(f"{name} {out}: cannot merge into it: it is not the results of {PROG} ({reason}); give "
                            "a new name, or the file an earlier run wrote")

    try:
        data = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:  # ValueError: not JSON (JSONDecodeError included)
        raise refuse(f"not readable JSON: {error}") from None
    if not isinstance(data, dict):
        raise refuse(f"it holds a JSON {type(data).__name__}, not an object")
    records = data.get("models", {})
    if not isinstance(records, dict):
        raise refuse(f"its 'models' is a {type(records).__name__}, not an object")
    for model in models:
        record = records.get(model, {})
        if not isinstance(record, dict):
            raise refuse(f"its entry for {model} is a {type(record).__name__}, not an object")
        for key in ("seconds", "commands"):
            if not isinstance(record.get(key, {}), dict):
                raise refuse(f"its {model} {key!r} is a {type(record[key]).__name__}, not an object")


def run(models: list[str], sections: list[str], settings: ExplainSettings, out: Path, command: str) -> dict:
    """Compute ``sections`` for ``models`` and merge them into ``out`` (written after every section)."""
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault("models", {})
    data["settings"] = asdict(settings)
    if "command" not in data or (set(sections) == set(SECTIONS) and set(models) >= set(MODELS)):
        data["command"] = command  # the command of the whole run; partial re-runs are recorded per section
    for name in models:
        model = load(name)
        record = data["models"].setdefault(name, {})
        timing = record.setdefault("seconds", {})
        commands = record.setdefault("commands", {})
        points, init = draw_tasks(model, settings.tasks, TEST_SEED)
        symmetric = None
        for section in sections:
            started = time.perf_counter()
            if section == "decompose":
                record[section] = decompose_section(model, points, init)
            elif section == "kernels":
                record[section] = kernels_section(model, points[:settings.kernel_tasks], init[:settings.kernel_tasks])
            else:
                if symmetric is None:
                    count = max(settings.permutations, settings.convergence if section == "symmetry" else 0)
                    symmetric = Symmetric(model, points, init, count, TEST_SEED + 2)
                if section == "symmetry":
                    record[section] = symmetry_section(model, symmetric, settings)
                else:
                    record[section] = distill_section(model, symmetric, settings, name)
            timing[section] = time.perf_counter() - started
            commands[section] = command
            print(f"{name}: {section} in {timing[section]:.1f} s", file=sys.stderr, flush=True)
            write_json(data, out)
    return data


def summary(data: dict) -> str:
    """The printed table: per model, the headline figure of every section present."""
    lines = []
    for name, record in data.get("models", {}).items():
        lines.append(f"== {name}")
        if "decompose" in record:
            section = record["decompose"]
            shares = ", ".join(f"{row['name']} {row['variance_share']:+.3f} (cos Lloyd {_f(row['cosine_lloyd'])})"
                               for row in section["paths"])
            lines.append(f"  paths (variance share): {shares}; max |sum - update| {section['max_abs_sum_error']:.1e}")
            patches = ", ".join(f"{row['keys']} {_f(row['update_r2'])}" for row in section["pattern_patching"])
            lines.append(f"  attn_cx pattern from partial keys (R^2 of the update kept): {patches}")
        if "kernels" in record:
            kernels = ", ".join(f"{row['attention']} beta {_f(row['inverse_temperature'])} T {_f(row['temperature'])}"
                                f" r1/2 {_f(row['half_weight_distance'])} (fit {_f(row['fit_r2'])})"
                                for row in record["kernels"]["measured"])
            lines.append(f"  kernels: {kernels}")
        if "symmetry" in record:
            section = record["symmetry"]
            lines.append(f"  symmetric part ({section['n_permutations']} permutations): R^2 "
                         f"{section['r2_symmetric']:.3f}"
                         f" (corrected {_f(section['r2_symmetric_corrected'])}), slot-specific variance "
                         f"{_f(section['permutation_spread'])}, MC error {_f(section['monte_carlo_error'])}; "
                         f"permutation change {section['mean_abs_permutation_change']:.3f} vs update "
                         f"{section['mean_abs_update']:.3f}")
            shares = ", ".join(f"{key} {_f(value)}" for key, value in section["paths"]["specific_shares"].items())
            lines.append(f"  slot-specific part by path: {shares}")
            for row in section.get("blocks", []):
                lines.append(f"    symmetrise {row['group']:10s}: slot-specific left {_f(row['specific_remaining'])}, "
                             f"symmetric part R^2 {_f(row['symmetric_r2'])}, one-step objective "
                             f"{_f(row['log_objective'])}")
        if "distill" in record:
            section = record["distill"]
            refs = section["references"]
            averaged = ", ".join(f"{count}: {value:.3f}" for count, value in
                                 refs["slot_averaged_by_permutations"].items())
            lines.append(f"  20 steps: model {refs['model']:.3f}, slot-averaged ({section['average_permutations']}"
                         f" permutations per step) {refs['slot_averaged']:.3f}, Lloyd {refs['lloyd']:.3f}; "
                         f"slot-averaged by permutations per step {{{averaged}}}")
            for row in section["fits"]:
                parameters = ", ".join(f"{key}={value:.3g}" for key, value in row["parameters"].items())
                lines.append(f"    {row['family']:9s} {row['kernel']:9s} R^2 sym {row['r2_symmetric']:.3f} raw "
                             f"{row['r2_update']:.3f}  20 steps {row['log_objective']:.3f}  ({parameters})")
            lines.append(f"  goals: R^2 sym >= {GOAL_R2_SYMMETRIC}: {section['goal_r2_symmetric']}; 20-step within "
                         f"{GOAL_OBJECTIVE_GAP} of slot-averaged: {section['goal_objective']}")
            along = section["best_along_slot_averaged"]
            lines.append("  best family along the slot-averaged trajectory (step: R^2 / noise ceiling / gain): "
                         + ", ".join(f"{row['step']}: {_f(row['r2'])}/{_f(row['ceiling'])}/{_f(row['gain'])}"
                                     for row in along if row["step"] in (1, 2, 5, 10, 20)))
            whole = section.get("whole")
            if whole:
                lines.append("  whole update (fitted to the raw update; R^2 validation / test raw / symmetric / "
                             "slot-specific, 20 steps - model):")
                for row in whole["fits"]:
                    lines.append(f"    {row['family']:9s} {row['kernel']:9s} {_f(row['r2_validation'])} / "
                                 f"{_f(row['r2_update'])} / {_f(row['r2_symmetric'])} / {_f(row['r2_specific'])}, "
                                 f"{row['model_gap']:+.3f}  ({row['n_fitted']} fitted + {row['n_read']} read)")
                for label in ("selected", "euclidean"):
                    chosen = whole[label]
                    lines.append(f"  {label} on validation: {chosen['family']}, {chosen['kernel']}: R^2 raw "
                                 f"{_f(chosen['r2_update'])} (>= {GOAL_R2_UPDATE}: {chosen['goal_r2_update']}), 20 "
                                 f"steps - model {chosen['model_gap']:+.3f} (within {GOAL_MODEL_GAP}: "
                                 f"{chosen['goal_model_gap']})")
                for key, result in (whole.get("predictions") or {}).get("results", {}).items():
                    lines.append(f"  prediction {key}: measured {_f(result['measured'])}: {result['verdict']}")
        if "seconds" in record:
            lines.append("  seconds: " + ", ".join(f"{key} {value:.0f}" for key, value in record["seconds"].items()))
    return "\n".join(lines)


def _f(value) -> str:
    """A JSON figure for the table: None -> nan, "inf" kept, numbers to 3 decimals."""
    if value is None:
        return "nan"
    return value if isinstance(value, str) else f"{value:.3f}"


# ----- RESULTS.md section ------------------------------------------------------------------------------------------

LEARNED = ("main-onehot", "main-binary", "main-none")
READ_STEPS = (1, 2, 5, 10, 20)  # steps of the best family's R^2 along the slot-averaged trajectory shown


def _threads(count: str) -> str:
    return f"{count} thread" + ("" if count == "1" else "s")


def _met(goal: bool) -> str:
    return "met" if goal else "not met"


def _models(data: dict, section: str, names=None) -> list[str]:
    """The models (in MODELS order, or ``names``) whose record holds ``section``."""
    return [name for name in (names or MODELS) if section in data.get("models", {}).get(name, {})]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(row) + " |" for row in rows])


def _rerun_lines(data: dict) -> list[str]:
    """Sections computed by another command than the whole run's (``--only``, ``--models``): one line per command."""
    reruns: dict[str, dict[str, list[str]]] = {}
    for name, record in data.get("models", {}).items():
        for section, command in record.get("commands", {}).items():
            if command != data["command"]:
                reruns.setdefault(command, {}).setdefault(section, []).append(name)
    return [f"Re-run: `{command}` ("
            + "; ".join(f"{section}: {', '.join(names)}" for section, names in sections.items()) + ")  "
            for command, sections in reruns.items()]


def _budget_line(data: dict) -> str:
    settings = data["settings"]
    seconds = {name: sum(record.get("seconds", {}).values()) for name, record in data["models"].items()}
    timing = ", ".join(f"{name} {value / 60:.1f} min" for name, value in seconds.items())
    threads = re.search(r"--threads (\d+)", data["command"])
    return (f"Budget: {settings['tasks']} unseen tasks of the main configuration (n=512, d=32, k=10, random initial "
            f"centroids, seed {TEST_SEED}); distilled algorithms fitted on {settings['fit_tasks']} "
            f"training-distribution tasks (symmetric part) and {settings.get('raw_fit_tasks', 'n/a')} (raw update; "
            f"seed {FIT_SEED}), chosen on {settings.get('validation_tasks', 'n/a')} validation tasks (seed "
            f"{VALIDATION_SEED}); symmetric part from {settings['permutations']} random "
            f"slot permutations (convergence up to {settings['convergence']}); slot-specific part by path on "
            f"{settings['path_tasks']} tasks; block symmetrisation on {settings['block_tasks']} tasks x "
            f"{settings['block_permutations']} permutations; kernels measured on {settings['kernel_tasks']} tasks; "
            f"slot-averaged model with {settings['average_permutations']} permutations per step (also "
            f"{', '.join(str(c) for c in settings['other_average_permutations'])}); {settings['steps']} steps. "
            f"Run time ({_threads(threads.group(1) if threads else '1')}): {timing}")


def _decompose_lines(data: dict) -> list[str]:
    names = _models(data, "decompose")
    paths = list(dict.fromkeys(row["name"] for name in names for row in data["models"][name]["decompose"]["paths"]))
    rows = []
    for path in paths:
        cells = []
        for name in names:
            row = next((r for r in data["models"][name]["decompose"]["paths"] if r["name"] == path), None)
            cells.append("—" if row is None else
                         f"{fixed(row['variance_share'], sign=True)} / {fixed(row['cosine_lloyd'], 2)}")
        rows.append([path, *cells])
    rows.append(["max \\|sum of parts − update\\|", *[scientific(data["models"][name]["decompose"]["max_abs_sum_error"])
                                                      for name in names]])
    rows.append(["update rms", *[fixed(data["models"][name]["decompose"]["update_rms"]) for name in names]])
    patch_keys = list(dict.fromkeys(row["keys"] for name in names
                                    for row in data["models"][name]["decompose"]["pattern_patching"]))
    patches = []
    for keys in patch_keys:
        cells = []
        for name in names:
            row = next((r for r in data["models"][name]["decompose"]["pattern_patching"] if r["keys"] == keys), None)
            cells.append("—" if row is None else f"{fixed(row['update_r2'])} / {fixed(row['cosine_lloyd'], 2)}")
        patches.append([keys, *cells])
    return ["### 1. The one-step update by path", "",
            "Variance share of each exact part (Cov(part, update) / Var(update); the shares sum to 1) / its cosine "
            "with Lloyd's update; patterns held at their values, value paths linear:", "",
            *_table(["path", *names], rows), "",
            "The pattern side: attn_cx's pattern recomputed from a key stream holding only some sources (R² of the "
            "update kept / cosine with Lloyd's update):", "",
            *_table(["keys of attn_cx", *names], patches)]


def _kernel_lines(data: dict) -> list[str]:
    rows = []
    for name in _models(data, "kernels"):
        weights = {row["attention"]: row for row in data["models"][name]["kernels"]["weights"]}
        for row in data["models"][name]["kernels"]["measured"]:
            weight = weights.get(row["attention"], {})
            rows.append([name, row["attention"], fixed(row["inverse_temperature"], 2), fixed(row["temperature"]),
                         fixed(row["half_weight_distance"]), fixed(row["fit_r2"], 2),
                         fixed(weight.get("metric_anisotropy"), 1),
                         f"{fixed(weight.get('code_diagonal'))} / {fixed(weight.get('code_off_diagonal'))}"])
    return ["### 2. Effective kernels", "",
            "Measured on the tasks: inverse temperature β of the score against squared distance in [0,1]^d units, "
            "temperature T = 1/β, the distance at which a key's weight halves, and the fit's R²; from the weights: "
            "the anisotropy of the data block of QᵀK (largest / smallest |eigenvalue|) and the code block's mean "
            "diagonal / off-diagonal entry:", "",
            *_table(["model", "attention", "β", "T", "half-weight distance", "fit R²", "metric anisotropy",
                     "code diag / off-diag"], rows)]


def _symmetry_lines(data: dict) -> list[str]:
    names = _models(data, "symmetry")
    rows = []
    for name in names:
        record = data["models"][name]["symmetry"]
        rows.append([name, str(record["n_permutations"]), fixed(record["r2_symmetric"]),
                     fixed(record["r2_symmetric_corrected"]), fixed(record["symmetric_share"]),
                     fixed(record["specific_share"]), scientific(record["monte_carlo_error"]),
                     f"{fixed(record['mean_abs_permutation_change'])} / {fixed(record['mean_abs_update'])}",
                     f"{fixed(min(record['slot_mass']['mass']))}–{fixed(max(record['slot_mass']['mass']))}"])
    lines = ["### 3. Symmetric and slot-specific parts", "",
             "The symmetric part is the output averaged over random slot permutations (each run mapped back); the "
             "slot-specific part is the rest. R² of the update by the symmetric part (and with its Monte Carlo "
             "error removed), variance shares, the Monte Carlo error (fraction of Var(update)), the mean "
             "|change| of the output under one slot permutation vs the mean |update|, and attn_xc's attention mass "
             "per slot (min–max; 1/k each for an equivariant model):", "",
             *_table(["model", "permutations", "R² symmetric", "corrected", "symmetric share", "slot-specific share",
                      "MC error", "permutation change / update", "attn_xc mass per slot"], rows)]
    specific = [name for name in names if any(value is not None for value in
                                              data["models"][name]["symmetry"]["paths"]["fine_specific_shares"].values())]
    exact = [name for name in names if name not in specific]
    counts = [row["n_permutations"] for row in data["models"][names[0]]["symmetry"]["convergence"]] if names else []
    convergence = []
    for count in counts:
        cells = []
        for name in specific:
            row = next(r for r in data["models"][name]["symmetry"]["convergence"] if r["n_permutations"] == count)
            cells.append(f"{fixed(row['r2_symmetric'])} / {fixed(row['distance_to_largest'])}")
        convergence.append([str(count), *cells])
    lines += ["", "How many permutations: R² of the update by the symmetric part from the first M permutations / "
              f"its squared distance to the {counts[-1] if counts else ''}-permutation estimate (fraction of "
              "Var(update)):", "", *_table(["M", *specific], convergence)]
    paths = list(dict.fromkeys(path for name in specific
                               for path in data["models"][name]["symmetry"]["paths"]["fine_specific_shares"]))
    by_path = []
    for path in paths:
        cells = []
        for name in specific:
            shares = data["models"][name]["symmetry"]["paths"]
            cells.append(f"{fixed(shares['fine_symmetric_shares'].get(path), sign=True)} / "
                         f"{fixed(shares['fine_specific_shares'].get(path), sign=True)}")
        by_path.append([path, *cells])
    lines += ["", "Where the slot-specific part is read: each path's share of the symmetric part's variance / of the "
              "slot-specific part's variance (each column sums to 1; [block] = the input features the value map "
              f"reads; {data['settings']['path_tasks']} tasks). "
              + (", ".join(exact) + " are exactly slot-equivariant (slot-specific variance at rounding level), so "
                 "they have no slot-specific part to split." if exact else ""), "",
              *_table(["path", *specific], by_path)]
    blocked = [name for name in specific if data["models"][name]["symmetry"].get("blocks")]
    groups = list(dict.fromkeys(row["group"] for name in blocked for row in data["models"][name]["symmetry"]["blocks"]))
    block_rows = []
    for group in groups:
        cells = []
        for name in blocked:
            row = next((r for r in data["models"][name]["symmetry"]["blocks"] if r["group"] == group), None)
            cells.append("—" if row is None else f"{fixed(row['specific_remaining'])} / {fixed(row['symmetric_r2'])} / "
                                                  f"{fixed(row['log_objective'])}")
        block_rows.append([group, *cells])
    lines += ["", "Symmetrising the code blocks of one attention (or one of its Q, K, V) over slot permutations "
              "(a·I + b·11ᵀ on code→code, equal columns on code→data, equal rows on data→code, equal code biases): "
              "slot-specific variance left (fraction of the intact model's) / R² of the intact symmetric part by the "
              "new one / mean log objective after one step:", "", *_table(["blocks symmetrised", *blocked], block_rows)]
    return lines


FAMILY_TEXT = ("interp/instruments/distill.py: soft assignment p_ij = softmax_j(β s(x_i, c_j)), soft mean m_j; "
               "soft: c' = m; damped: c' = c + λ(m − c); repulsive: + κ(Σ_l w_jl c_l − c), w = softmax(−β_c‖c_j − "
               "c_l‖²); kernel s = −‖x − c‖² (euclidean) or attn_xc's own data score (attn_xc)")
SLOT_TEXT = ("slot-specific families: slot j's key at ρ c_j + (1 − ρ)/2 + δ_j, p_ij = softmax_j(β s(x_i, key_j)); "
             "offset: c' = c + λ(m − c); attend: a_ij = softmax_i(α p_ij) (each centroid attends over the points by "
             "how strongly they are assigned to it), c'_j = c_j + λ(Σ_i a_ij x_i − c_j); δ_j fitted with the "
             "Euclidean kernel (k·d numbers), read from attn_xc's key code columns u_j = W_K[:, d:] e_j with its "
             "kernel")


def _count(row: dict) -> str:
    """Learned numbers: fitted + read from the model's weights = total (older records: the fitted count)."""
    if "n_fitted" not in row:
        return str(row["n_parameters"])
    if not row["n_read"]:
        return f"{row['n_fitted']:,}"
    return f"{row['n_fitted']:,} + {row['n_read']:,} = {row['n_parameters']:,}"


def _whole_lines(data: dict) -> list[str]:
    """Section 4: the whole-update table, the goals, the predictions, the rules along the model's trajectory."""
    names = [name for name in _models(data, "distill") if "whole" in data["models"][name]["distill"]]
    if not names:
        return []
    rows, goals, predictions, along, geometry = [], [], [], [], []
    commits = set()
    for name in names:
        whole = data["models"][name]["distill"]["whole"]
        marks = {}
        for label, text in (("selected", "**selected**"), ("euclidean", "**Euclidean choice**")):
            key = (whole[label]["family"], whole[label]["kernel"])
            marks[key] = marks.get(key, []) + [text]
        for row in whole["fits"]:
            mark = ", ".join(marks.get((row["family"], row["kernel"]), []))
            rows.append([name, row["family"] + (f" ({mark})" if mark else ""), row["kernel"], _count(row),
                         fixed(row["r2_fit"]), fixed(row["r2_validation"]), fixed(row["r2_update"]),
                         fixed(row["r2_symmetric"]), fixed(row["r2_specific"]), fixed(row["log_objective"]),
                         f"{fixed(row['model_gap'], sign=True)} (se {fixed(row['model_gap_se'])})"])
        for label, text in (("euclidean", "Euclidean kernel (reads no weights)"), ("selected", "any kernel")):
            chosen = whole[label]
            goals.append([name, text, f"{chosen['family']}, {chosen['kernel']}", _count(chosen),
                          f"{fixed(chosen['r2_update'])}: {_met(chosen['goal_r2_update'])}",
                          f"{fixed(chosen['model_gap'], sign=True)} (se {fixed(chosen['model_gap_se'])}): "
                          f"{_met(chosen['goal_model_gap'])}"])
            along.append([name, f"{chosen['family']}, {chosen['kernel']}",
                          *[next((f"{fixed(r['r2']) if r['update_rms'] >= STILL else 'n/a'} / "
                                  f"{fixed(r['update_rms'])}" for r in chosen["along_model"] if r["step"] == step), "—")
                            for step in ALONG_STEPS]])
        record = whole.get("predictions")
        if record:
            commits.add((record.get("commit") or "not committed") + (" (modified since)" if record.get("modified_since")
                                                                     else ""))
            for key, result in record["results"].items():
                predictions.append([name, f"{result['family']}, {result['kernel']}"
                                    + ("" if result["chosen_by_validation"] else " (not the validation choice)"),
                                    "20 steps − model" if "gap" in key else "R² raw update",
                                    _prediction_rule(result["prediction"]),
                                    fixed(result["measured"], sign="gap" in key), f"**{result['verdict']}**"])
        if whole.get("geometry"):
            shape = whole["geometry"]
            low, mean, high = shape["shrink_eigenvalues"]
            smallest, median, largest = shape["metric_eigenvalues"]
            geometry.append(f"{name}: eigenvalues of A {fixed(low, 2)}–{fixed(high, 2)} (mean {fixed(mean, 2)}), of M "
                            f"{fixed(smallest, 2)}–{fixed(largest, 1)} (median {fixed(median, 1)}), ‖δ_j‖ "
                            f"{fixed(min(shape['delta_norms']), 2)}–{fixed(max(shape['delta_norms']), 2)}, the "
                            f"off-range term {fixed(shape['off_range_penalty'], 4)}")
    first = data["models"][names[0]]["distill"]
    whole = first["whole"]
    seeds = first.get("seeds", {"fit": FIT_SEED, "validation": VALIDATION_SEED, "test": TEST_SEED})
    lines = ["### 4. A distilled algorithm for the whole update", "",
             f"Every family × kernel ({FAMILY_TEXT}; {SLOT_TEXT}) fitted to the model's raw one-step update on "
             f"{whole['raw_fit_tasks']} fit tasks (seed {seeds['fit']}); the family × kernel is chosen by R² on "
             f"{whole['validation_tasks']} validation tasks (seed {seeds['validation']}), over every kernel "
             "(**selected**) and over the Euclidean kernel alone, which reads nothing from the model (**Euclidean "
             f"choice**); every row is then scored once on the {whole['test_tasks']} test tasks (seed "
             f"{seeds['test']}): R² of the raw update, of its symmetric part, and of its slot-specific part (the "
             "algorithm's own slot-specific part, from the same permutations, against the model's); the mean log "
             "objective after iterating it 20 steps and its difference from the model's own 20 re-embedded steps "
             "from the same starts (fixed slot order; standard error of the per-task differences). Learned numbers: "
             "fitted + read from the model's weights (attn_xc's W_Q and W_K data columns and biases; read offsets: "
             "W_K's code columns):", "",
             *_table(["model", "family", "kernel", "learned numbers", "R² fit", "R² validation", "R² raw update",
                      "R² symmetric part", "R² slot-specific part", "20 steps", "− model (se)"], rows), "",
             f"Goals: held-out R² of the raw update ≥ {GOAL_R2_UPDATE} and a 20-step objective within "
             f"{GOAL_MODEL_GAP} of the model's (test tasks; the family chosen on validation):", "",
             *_table(["model", "choice", "family, kernel", "learned numbers", f"R² raw update (≥ {GOAL_R2_UPDATE})",
                      f"20 steps − model (within {GOAL_MODEL_GAP})"], goals)]
    if predictions:
        lines += ["", f"Predictions fixed before the test run (analyses/predictions/distill.json, commit "
                  f"{', '.join(sorted(commits))}), from the fit and validation tasks only (R² of the raw update; 20 "
                  "steps − model: the mean log objective after 20 steps minus the model's own, same starts, fixed "
                  "slot order); verdict by analyses.failures.verdict:", "",
                  *_table(["model", "family, kernel", "quantity", "predicted", "measured", "verdict"], predictions)]
    lines += ["", "The chosen rules along the model's own 20-step trajectory (fixed slot order): R² of the model's "
              f"update at each step / that update's rms (n/a: rms below {STILL:g}, the model at rest):", "",
              *_table(["model", "family, kernel", *[f"step {step}" for step in ALONG_STEPS]], along)]
    if geometry:
        lines += ["", "The read offsets in data coordinates (`key_geometry`): attn_xc's score of point x for slot j is "
                  "−scale‖Q_d(x − (A c_j + t + δ_j))‖² minus an off-range term, A = Q_d⁺K_d, δ_j = Q_d⁺u_j, metric "
                  "M = scale·Q_dᵀQ_d: each slot sees its centroid at A c_j + t + δ_j; " + "; ".join(geometry) + "."]
    return lines


def _prediction_rule(prediction: dict) -> str:
    value, tolerance = fixed(prediction["value"], sign=prediction["value"] < 0), fixed(prediction["tolerance"])
    return {"at_most": f"≤ {value} + {tolerance}", "at_least": f"≥ {value} − {tolerance}"}.get(
        prediction["kind"], f"{value} ± {tolerance}")


def _distill_lines(data: dict) -> list[str]:
    names = _models(data, "distill")
    fits = []
    for name in names:
        section = data["models"][name]["distill"]
        chosen = (section["best"]["family"], section["best"]["kernel"])
        for row in section["fits"]:
            parameters = ", ".join(f"{key}={fixed(value, 3)}" for key, value in row["parameters"].items())
            family = row["family"] + (" (**selected**)" if (row["family"], row["kernel"]) == chosen else "")
            fits.append([name, family, row["kernel"], parameters, _count(row), fixed(row["r2_fit"]),
                         fixed(row.get("r2_validation")), fixed(row["r2_symmetric"]), fixed(row["r2_update"]),
                         fixed(row["log_objective"])])
    references = []
    for name in names:
        section = data["models"][name]["distill"]
        refs = section["references"]
        by_count = ", ".join(f"{count}: {fixed(value)}"
                             for count, value in refs["slot_averaged_by_permutations"].items())
        best, cheapest = section["best"], section["best_objective"]
        whole = section.get("whole", {}).get("selected")
        euclid = section.get("whole", {}).get("euclidean")
        references.append([name, fixed(refs["initial"]), fixed(refs["model"]), fixed(refs["slot_averaged"]), by_count,
                           fixed(refs["lloyd"]), f"{fixed(best['log_objective'])} ({best['family']}, {best['kernel']})",
                           f"{fixed(cheapest['log_objective'])} ({cheapest['family']}, {cheapest['kernel']})",
                           "—" if whole is None else f"{fixed(whole['log_objective'])} ({whole['family']}, "
                                                     f"{whole['kernel']}); {fixed(euclid['log_objective'])} "
                                                     f"({euclid['family']}, {euclid['kernel']})"])
    goals = []
    for name in names:
        section = data["models"][name]["distill"]
        gap = section["best"]["log_objective"] - section["references"]["slot_averaged"]
        goals.append([name, f"{section['best']['family']}, {section['best']['kernel']}",
                      f"{fixed(section['best']['r2_symmetric'])}: {_met(section['goal_r2_symmetric'])}",
                      fixed(section["best"]["r2_update"]),
                                    f"{fixed(gap, sign=True)}: {_met(section['goal_objective'])}"])
    along = []
    for name in names:
        rows = {row["step"]: row for row in data["models"][name]["distill"]["best_along_slot_averaged"]}
        along.append([name, *[f"{fixed(rows[step]['r2'])} / {fixed(rows[step]['ceiling'])} / "
                              f"{fixed(rows[step]['update_rms'])}" if step in rows else "—" for step in READ_STEPS]])
    validated = all(data["models"][name]["distill"]["best"].get("selected_on") == "validation" for name in names)
    choice = ("chosen by its R² of the symmetric part on the validation tasks" if validated
              else "chosen by its held-out R² of the symmetric part")
    lines = _whole_lines(data)
    return [*lines, *([""] if lines else []), "### 4b. The same families fitted to the symmetric part", "",
            f"Every slot-symmetric family × kernel ({FAMILY_TEXT}) fitted to the symmetric part on the fit tasks; "
            "R² on them and on the validation tasks' symmetric part, held-out R² of the symmetric part and of the raw "
            f"update, and the mean log objective after iterating it 20 steps; **selected**: {choice}:", "",
            *_table(["model", "family", "kernel", "parameters", "learned numbers", "R² fit", "R² validation",
                     "R² symmetric", "R² raw update", "20 steps"], fits), "",
            "Mean log objective after 20 steps from the same initial centroids (slot-averaged: the model's output "
            "averaged over fresh random slot permutations at every step, as many forwards per step):", "",
            *_table(["model", "initial", "model", "slot-averaged", "slot-averaged by permutations per step", "Lloyd",
                     "selected symmetric fit", "best symmetric fit (20 steps)",
                     "whole update: selected; Euclidean choice"], references), "",
            f"Goals for the symmetric part: held-out R² of the symmetric part ≥ {GOAL_R2_SYMMETRIC}, and the selected "
            f"family's 20-step objective within {GOAL_OBJECTIVE_GAP} of the slot-averaged model's:", "",
            *_table(["model", "selected family", "R² symmetric (goal)", "R² raw update",
                     "20 steps − slot-averaged (goal)"], goals), "",
            "The selected symmetric fit along the slot-averaged model's own trajectory: R² of each step's update / "
            "the ceiling its Monte Carlo noise allows / the update's rms:", "",
            *_table(["model", *[f"step {step}" for step in READ_STEPS]], along)]


def _prediction(prediction: dict) -> str:
    """A prediction of analyses/studies/failures/measure.py as text: within v ± t, at most v + t, at least v − t."""
    signed = "gap" in str(prediction.get("quantity", "gap"))  # a gap is signed, an objective is not
    value, tolerance = fixed(prediction.get("value"), sign=signed), fixed(prediction.get("tolerance"))
    kind = prediction.get("kind", "within")
    return {"at_most": f"≤ {value} + {tolerance}", "at_least": f"≥ {value} − {tolerance}"}.get(kind,
                                                                                               f"{value} ± {tolerance}")


def _gap(record: dict | None) -> str:
    if not record:
        return "n/a"
    return f"{fixed(record.get('gap'), sign=True)} (se {fixed(record.get('se'))})"


def _plain(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _failure_lines(failures: dict) -> list[str]:
    """Table 5 from analyses/results/failures.json: per case, model and intervention the observed gap, the prediction
    fixed before the run, the measured gap and the verdict; the slot-averaged runs and the slot-equivariant model."""
    rows, notes = [], []
    for case, record in failures.get("cases", {}).items():
        for name, entry in record.get("models", {}).items():
            observed = entry.get("observed", {})
            for row in entry.get("interventions", []):
                rows.append([case, name, _gap(observed), _plain(row.get("name", "")),
                             _prediction(row.get("prediction", {})), _gap(row.get("measured")),
                             f"**{row.get('verdict', 'n/a')}**"])
            for count, value in entry.get("slot_averaged", {}).items():
                rows.append([case, name, _gap(observed), f"slot-averaged, {count} forward(s) per step",
                             "none (a reference, first measured by explain.py)", _gap(value), "—"])
            if entry.get("explanation"):
                notes.append(f"* **{case}, {name}.** {_plain(entry['explanation'])}")
                notes += [f"  * `{_plain(row.get('name', ''))}`: {_plain(row.get('description', ''))}. Prediction: "
                          f"{_plain(row.get('prediction', {}).get('method', 'n/a'))}."
                          for row in entry.get("interventions", [])]
        equivariant = record.get("slot_equivariant_model")
        if equivariant:
            measured = equivariant.get("measured")
            rows.append([case, f"slot-equivariant ({_plain(equivariant.get('checkpoint', ''))})", "—",
                         "slot-equivariant model trained from the start (20-step mean log objective)",
                         _prediction(equivariant.get("prediction", {})),
                         "pending" if measured is None else fixed(measured),
                         f"**{equivariant.get('verdict', 'n/a')}**"])
            notes.append(f"* **{case}, slot-equivariant model.** {_plain(equivariant.get('status', ''))}; predicted by "
                         f"{_plain(equivariant.get('prediction', {}).get('method', 'n/a'))}")
    command = failures.get("command", "python -m analyses.failures")
    return ["### 5. Failure cases, each tested by an intervention", "",
            f"From analyses/results/failures.json (`{command}`): the observed gap (20-step mean log objective, model "
            "− Lloyd, with the standard error of the per-task differences), each intervention's prediction fixed "
            "before it was run, the measured gap after it and the verdict of the fixed rule "
            "(analyses/failures.py, `verdict`):", "",
            *_table(["case", "model", "gap", "intervention", "predicted", "measured", "verdict"], rows),
            *([""] + notes if notes else [])]


def _verdicts(failures: dict | None) -> list[str]:
    """Every verdict of failures.json (interventions and the slot-equivariant model)."""
    if not failures:
        return []
    verdicts = []
    for record in failures.get("cases", {}).values():
        for entry in record.get("models", {}).values():
            verdicts += [str(row.get("verdict")) for row in entry.get("interventions", [])]
        if record.get("slot_equivariant_model"):
            verdicts.append(str(record["slot_equivariant_model"].get("verdict")))
    return verdicts


def _reading_lines(data: dict, failures: dict | None) -> list[str]:
    """Short generated reading: every figure is read from ``data`` / ``failures``."""
    models = data["models"]
    lines = ["### Reading", ""]
    learned = _models(data, "decompose", LEARNED)
    if learned:
        worst = max(models[name]["decompose"]["max_abs_sum_error"] for name in learned)
        shares = ", ".join(f"{name} {fixed(row['variance_share'])}" for name in learned
                           for row in models[name]["decompose"]["paths"] if row["name"] == "attn_cc")
        construction = ""
        if "construction" in _models(data, "decompose"):
            construction = (f" and {scientific(models['construction']['decompose']['max_abs_sum_error'])} on the "
                            "construction (float64)")
        lines.append(f"* **Exact parts.** The path parts sum to the update within {scientific(worst)} on the learned "
                     f"models (float32){construction}. attn_cc's share of the update's variance: {shares}.")
    specific = [name for name in _models(data, "symmetry", LEARNED)
                if any(v is not None for v in models[name]["symmetry"]["paths"]["specific_shares"].values())]
    equivariant = [name for name in _models(data, "symmetry") if name not in specific]
    if specific:
        r2 = ", ".join(f"{name} {fixed(models[name]['symmetry']['r2_symmetric'])}" for name in specific)
        reads = []
        for name in specific:
            shares = models[name]["symmetry"]["paths"]["specific_shares"]
            top = sorted(shares.items(), key=lambda item: -(item[1] or 0))[:2]
            reads.append(f"{name}: " + ", ".join(f"{path} {fixed(value)}" for path, value in top))
        lines.append(f"* **Slot dependence.** The slot-symmetric part explains R² {r2} of the one-step update"
                     + (f" ({', '.join(equivariant)}: exactly equivariant)" if equivariant else "")
                     + ". The two paths carrying most of the slot-specific variance: " + "; ".join(reads) + ".")
        for name in specific:
            blocks = [row for row in models[name]["symmetry"].get("blocks", [])
                      if row["group"] not in ("intact", "all") and row["specific_remaining"] is not None]
            if not blocks:
                continue
            intact = next(row for row in models[name]["symmetry"]["blocks"] if row["group"] == "intact")
            every = next((row for row in models[name]["symmetry"]["blocks"] if row["group"] == "all"), None)
            least = min(blocks, key=lambda row: row["specific_remaining"])
            text = (f"  * {name}: symmetrising {least['group']} alone leaves the least slot-specific variance "
                    f"({fixed(least['specific_remaining'])} of it) at a one-step objective of "
                    f"{fixed(least['log_objective'])} (intact {fixed(intact['log_objective'])})")
            if every is not None:
                left = every["specific_remaining"]
                text += (f"; symmetrising every code block leaves {scientific(left) if left < 1e-3 else fixed(left)}"
                         + ("" if left < 1e-3 else " (the projection makes only a one-hot model equivariant)")
                         + f" and gives {fixed(every['log_objective'])}")
            lines.append(text + ".")
    averaged = [name for name in specific if "distill" in models[name]]
    if averaged:
        parts = []
        for name in averaged:
            section = models[name]["distill"]
            refs = section["references"]
            by_count = refs["slot_averaged_by_permutations"]
            one = by_count.get("1")
            parts.append(f"{name}: model {fixed(refs['model'])}, slot-averaged ({section['average_permutations']} "
                         f"forwards per step) {fixed(refs['slot_averaged'])}"
                         + (f", one random slot order per step (1× compute) {fixed(one)}" if one is not None else "")
                         + f", Lloyd {fixed(refs['lloyd'])}")
        lines.append("* **Slot averaging at inference** (mean log objective after 20 steps): " + "; ".join(parts) + ".")
    whole = [name for name in _models(data, "distill", LEARNED) if "whole" in models[name]["distill"]]
    if whole:
        lines.append("* **Whole-update algorithm** (section 4: fitted to the raw one-step update, family × kernel "
                     "chosen on the validation tasks, figures on the test tasks):")
        for name in whole:
            record = models[name]["distill"]["whole"]
            euclid, chosen = record["euclidean"], record["selected"]
            along = {row["step"]: row for row in chosen["along_model"]}
            text = (f"  * {name}: with the Euclidean kernel, which reads nothing from the model, {euclid['family']} "
                    f"({_count(euclid)} fitted numbers) explains R² {fixed(euclid['r2_update'])} of the raw update "
                    f"({'meets' if euclid['goal_r2_update'] else 'misses'} {GOAL_R2_UPDATE}) and ends 20 steps "
                    f"{fixed(euclid['model_gap'], sign=True)} (se {fixed(euclid['model_gap_se'])}) from the model "
                    f"({'within' if euclid['goal_model_gap'] else 'outside'} {GOAL_MODEL_GAP})")
            if (chosen["family"], chosen["kernel"]) != (euclid["family"], euclid["kernel"]):
                text += (f"; the validation choice over every kernel is {chosen['family']} with the "
                         f"{chosen['kernel']} kernel ({_count(chosen)} learned numbers, fitted + read from the "
                         f"weights): R² {fixed(chosen['r2_update'])} of the raw update "
                         f"({'meets' if chosen['goal_r2_update'] else 'misses'} {GOAL_R2_UPDATE}), "
                         + ("" if chosen["r2_specific"] is None else
                            f"{fixed(chosen['r2_specific'])} of the slot-specific part, ")
                         + "20 steps "
                         + f"{fixed(chosen['model_gap'], sign=True)} (se {fixed(chosen['model_gap_se'])}) "
                           "from the model "
                         f"({'within' if chosen['goal_model_gap'] else 'outside'} {GOAL_MODEL_GAP})")
            if 2 in along and 5 in along:
                text += (f"; along the model's own trajectory its R² is {fixed(along[2]['r2'])} at step 2 and "
                         f"{fixed(along[5]['r2'])} at step 5")
            lines.append(text + ".")
        metric = []
        for name in whole:
            record = models[name]["distill"]["whole"]
            shape = record.get("geometry", {})
            read = next((row for row in record["fits"] if row["kernel"] == "attn_xc"
                         and row["family"] == shape.get("euclidean_metric", {}).get("family")), None)
            if read is None:
                continue
            swapped, euclid = shape["euclidean_metric"]["r2_update"], record["euclidean"]["r2_update"]
            gained = read["r2_update"] - euclid
            lost = (read["r2_update"] - swapped) / gained if gained > 0 else None
            if lost is None:
                verdict = ""
            elif lost > 1:
                verdict = " (below the Euclidean choice: the read keys and offsets help only under attn_xc's metric)"
            else:
                verdict = f" (the metric swap loses {fixed(lost, 2)} of the read kernel's gain over it)"
            metric.append(f"{name}: {read['family']} with attn_xc's kernel and read offsets "
                          f"{fixed(read['r2_update'])}, "
                          f"the same keys under the Euclidean metric {fixed(swapped)}, the Euclidean choice "
                          f"{fixed(euclid)}" + verdict
                          + f"; eigenvalues of attn_xc's metric M {fixed(shape['metric_eigenvalues'][0], 2)}–"
                          f"{fixed(shape['metric_eigenvalues'][2], 1)}, of its key map A "
                          f"{fixed(shape['shrink_eigenvalues'][0], 2)}–{fixed(shape['shrink_eigenvalues'][2], 2)}")
        if metric:
            lines.append("* **What the Euclidean kernel lacks** (test R² of the raw update; the same family refitted "
                         "with attn_xc's keys A c_j + t + δ_j read from the weights but the identity for its metric, "
                         "`euclidean_metric_kernel`): " + "; ".join(metric) + ".")
        missed, signs = [], set()
        for name in whole:
            record = models[name]["distill"]["whole"]
            for label in ("euclidean", "selected"):
                chosen = record[label]
                if chosen["goal_model_gap"] or (label == "selected" and chosen == record["euclidean"]):
                    continue
                along = [row for row in chosen["along_model"] if row["update_rms"] >= STILL]
                negative = next((row["step"] for row in along if row["r2"] < 0), None)
                signs.add(chosen["model_gap"] < 0)
                missed.append(f"{name}, {chosen['family']} ({chosen['kernel']}): "
                              f"{fixed(chosen['model_gap'], sign=True)}"
                              f" (se {fixed(chosen['model_gap_se'])}); R² along the model's trajectory "
                              + ", ".join(f"{fixed(row['r2'])} at step {row['step']}" for row in along)
                              + (f", negative from step {negative}" if negative else "")
                              + f", while the model's update rms falls from {fixed(along[0]['update_rms'])} to "
                              f"{fixed(along[-1]['update_rms'])}")
        if missed:
            lines.append("* **Where the 20-step goal is missed** (the rule's 20-step objective minus the model's, with "
                         "the standard error of the per-task differences; R² of each rule along the model's own "
                         "trajectory, section 4): " + "; ".join(missed) + "."
                         + (" Every miss is negative: the rule ends with a lower objective than the model."
                            if signs == {True} else "")
                         + " The rules follow the model's first steps and not its small later updates; what those "
                         "later updates hold that the rules lack is not measured here.")
        verdicts = [(name, key, result) for name in whole
                    for key, result in ((models[name]["distill"]["whole"].get("predictions") or {})
                                        .get("results", {}).items())]
        if verdicts:
            counts = {}
            for _, _, result in verdicts:
                counts[result["verdict"]] = counts.get(result["verdict"], 0) + 1
            commit = next((models[name]["distill"]["whole"]["predictions"].get("commit") for name in whole
                           if models[name]["distill"]["whole"].get("predictions")), None)
            lines.append(f"* **Predictions** (analyses/predictions/distill.json, committed in {commit} before the "
                         "test run): " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
                         + f" of {len(verdicts)}: " + "; ".join(
                             f"{name} {result['family']}, {result['kernel']}: "
                             f"{'20 steps − model' if 'gap' in key else 'R² raw update'} "
                             f"{fixed(result['measured'], sign='gap' in key)} against "
                             f"{_prediction_rule(result['prediction'])} ({result['verdict']})"
                             for name, key, result in verdicts) + ".")
    distilled = _models(data, "distill", LEARNED)
    if distilled:
        parts = []
        for name in distilled:
            section = models[name]["distill"]
            best = section["best"]
            along = {row["step"]: row for row in section["best_along_slot_averaged"]}
            gap = best["log_objective"] - section["references"]["slot_averaged"]
            text = (f"  * {name}: {best['family']} with the {best['kernel']} kernel, R² "
                    f"{fixed(best['r2_symmetric'])} of the symmetric part "
                    f"({'meets' if section['goal_r2_symmetric'] else 'misses'} {GOAL_R2_SYMMETRIC}), "
                    f"{fixed(best['r2_update'])} of the raw update, 20 steps "
                    f"{fixed(gap, sign=True)} from the slot-averaged model "
                    f"({'within' if section['goal_objective'] else 'outside'} {GOAL_OBJECTIVE_GAP})")
            if 1 in along and 2 in along:
                first, second = along[1], along[2]
                text += (f"; along the slot-averaged trajectory its R² is {fixed(first['r2'])} at step 1 and "
                         f"{fixed(second['r2'])} at step 2 (noise ceiling {fixed(second['ceiling'])}), where the "
                         f"update's rms has fallen from {fixed(first['update_rms'])} to {fixed(second['update_rms'])}")
            parts.append(text)
        validated = all(models[name]["distill"]["best"].get("selected_on") == "validation" for name in distilled)
        lines.append("* **Distilled algorithm for the symmetric part** (section 4b: the family with the best R² of "
                     + ("the symmetric part on the validation tasks" if validated else "the held-out symmetric part")
                     + "), with its R² at the first two steps of the slot-averaged model's trajectory:")
        lines += [part + "." for part in parts]
    if "construction" in _models(data, "distill"):
        best = models["construction"]["distill"]["best"]
        whole = models["construction"]["distill"].get("whole")
        lines.append(f"* **Check on the construction.** The distilled fit recovers Lloyd: {best['family']}, R² "
                     f"{fixed(best['r2_symmetric'], 6)}"
                     + ("" if not whole else f"; fitted to the raw update, the validation choice "
                        f"{whole['selected']['family']} ({whole['selected']['kernel']}) R² "
                        f"{fixed(whole['selected']['r2_update'], 6)}, the Euclidean choice "
                        f"{whole['euclidean']['family']} R² {fixed(whole['euclidean']['r2_update'], 6)}")
                     + f"; its slot-specific share is {fixed(models['construction']['symmetry']['specific_share'])}.")
    verdicts = _verdicts(failures)
    if verdicts:
        counts = {verdict: verdicts.count(verdict) for verdict in dict.fromkeys(verdicts)}
        lines.append("* **Failure cases.** " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
                     + f" of {len(verdicts)} predictions (table 5).")
    return lines


def results_section(data: dict, failures: dict | None = None) -> str:
    """The RESULTS.md section (between ``<!-- study:explain -->`` markers) from explain.json's ``data`` and, when
    given, failures.json's ``failures``; every figure is read from them."""
    lines = ["## What the learned models compute (`python -m analyses.explain`)", "",
             f"Command: `{data['command']}`  ", *_rerun_lines(data),
             f"Section: `{SECTION_COMMAND}` (from analyses/results/explain.json"
             + (" and failures.json" if failures else "") + ")  ", _budget_line(data), ""]
    lines += _decompose_lines(data) + [""] + _kernel_lines(data) + [""] + _symmetry_lines(data) + [""]
    lines += _distill_lines(data) + [""]
    if failures:
        lines += _failure_lines(failures) + [""]
    lines += _reading_lines(data, failures)
    return "\n".join(lines) + "\n"


def write_results_md(out: Path = DEFAULT_OUT, failures_path: Path = FAILURES, results_md: Path | None = None) -> str:
    """Write the section from the JSON files into RESULTS.md (``analyses._studies.write_section``); returns it."""
    from analyses._studies import RESULTS_MD, write_section

    data = json.loads(Path(out).read_text())
    failures = json.loads(Path(failures_path).read_text()) if Path(failures_path).exists() else None
    text = results_section(data, failures)
    write_section("explain", text, results_md or RESULTS_MD)
    return text


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), type=model_name)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a check that every section runs (seconds "
                        "for the construction); needs an --out other than the committed file")
    parser.add_argument("--tasks", type=arguments.tasks, default=ExplainSettings.tasks, help="1 to 1,000,000")
    parser.add_argument("--fit-tasks", type=arguments.tasks, default=None, help="1 to 1,000,000; default: --tasks")
    parser.add_argument("--permutations", type=arguments.count(MAX_PERMUTATIONS, 2),
                        default=ExplainSettings.permutations,
                        help=f"random slot permutations, 2 to {MAX_PERMUTATIONS:,} (two at least: their spread is "
                        "measured)")
    parser.add_argument("--convergence", type=arguments.count(MAX_PERMUTATIONS), default=ExplainSettings.convergence,
                        help=f"largest number of permutations in the convergence table, 1 to {MAX_PERMUTATIONS:,}")
    parser.add_argument("--threads", type=arguments.threads, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--results-md", action="store_true", help="put the tables into analyses/RESULTS.md")
    parser.add_argument("--from-json", action="store_true", help="compute nothing: only write the RESULTS.md section "
                        "from --out and analyses/results/failures.json")
    args = parser.parse_args(argv)
    if args.from_json and not args.results_md:
        parser.error("--from-json only writes the RESULTS.md section: add --results-md")
    # every output checked before any work: RESULTS.md and the failures it reads, then --out and what it holds
    if args.results_md:
        from analyses._studies import RESULTS_MD

        check_output_file(RESULTS_MD, "--results-md")
        if FAILURES.exists():
            try:
                json.loads(FAILURES.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as error:
                raise InvalidInput(f"--results-md reads {FAILURES}, which is not readable JSON ({error}): rerun "
                                   "python -m analyses.failures") from None
    if args.from_json:
        check_mergeable(args.out, args.models)
        return section_from_json(args.out, write_results_md)
    check_output_file(args.out, "--out")  # first: a loop of links is refused here (Path.resolve would raise)
    if args.quick and args.out.resolve() == DEFAULT_OUT.resolve():
        parser.error("--quick writes tiny figures: give an --out other than analyses/results/explain.json")
    check_mergeable(args.out, args.models)
    torch.set_num_threads(args.threads)
    settings = QUICK if args.quick else ExplainSettings()
    if args.quick:
        args.tasks, args.permutations, args.convergence = QUICK.tasks, QUICK.permutations, QUICK.convergence
        args.fit_tasks = args.fit_tasks or QUICK.fit_tasks
    settings = replace(settings, tasks=args.tasks, fit_tasks=args.fit_tasks or args.tasks,
                       permutations=args.permutations, convergence=max(args.convergence, args.permutations),
                       path_tasks=min(settings.path_tasks, args.tasks),
                       block_tasks=min(settings.block_tasks, args.tasks),
                       kernel_tasks=min(settings.kernel_tasks, args.tasks))
    command = "python -m analyses.explain " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()
    sections = [section for section in SECTIONS if section in args.only]
    data = run(args.models, sections, settings, args.out, command.strip())
    print(summary(data))
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.results_md:
        write_results_md(args.out)
    return data


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="every finished section is in --out: run the same command to "
                                                  "continue"))
