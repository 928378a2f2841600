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

    python -m analyses.explain [--only decompose symmetry ...] [--models main-onehot ...] [--tasks 128]
                               [--permutations 64] [--out analyses/results/explain.json]
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

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "explain.json"
MODELS = ("main-onehot", "main-binary", "main-none", "construction")
SECTIONS = ("decompose", "kernels", "symmetry", "distill")
TEST_SEED = 20261301  # unseen tasks (not the training or evaluation seeds)
FIT_SEED = 20261401  # training-distribution tasks the distilled algorithms are fitted on
GOAL_R2_SYMMETRIC = 0.90
GOAL_OBJECTIVE_GAP = 0.02


@dataclass(frozen=True)
class ExplainSettings:
    """Sizes of the run; every figure is seeded."""

    tasks: int = 128  # unseen tasks (decomposition, symmetric split, distilled scores, 20-step objectives)
    fit_tasks: int = 128  # training-distribution tasks the distilled algorithms are fitted on
    permutations: int = 64  # slot permutations of the symmetric part (targets of the distillation too)
    convergence: int = 256  # largest number of permutations in the convergence table
    path_tasks: int = 32  # tasks of the path split of the slot-specific part
    block_tasks: int = 32  # tasks of the block symmetrisation
    block_permutations: int = 16  # permutations per symmetrised model
    kernel_tasks: int = 16  # tasks of the measured kernels (attn_xx forms (b, n, n) scores)
    average_permutations: int = 8  # permutations per step of the slot-averaged model (the goal's reference)
    other_average_permutations: tuple[int, ...] = (1, 32)  # also run for models that read slot identity
    steps: int = 20


def load(name: str):
    """A shipped checkpoint, or ``construction``: the exact one-hot construction of d = 32, k = 10 (float64)."""
    from interp.constructions import lloyd_transformer
    from interp.model.checkpoint import load_model

    if name == "construction":
        return lloyd_transformer(32, 10, 1, embedding="onehot")
    return load_model(name)


def draw_tasks(model, count: int, seed: int):
    """``count`` tasks of the main configuration in the model's dtype: points (b, n, d) and random-subset initial
    centroids (b, k, d)."""
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    config = TaskConfig(n=512, d=model.config.d, k=model.config.k)
    points = sample_tasks(config, count, seed, dtype=model.codes.dtype).points
    return points, init_centroids(points, config.k, "random", seed + 1)


def finite_or_none(value):
    """JSON-safe: NaN becomes None, infinities the strings "inf" / "-inf" (gamma = inf kernels); tuples become lists;
    containers are converted recursively."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(key): finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


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


def distill_section(model, symmetric: Symmetric, settings: ExplainSettings) -> dict:
    from interp.algorithms import lloyd, log_objective
    from interp.instruments.decompose import r2_score
    from interp.instruments.distill import FAMILIES, attention_kernel, euclidean_kernel, fit_distilled
    from interp.instruments.symmetry import slot_averaged_run

    fit_points, fit_init = draw_tasks(model, settings.fit_tasks, FIT_SEED)
    fit_symmetric = Symmetric(model, fit_points, fit_init, settings.permutations, FIT_SEED + 2)
    fit_targets = fit_init.double() + fit_symmetric.split(settings.permutations).symmetric  # (b, k, d)
    split = symmetric.split(settings.permutations)
    points, init = symmetric.points, symmetric.centroids
    test_targets = init.double() + split.symmetric
    raw_targets = init.double() + split.update

    def mean_log_objective(centroids) -> float:
        return float(log_objective(points, centroids.detach().to(points.dtype)).mean())

    averaged = slot_averaged_run(model, points, init, settings.steps, settings.average_permutations, TEST_SEED + 3)
    with torch.no_grad():
        model_output = model.eval()(points, init, steps=settings.steps).centroids
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
    fits = []
    for family in FAMILIES:
        for kernel_name, kernel in kernels.items():
            started = time.perf_counter()
            fit = fit_distilled(family, kernel, fit_points, fit_init, fit_targets)
            algorithm = fit.algorithm
            trajectory = algorithm.run(points.double(), init.double(), settings.steps)
            with torch.no_grad():
                predicted = algorithm.step(points, init) - init.double()
            fits.append({"family": family, "kernel": kernel_name, "parameters": algorithm.parameters,
                         "n_parameters": fit.n_parameters, "r2_fit": fit.r2_fit,
                         "r2_symmetric": r2_score(predicted, test_targets - init.double()),
                         "r2_update": r2_score(predicted, raw_targets - init.double()),
                         "log_objective": mean_log_objective(trajectory[:, -1]),
                         "seconds": time.perf_counter() - started})
    best = max(fits, key=lambda row: row["r2_symmetric"])
    best_algorithm = _algorithm(best, kernels)
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
        "average_permutations": settings.average_permutations, "steps": settings.steps,
        "references": references,
        "slot_averaged_spread": averaged.permutation_spread.tolist(),
        "fits": fits,
        "best": {"family": best["family"], "kernel": best["kernel"], "r2_symmetric": best["r2_symmetric"],
                 "r2_update": best["r2_update"], "log_objective": best["log_objective"]},
        "best_objective": {"family": best_objective["family"], "kernel": best_objective["kernel"],
                           "log_objective": best_objective["log_objective"]},
        "best_along_slot_averaged": along,
        "goal_r2_symmetric": best["r2_symmetric"] >= GOAL_R2_SYMMETRIC,
        "goal_objective": abs(best["log_objective"] - references["slot_averaged"]) <= GOAL_OBJECTIVE_GAP,
    }


def _algorithm(row: dict, kernels: dict):
    from interp.instruments.distill import DistilledAlgorithm

    return DistilledAlgorithm(row["family"], kernels[row["kernel"]], row["parameters"])


# ----- driver ------------------------------------------------------------------------------------------------------


def write_json(data: dict, path: Path) -> None:
    """``data`` as JSON, written atomically (``interp._io.write_text_atomically``) into a folder created if missing."""
    from interp._io import write_text_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(finite_or_none(data), indent=1) + "\n")


def run(models: list[str], sections: list[str], settings: ExplainSettings, out: Path, command: str) -> dict:
    """Compute ``sections`` for ``models`` and merge them into ``out`` (written after every section)."""
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault("models", {})
    data["settings"] = asdict(settings)
    data["command"] = command
    for name in models:
        model = load(name)
        record = data["models"].setdefault(name, {})
        timing = record.setdefault("seconds", {})
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
                    record[section] = distill_section(model, symmetric, settings)
            timing[section] = time.perf_counter() - started
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
        if "seconds" in record:
            lines.append("  seconds: " + ", ".join(f"{key} {value:.0f}" for key, value in record["seconds"].items()))
    return "\n".join(lines)


def _f(value) -> str:
    """A JSON figure for the table: None -> nan, "inf" kept, numbers to 3 decimals."""
    if value is None:
        return "nan"
    return value if isinstance(value, str) else f"{value:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--tasks", type=int, default=ExplainSettings.tasks)
    parser.add_argument("--fit-tasks", type=int, default=None, help="default: --tasks")
    parser.add_argument("--permutations", type=int, default=ExplainSettings.permutations)
    parser.add_argument("--convergence", type=int, default=ExplainSettings.convergence)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = ExplainSettings()
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
    return data


if __name__ == "__main__":
    main()
