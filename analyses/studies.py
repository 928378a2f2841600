"""The learning-factor studies of paper 2 (§3 and App. F) as named sweeps, each checked against the paper.

Studies (grid; the paper's finding):
  tau_loss   loss {softmin (NE), sparsemax (L2)} x tau {1, 0.25, 0.14, 0.1} (Figs. 2, 9, 14)
  lr         lr {0.001, 0.01, 0.1, 1} at d = 32 (App. F: 0.01 best, 0.1 and 1.0 unstable)
  n          n {128, 256, 512, 1024} (no significant effect)
  k          k {6, 10, 16, 25} (Fig. 10a)
  d          d {4, 8, 16, 32} (Figs. 10b, 15)
  family     training family {normal, cauchy, gumbel, laplace, lognormal}, each model scored on all five (the
             5 x 5 transfer grid, Figs. 8/18) and the smoothed-vs-true loss gap per family (Fig. 5)

Each run writes analyses/results/studies/<study>.csv (one row per seed, via interp.training.sweep) and
<study>_training.json (median and interquartile band over seeds of the training curves, from the checkpoints'
histories) and prints a markdown section: the table, the command, the budget, the command that draws the figure
from those two files (``python -m analyses.figures --only <study>``: training curves and 20-step evaluation
curves) and each of the paper's claims marked reproduced / not reproduced by a rule computed from the rows.
``--results-md`` puts that section into analyses/RESULTS.md.

Run: .venv/bin/python -m analyses.studies --study tau_loss --steps 1000 --seeds 0 1 2 --results-md
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from analyses import _studies as S
from analyses.sweep import add_run_arguments, parse_assignments

Claim = tuple[str, str, "bool | None"]  # (paper's claim, what we measured, reproduced?)


def _median(rows: list[dict], name: str) -> float:
    return S.quantile(S.column(rows, name), 0.5)


def _final_losses(curves_meta: dict, label: str) -> float:
    """Median over seeds of the mean training loss over the last quarter of the logged steps."""
    values = []
    for history in curves_meta[label]:
        losses = [h["loss"] for h in history if h["loss"] is not None]
        tail = losses[-max(1, len(losses) // 4):]
        values.append(sum(tail) / len(tail))
    return S.quantile(values, 0.5)


def _spike(history: list[dict]) -> float:
    """Largest relative rise of the validation objective above its best value so far (0 = never rose)."""
    best, worst_rise = float("inf"), 0.0
    for h in history:
        rel = h["relative_objective"]
        if rel != rel:  # nan
            return float("inf")
        if best < float("inf"):
            worst_rise = max(worst_rise, rel / best - 1)
        best = min(best, rel)
    return worst_rise


def check_tau_loss(groups: dict, histories: dict | None) -> list[Claim]:
    """Paper 2 Figs. 2, 9, 14. Without ``histories`` the claim that quotes training losses is left out."""
    taus = sorted({json.loads(rows[0]["config"])["tau"] for rows in groups.values()})
    label = lambda loss, tau: f"loss={loss}_tau={tau}"  # noqa: E731
    claims = []
    both = [tau for tau in taus if label("sparsemax", tau) in groups and label("softmin", tau) in groups]
    gaps = {(loss, tau): _median(groups[label(loss, tau)], "loss_gap_mean") for loss in ("sparsemax", "softmin")
            for tau in both}
    if histories is not None:
        batch = {(loss, tau): _final_losses(histories, label(loss, tau)) for loss in ("sparsemax", "softmin")
                 for tau in both}
        claims.append(("L2 (sparsemax) gives lower, tighter training losses than NE (softmax) at every tau; verdict "
                       "on tightness: smoothed loss minus the k-means objective after one step, mean over the "
                       "evaluation tasks (the last logged batch losses, single noisy batches, are shown in brackets)",
                       "; ".join(f"tau={t}: L2 {gaps[('sparsemax', t)]:.2f} vs NE {gaps[('softmin', t)]:.2f} "
                                 f"({batch[('sparsemax', t)]:.1f} vs {batch[('softmin', t)]:.1f})" for t in both),
                       all(gaps[("sparsemax", t)] < gaps[("softmin", t)] for t in both) if both else None))
    low, high = min(taus), max(taus)
    rel = {(loss, tau): _median(groups[label(loss, tau)], "relative_objective")
           for loss in ("softmin", "sparsemax") for tau in (low, high) if label(loss, tau) in groups}
    if len(rel) == 4:
        claims.append((f"tau = {low}: both losses beat one-step Lloyd (relative objective < 1)",
                       f"NE {rel[('softmin', low)]:.3f}, L2 {rel[('sparsemax', low)]:.3f}",
                       rel[("softmin", low)] < 1 and rel[("sparsemax", low)] < 1))
        claims.append((f"tau = {high}: neither reaches one-step Lloyd (NE does not generalise; L2 improves but "
                       "misses Lloyd)", f"NE {rel[('softmin', high)]:.3f}, L2 {rel[('sparsemax', high)]:.3f}",
                       rel[("softmin", high)] > 1 and rel[("sparsemax", high)] > 1))
    finals = {loss: [(tau, _median(groups[label(loss, tau)], "model_log_objective")) for tau in taus
                     if label(loss, tau) in groups] for loss in ("softmin", "sparsemax")}
    claims.append(("higher tau converges to worse solutions (final log objective falls as tau falls)",
                   "; ".join(f"{loss}: " + ", ".join(f"{t}->{v:.3f}" for t, v in values)
                             for loss, values in finals.items()),
                   all(values[-1][1] > values[0][1] for values in finals.values() if len(values) > 1)))
    return claims


def check_lr(groups: dict, histories: dict | None) -> list[Claim]:
    """Paper 2 App. F. Without ``histories`` the stability claim (it reads the training curves) is left out."""
    finals = {label: _median(rows, "model_log_objective") for label, rows in groups.items()}
    best = min(finals, key=finals.get)
    claims = [("lr 0.01 gives the best final objective", ", ".join(f"{k}: {v:.3f}" for k, v in finals.items()),
               best == "lr=0.01" if "lr=0.01" in finals else None)]
    if histories is None:
        return claims
    unstable = {}
    for label in ("lr=0.1", "lr=1.0"):
        if label in groups:
            diverged = sum(r["status"] != "ok" for r in groups[label])
            spike = S.quantile([_spike(h) for h in histories[label]], 0.5)
            unstable[label] = (diverged, spike)
    stable_spike = S.quantile([_spike(h) for h in histories.get("lr=0.01", [])], 0.5) if "lr=0.01" in groups else 0.0
    claims.append(("lr 0.1 and 1.0 are unstable at d = 32 (diverged seeds, or the validation objective jumps "
                   "> 25% above its best so far, while at lr 0.01 it does not)",
                   "; ".join(f"{k}: {d} diverged, median jump {s:.0%}" for k, (d, s) in unstable.items())
                   + f"; lr=0.01: median jump {stable_spike:.0%}",
                   (all(d > 0 or s > 0.25 for d, s in unstable.values()) and stable_spike <= 0.25)
                   if len(unstable) == 2 else None))
    return claims


def _beats_lloyd_everywhere(groups: dict, what: str) -> list[Claim]:
    gaps = {label: S.quantile([float(r["model_log_objective"]) - float(r["lloyd_log_objective"]) for r in rows], 0.5)
            for label, rows in groups.items()}
    return [(f"the learned model beats Lloyd after 20 steps at every {what}",
             ", ".join(f"{k}: {v:+.3f}" for k, v in gaps.items()), all(v < 0 for v in gaps.values()))]


def check_n(groups: dict, histories: dict) -> list[Claim]:
    # the objective is a sum over the n points, so compare the models with Lloyd on the same tasks: no significant
    # effect of n = the interquartile bands of (model - Lloyd) final log objective overlap
    bands = {label: S.band([float(r["model_log_objective"]) - float(r["lloyd_log_objective"]) for r in rows])
             for label, rows in groups.items()}
    overlap = max(low for _, low, _ in bands.values()) <= min(high for _, _, high in bands.values())
    return [("the training length n has no significant effect (interquartile bands of model - Lloyd overlap)",
             ", ".join(f"{k}: {m:.3f} [{lo:.3f}, {hi:.3f}]" for k, (m, lo, hi) in bands.items()), overlap)]


def check_k(groups: dict, histories: dict) -> list[Claim]:
    return _beats_lloyd_everywhere(groups, "k")


def check_d(groups: dict, histories: dict) -> list[Claim]:
    return _beats_lloyd_everywhere(groups, "d")


def check_family(groups: dict, histories: dict) -> list[Claim]:
    claims = []
    rel = {label.split("=")[1]: _median(rows, "relative_objective") for label, rows in groups.items()}
    others = {f: v for f, v in rel.items() if f != "cauchy"}
    if "cauchy" in rel:
        claims.append(("cauchy-trained models fail (validation far worse than one-step Lloyd) while the other "
                       "families beat it", ", ".join(f"{k}: {v:.3f}" for k, v in rel.items()),
                       rel["cauchy"] > 1 and all(v < 1 for v in others.values())))
    gap = {label.split("=")[1]: S.quantile(S.column(rows, "loss_gap_max"), 0.5) for label, rows in groups.items()}
    if "cauchy" in gap and "normal" in gap:
        n = json.loads(next(iter(groups.values()))[0]["config"])["n"]
        scale = n / 512  # the gap is a sum over points; the paper's thresholds are at n = 512
        claims.append((f"smoothed-vs-true loss gap: about 0.5 or less for normal, can exceed 5 for cauchy (at n = 512; "
                       f"thresholds scaled by n/512 = {scale:g} here; largest gap over the evaluation tasks)",
                       ", ".join(f"{k}: {v:.2f}" for k, v in gap.items()),
                       gap["normal"] <= 0.5 * scale and gap["cauchy"] > 5 * scale))
    grid = transfer_grid(groups)
    if grid:
        non_cauchy = [v for (train, test), v in grid.items() if "cauchy" not in (train, test)]
        claims.append(("transfer: among normal/gumbel/laplace/lognormal every train-test pair beats Lloyd",
                       f"{sum(v < 0 for v in non_cauchy)} of {len(non_cauchy)} pairs beat Lloyd",
                       all(v < 0 for v in non_cauchy) if non_cauchy else None))
    return claims


def transfer_grid(groups: dict) -> dict[tuple[str, str], float]:
    """(training family, test family) -> median over seeds of model - Lloyd final log objective."""
    grid = {}
    for label, rows in groups.items():
        train_family = label.split("=")[1]
        transfers = [json.loads(r["transfer"]) for r in rows]
        for test_family in transfers[0]:
            grid[(train_family, test_family)] = S.quantile(
                [t[test_family]["model"] - t[test_family]["lloyd"] for t in transfers], 0.5)
    return grid


def transfer_table(groups: dict) -> str:
    grid = transfer_grid(groups)
    if not grid:
        return ""
    tests = list(dict.fromkeys(test for _, test in grid))
    trains = list(dict.fromkeys(train for train, _ in grid))
    lines = ["Transfer grid: median (model - Lloyd) final log objective, rows = training family, columns = test "
             "family (< 0 beats Lloyd):", "", "| trained on \\ tested on | " + " | ".join(tests) + " |",
             "|---|" + "---|" * len(tests)]
    for train in trains:
        lines.append(f"| {train} | " + " | ".join(f"{grid[(train, test)]:+.3f}" for test in tests) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Study:
    """A named study: fixed fields, the grid, the paper's finding and the rule that checks it."""

    title: str
    base: dict
    grid: dict
    paper: str
    check: Callable[[dict, dict | None], list[Claim]]  # (groups, histories or None) -> claims
    eval_families: tuple[str, ...] = ()
    extra: Callable[[dict], str] = field(default=lambda groups: "")


FAMILIES = ["normal", "cauchy", "gumbel", "laplace", "lognormal"]
STUDIES = {
    "tau_loss": Study("Loss (NE softmax vs L2 sparsemax) x temperature tau", {"d": 4, "k": 6, "n": 128},
                      {"loss": ["softmin", "sparsemax"], "tau": [1.0, 0.25, 0.14, 0.1]},
                      "paper 2 Figs. 2, 9, 14 (d in {4, 32}, k = 6, n = 512, 10,000 steps, 10 seeds)", check_tau_loss),
    "lr": Study("Learning rate at d = 32", {"d": 32, "k": 6, "n": 128}, {"lr": [0.001, 0.01, 0.1, 1.0]},
                "paper 2 App. F (k = 6, n = 512, M = 5,000 steps, 10 seeds)", check_lr),
    "n": Study("Training length n", {"d": 4, "k": 6}, {"n": [128, 256, 512, 1024]},
               "paper 2 §3 / App. F (k = 6, 10,000 steps, 10 seeds)", check_n),
    "k": Study("Number of clusters k", {"d": 32, "n": 128}, {"k": [6, 10, 16, 25]},
               "paper 2 Fig. 10a (d = 32, n = 512, 10,000 steps, 10 seeds)", check_k),
    "d": Study("Dimension d", {"k": 6, "n": 128}, {"d": [4, 8, 16, 32]},
               "paper 2 Figs. 10b, 15 (k = 6, n = 512, 10,000 steps, 10 seeds)", check_d),
    "family": Study("Training family, transfer grid and loss gap", {"d": 32, "k": 10, "n": 128},
                    {"family": FAMILIES}, "paper 2 Figs. 4, 5, 8, 16, 18 (d = 32, k = 10, n = 512, 10 seeds)",
                    check_family, eval_families=tuple(FAMILIES), extra=transfer_table),
}


def section(name: str, study: Study, rows: list[dict], histories: dict, budget: str, command: str,
            val_tasks: int, eval_steps: int) -> str:
    groups = S.by_label(rows)
    claims = study.check(groups, histories)
    lines = [f"## Study `{name}`: {study.title} (`python -m analyses.studies`)", "",
             f"Command: `{command}`  ", f"Budget: {budget}  ", f"Paper: {study.paper}  ", S.figure_line(name), "",
             "Median [interquartile range] over seeds; relative objective = one step vs one Lloyd iteration on the "
             f"run's {val_tasks} validation tasks; log objectives after {eval_steps} re-embedded steps vs "
             f"{eval_steps} Lloyd iterations on unseen tasks (random init); loss gap = smoothed loss minus "
             "k-means objective after one step.", "", S.summary_table(rows), ""]
    extra = study.extra(groups)
    if extra:
        lines += [extra, ""]
    lines += S.claim_lines(claims)
    return "\n".join(lines) + "\n"


def histories_by_label(checkpoint_dir: Path, rows: list[dict]) -> dict[str, list[list[dict]]]:
    from interp.model.checkpoint import load_checkpoint

    out: dict[str, list[list[dict]]] = {}
    for row in rows:
        _, meta = load_checkpoint(checkpoint_dir / f"{row['name']}.safetensors")
        out.setdefault(row["label"], []).append(meta["history"])
    return out


def sweep_config(key: str, study: Study, args: argparse.Namespace, overrides: dict):
    """The ``SweepConfig`` of a study run with these command-line arguments (``study_rows`` of it picks the rows
    of exactly this run from the CSV)."""
    from interp.training.sweep import SweepConfig

    base = {**study.base, "steps": args.steps, **overrides}
    checkpoints = Path(args.checkpoints) if args.checkpoints else Path("runs") / "studies" / key
    return SweepConfig(study=key, base=base, grid=study.grid, seeds=tuple(args.seeds), out=Path(args.out),
                       checkpoints=checkpoints, backend=args.backend, workers=args.workers,
                       batch_seeds=not args.no_batch_seeds, eval_tasks=args.eval_tasks, eval_steps=args.eval_steps,
                       eval_families=study.eval_families)


def budget_text(config, args: argparse.Namespace) -> str:
    """The budget line of a study section: fixed fields, seeds and evaluation tasks."""
    fixed = ", ".join(f"{k}={v}" for k, v in config.base.items())
    return (f"{fixed}; {len(args.seeds)} seeds ({', '.join(map(str, args.seeds))}), "
            f"{args.eval_tasks} evaluation tasks; smaller than the paper's, as this 2-core CPU machine requires")


def run_study(key: str, study: Study, args: argparse.Namespace, overrides: dict) -> str:
    """Sweep ``study`` (resumably), write its CSV and training curves, return (and with --results-md store) its
    section; ``python -m analyses.figures --only KEY`` draws its figure from those files."""
    from interp.training.sweep import run_sweep, study_rows

    config = sweep_config(key, study, args, overrides)
    run_sweep(config)
    rows = study_rows(config)  # this grid, fixed fields and seeds only (a CSV may hold earlier budgets too)
    histories = histories_by_label(config.checkpoint_dir, rows)
    fixed = ", ".join(f"{k}={v}" for k, v in config.base.items())
    title = f"{study.title}<br><sup>here: {fixed}, {len(args.seeds)} seeds; {study.paper}</sup>"
    S.write_training(Path(args.out), key, title, rows, histories,
                     source=f"checkpoint histories in {config.checkpoint_dir} (median and band over seeds)")
    val_tasks = config.base.get("val_tasks", 320)
    text = section(key, study, rows, histories, budget_text(config, args), S.command_line(), val_tasks,
                   args.eval_steps)
    print(text)
    if args.results_md:
        S.write_section(key, text, Path(args.results_md))
    return text


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, choices=sorted(STUDIES))
    parser.add_argument("--name", default=None, help="results name (CSV, figure, section); default the study's")
    parser.add_argument("--set", nargs="*", default=[], help="NAME=value: override fixed fields (smaller budgets)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    add_run_arguments(parser)
    parser.set_defaults(out=str(S.HERE / "results" / "studies"))
    args = parser.parse_args(argv)
    return run_study(args.name or args.study, STUDIES[args.study], args, parse_assignments(args.set, False))


if __name__ == "__main__":
    main()
