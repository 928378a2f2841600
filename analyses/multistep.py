"""Multi-step inference: re-embedding vs naive stacking for T = 20 steps (paper 2 Fig. 6, §3).

One trained layer is applied T times. Re-embedding resets the streams to [X; 0] and [C_current; codes] before
every step (the papers' protocol); naive stacking lets the residual streams flow on (``reembed=False``). Both are
compared with T Lloyd iterations from the same random initial centroids on unseen tasks (mean log objective per
step), per embedding: median and interquartile band over the given checkpoints (seeds).

Default checkpoints: the shipped main models (n = 512, d = 32, k = 10, tau = 0.1, 10,000 steps: the paper's
Fig. 6 setting); add more with --checkpoints (paths or globs, e.g. the embedding ablation's seeds).

Writes <out>/<name>.json (the curves; ``python -m analyses.figures --only <name>`` draws the figure from it).

Run: .venv/bin/python -m analyses.multistep --tasks 320 --steps 20 --results-md
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import torch

from analyses import _studies as S
from interp import _arguments as arguments
from interp._checks import check_output_file, check_output_folder
from interp._io import write_text_atomically

PROG = "python -m analyses.multistep"
DEFAULT_CHECKPOINTS = ("main-onehot", "main-binary", "main-none")
SHOWN_STEPS = (1, 2, 5, 10, 20)


@torch.no_grad()
def curves(model, n_tasks: int, steps: int, n: int, seed: int) -> dict[str, list[float]]:
    """Mean log objective after steps 0..T: re-embedded model, stacked model and Lloyd, same tasks and start."""
    from interp.algorithms import lloyd, log_objective
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    config = model.config
    points = sample_tasks(TaskConfig(n=n, d=config.d, k=config.k), n_tasks, seed).points  # (V, n, d)
    init = init_centroids(points, config.k, "random", seed + 1)  # (V, k, d)
    out = {}
    for name, reembed in (("reembedded", True), ("stacked", False)):
        trajectory = model(points, init, steps=steps, reembed=reembed).centroid_trajectory  # (V, T+1, k, d)
        out[name] = [log_objective(points, trajectory[:, t]).double().mean().item() for t in range(steps + 1)]
    reference = lloyd(points, init, steps).centroid_trajectory  # (V, T+1, k, d)
    out["lloyd"] = [log_objective(points, reference[:, t]).double().mean().item() for t in range(steps + 1)]
    return out


def checkpoints(text: str) -> list[str]:
    """An argparse type: a shipped checkpoint name or path, or a glob pattern, as the checkpoints it names."""
    if not any(ch in text for ch in "*?["):
        return [arguments.checkpoint(text)]
    matches = sorted(glob.glob(text))
    if not matches:
        raise argparse.ArgumentTypeError(f"{text!r} matches no file")
    return [arguments.checkpoint(match) for match in matches]


def checks(by_embedding: dict[str, list[dict]], steps: int) -> list[tuple[str, str, bool | None]]:
    med = {e: {kind: [S.quantile([c[kind][t] for c in runs], 0.5) for t in range(steps + 1)]
               for kind in ("reembedded", "stacked", "lloyd")} for e, runs in by_embedding.items()}
    claims = []
    rises = {e: m["stacked"][steps] - m["stacked"][1] for e, m in med.items()}
    claims.append(("naive stacking diverges after step 1 (its objective at step T is worse than at step 1)",
                   ", ".join(f"{e}: {v:+.3f}" for e, v in rises.items()), all(v > 0 for v in rises.values())))
    beat = {e: med[e]["reembedded"][steps] - med[e]["lloyd"][steps] for e in ("onehot", "binary") if e in med}
    if beat:
        claims.append((f"re-embedded one-hot and binary beat Lloyd's iterations (step {steps})",
                       ", ".join(f"{e}: {v:+.3f}" for e, v in beat.items()), all(v < 0 for v in beat.values())))
    if "none" in med:
        m = med["none"]
        claims.append(("re-embedded none improves but stays worse than Lloyd",
                       f"step 0 {m['reembedded'][0]:.3f} -> step {steps} {m['reembedded'][steps]:.3f}; "
                       f"Lloyd {m['lloyd'][steps]:.3f}",
                       m["reembedded"][steps] < m["reembedded"][0] and m["reembedded"][steps] > m["lloyd"][steps]))
    return claims


def table_lines(by_embedding: dict[str, list[dict]], steps: int) -> list[str]:
    """The section's tables: objective after the shown steps per embedding and mode, then the verdicts."""
    shown = [t for t in SHOWN_STEPS if t <= steps] or [steps]
    lines = ["Mean log objective after step t, median [interquartile range] over checkpoints:", "",
             "| embedding (checkpoints) | mode | " + " | ".join(f"t={t}" for t in shown) + " |",
             "|---|---|" + "---|" * len(shown)]
    for embedding, runs in by_embedding.items():
        for kind in ("reembedded", "stacked", "lloyd"):
            cells = [S.fmt_band([r[kind][t] for r in runs]) for t in shown]
            lines.append(f"| {embedding} ({len(runs)}) | {kind} | " + " | ".join(cells) + " |")
    return lines + ["", *S.claim_lines(checks(by_embedding, steps))]


def main(argv: list[str] | None = None) -> str:
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", type=checkpoints, default=None, metavar="CHECKPOINT",
                        help=f"names, paths or globs (default {' '.join(DEFAULT_CHECKPOINTS)})")
    parser.add_argument("--tasks", type=arguments.positive_int, default=320)
    parser.add_argument("--steps", type=arguments.positive_int, default=20)
    parser.add_argument("--n", type=arguments.positive_int, default=512)
    parser.add_argument("--seed", type=arguments.seed, default=20261130)
    parser.add_argument("--threads", type=arguments.threads, default=2)
    parser.add_argument("--out", default=str(S.HERE / "results" / "studies"))
    parser.add_argument("--name", default="multistep", type=arguments.plain_name,
                        help="results name (JSON, figure, section)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    args = parser.parse_args(argv)
    paths = [path for group in args.checkpoints for path in group] if args.checkpoints else list(DEFAULT_CHECKPOINTS)
    out = check_output_folder(args.out, [f"{args.name}.json"], "--out")
    if args.results_md:
        check_output_file(args.results_md, "--results-md")
    models = [load_model(path) for path in paths]
    for model in models:
        with arguments.about("--n"):
            TaskConfig(n=args.n, d=model.config.d, k=model.config.k)
    torch.set_num_threads(args.threads)
    by_embedding: dict[str, list[dict]] = {}
    for model in models:
        by_embedding.setdefault(model.config.embedding, []).append(curves(model, args.tasks, args.steps, args.n,
                                                                          args.seed))
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    write_text_atomically(out / f"{args.name}.json",
                          json.dumps({"checkpoints": paths, "curves": by_embedding}, indent=1))
    lines = [f"## Study `{args.name}`: re-embedding vs naive stacking (`python -m analyses.multistep`)", "",
             f"Command: `{S.command_line()}`  ",
             f"Budget: {args.tasks} unseen tasks, n={args.n}, {args.steps} steps, random init; checkpoints "
             f"{', '.join(Path(p).name for p in paths)}  ",
             "Paper: paper 2 Fig. 6 (T = 20; trained n = 512, d = 32, k = 10, tau = 0.1; 10 seeds)  ",
             S.figure_line(args.name), "", *table_lines(by_embedding, args.steps)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results_md:
        S.write_section(args.name, text, Path(args.results_md))
    return text


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
