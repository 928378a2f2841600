"""Contamination study for the variant algorithms.

On Gaussian-mixture tasks with uniform outliers (5% and 10% of the points, drawn in [-1, 2]^d around the unit
cube) and on heavy-tailed families (cauchy, laplace, lognormal), run Lloyd, each classical reference and each
transformer construction for 10 steps from the same k-means++ centroids, and report the mean log *inlier*
objective (sum over non-outlier points of the squared distance to the nearest centre) and the adjusted Rand
index of the final nearest-centre labels against the true mixture components (inliers only).

Writes analyses/results/variants.csv (``python -m analyses.figures --only variants`` draws the figure from it)
and, with --results-md, puts its table into analyses/RESULTS.md (between ``<!-- study:variants -->`` markers: a
re-run replaces it).

Run: .venv/bin/python -m analyses.studies.variants.measure [--tasks 48] [--n 400] [--d 2] [--k 5] [--results-md]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import shlex
import sys

import torch
from sklearn.metrics import adjusted_rand_score

from analyses import _studies
from analyses._studies import figure_line
from interp import _arguments as arguments
from interp import algorithms as A
from interp._checks import check_output_file, check_output_folder
from interp._io import write_text_atomically
from interp.algorithms import assign, squared_distances
from interp.model import constructions as C
from interp.tasks import TaskConfig, init_centroids, sample_tasks

HERE = _studies.HERE  # the analyses/ folder
PROG = "python -m analyses.variants"


def contaminated_tasks(config: TaskConfig, batch: int, outlier_fraction: float, seed: int):
    """Points (b, n, d) where a fraction are uniform outliers in [-1, 2]^d; labels (b, n), -1 for outliers."""
    tasks = sample_tasks(config, batch, seed, dtype=torch.float64)
    points, labels = tasks.points.clone(), tasks.labels.clone()
    count = int(round(outlier_fraction * config.n))
    if count:
        generator = torch.Generator().manual_seed(seed + 1)
        points[:, :count] = -1 + 3 * torch.rand((batch, count, config.d), generator=generator, dtype=torch.float64)
        labels[:, :count] = -1  # the first points are random positions already (tasks are shuffled)
    return points, labels


def methods(d: int, k: int, steps: int, seed: int) -> dict:
    """name -> callable(points, init) -> centroids (b, k, d)."""
    lloyd_t, soft_t = C.lloyd_transformer(d, k, steps), C.soft_kmeans_transformer(d, k, steps, beta=50.0)
    trimmed_t = C.trimmed_kmeans_transformer(d, k, steps, gamma=10.0)
    robust_t, medoids_t = C.robust_kmeans_transformer(d, k, steps, gamma=50.0), C.kmedoids_transformer(d, k, steps)
    return {
        "Lloyd (reference)": lambda p, c: A.lloyd(p, c, steps).centroids,
        "Lloyd transformer": lambda p, c: lloyd_t(p, c).centroids,
        "soft k-means beta=50 (reference)": lambda p, c: A.soft_kmeans(p, c, steps, beta=50.0).centroids,
        "soft k-means beta=50 transformer": lambda p, c: soft_t(p, c).centroids,
        "trimmed, authors' 0.95 quantile (reference)": lambda p, c: A.trimmed_kmeans(p, c, steps,
                                                                                    rule="quantile").centroids,
        "trimmed, global 10% (Cuesta-Albertos)": lambda p, c: A.trimmed_kmeans(p, c, steps, rule="global",
                                                                              trim=0.1).centroids,
        "trimmed normmax gamma=10 (reference)": lambda p, c: A.trimmed_kmeans(p, c, steps, rule="normmax",
                                                                             gamma=10.0).centroids,
        "trimmed normmax gamma=10 transformer": lambda p, c: trimmed_t(p, c).centroids,
        "robust gamma=0.01 (authors' default)": lambda p, c: A.robust_kmeans(p, c, steps, gamma=0.01).centroids,
        "robust gamma=50 (reference)": lambda p, c: A.robust_kmeans(p, c, steps, gamma=50.0).centroids,
        "robust gamma=50 transformer": lambda p, c: robust_t(p, c).centroids,
        "k-medoids (reference)": lambda p, c: A.randomized_kmedoids(p, c, steps, generator=seed).centroids,
        "k-medoids transformer": lambda p, c: medoids_t(p, c, generator=seed).centroids,
    }


def score(points, labels, centroids) -> tuple[float, float]:
    """Mean log inlier objective and mean ARI of nearest-centre labels vs true components (inliers)."""
    inlier = labels >= 0  # (b, n)
    nearest = squared_distances(points, centroids).amin(-1)  # (b, n)
    objective = torch.log((nearest * inlier).sum(1)).mean().item()
    predicted = assign(points, centroids)
    ari = [adjusted_rand_score(labels[b][inlier[b]].numpy(), predicted[b][inlier[b]].numpy())
           for b in range(len(points))]
    return objective, sum(ari) / len(ari)


def run(tasks: int, n: int, d: int, k: int, steps: int, seed: int) -> list[dict]:
    base = TaskConfig(n=n, d=d, k=k)
    settings = [("normal, 0% outliers", base, 0.0), ("normal, 5% outliers", base, 0.05),
                ("normal, 10% outliers", base, 0.10)]
    settings += [(f"{family}, 0% outliers", dataclasses.replace(base, family=family), 0.0)
                 for family in ("cauchy", "laplace", "lognormal")]
    rows = []
    for setting, config, fraction in settings:
        points, labels = contaminated_tasks(config, tasks, fraction, seed)
        init = init_centroids(points, k, "kmeans++", seed + 2)
        for name, method in methods(d, k, steps, seed).items():
            with torch.no_grad():
                centroids = method(points, init)
            objective, ari = score(points, labels, centroids)
            rows.append({"setting": setting, "method": name, "log_inlier_objective": objective, "ari": ari})
    return rows


def markdown(rows: list[dict], command: str, budget: str) -> str:
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    lines = ["## Variants on contaminated tasks (`python -m analyses.variants`)", "", f"Command: `{command}`  ",
             f"Budget: {budget}  ", figure_line("variants"), "",
             "Mean log inlier objective / ARI (inliers) after 10 steps from the same k-means++ centroids:", "",
             "| method | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for name in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for setting in settings:
            row = next(r for r in rows if r["method"] == name and r["setting"] == setting)
            cells.append(f"{float(row['log_inlier_objective']):.3f} / {float(row['ari']):.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from analyses._studies import RESULTS_MD, write_section

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=arguments.positive_int, default=48)
    parser.add_argument("--n", type=arguments.positive_int, default=400)
    parser.add_argument("--d", type=arguments.positive_int, default=2)
    parser.add_argument("--k", type=arguments.positive_int, default=5)
    parser.add_argument("--steps", type=arguments.positive_int, default=10)
    parser.add_argument("--seed", type=arguments.seed, default=0)
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for variants.csv")
    parser.add_argument("--results-md", action="store_true", help="put the table into analyses/RESULTS.md")
    args = parser.parse_args(argv)
    with arguments.about("--n", "--d", "--k"):
        TaskConfig(n=args.n, d=args.d, k=args.k)
    out = check_output_folder(args.out, ["variants.csv"], "--out")
    if args.results_md:
        check_output_file(RESULTS_MD, "--results-md")
    torch.set_num_threads(2)
    rows = run(args.tasks, args.n, args.d, args.k, args.steps, args.seed)
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomically(out / "variants.csv", buffer.getvalue())
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m analyses.variants", *(shlex.quote(a) for a in given)])
    budget = f"{args.tasks} tasks per setting, n={args.n}, d={args.d}, k={args.k}, {args.steps} steps"
    table = markdown(rows, command, budget)
    print(table)
    if args.results_md:
        write_section("variants", table)
    assert all(math.isfinite(r["log_inlier_objective"]) and math.isfinite(r["ari"]) for r in rows)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
