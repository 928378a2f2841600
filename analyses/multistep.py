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
from pathlib import Path

import torch

from analyses import _studies as S
from interp._io import write_text_atomically

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

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", default=["main-onehot", "main-binary", "main-none"])
    parser.add_argument("--tasks", type=int, default=320)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(S.HERE / "results" / "studies"))
    parser.add_argument("--name", default="multistep", help="results name (JSON, figure, section)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.steps < 1:
        raise SystemExit("error: --tasks and --steps must be positive")
    torch.set_num_threads(args.threads)
    paths = []
    for item in args.checkpoints:
        matches = sorted(glob.glob(item)) if any(ch in item for ch in "*?[") else [item]
        if not matches:
            raise SystemExit(f"error: --checkpoints {item!r} matches no file")
        paths += matches
    by_embedding: dict[str, list[dict]] = {}
    for path in paths:
        model = load_model(path)
        by_embedding.setdefault(model.config.embedding, []).append(curves(model, args.tasks, args.steps, args.n,
                                                                          args.seed))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
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
    main()
