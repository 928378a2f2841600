"""Embedding-width ablation: one-hot (d + k) vs binary (d + ceil(log2 k)) vs none (d) (SPEC §3.1-3.5).

For each (d, k) pair, trains every embedding for the same seeds and budget (interp.sweep, resumable) and reports
the training curves (relative validation objective) and the final evaluation against Lloyd (mean log objective
after 20 re-embedded steps, random init, unseen tasks), median and interquartile band over seeds. The paper's
headline is checked per pair: final log objective onehot, binary < Lloyd < none.

Writes analyses/results/studies/embedding_d<d>_k<k>.csv and .html; --results-md puts the section into
analyses/RESULTS.md.

Run: .venv/bin/python analyses/ablate_embedding.py --pairs 32x10 --steps 3000 --seeds 153476998 235510766 \
        205084180 --results-md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _studies as S  # noqa: E402
from studies import Claim, Study, run_study  # noqa: E402
from sweep import add_run_arguments, parse_assignments  # noqa: E402

EMBEDDINGS = ["onehot", "binary", "none"]


def check_embedding(groups: dict, histories: dict) -> list[Claim]:
    """onehot, binary < Lloyd < none by the median final log objective; none never reaches one-step Lloyd."""
    final = {label.split("=")[1]: S.quantile(S.column(rows, "model_log_objective"), 0.5)
             for label, rows in groups.items()}
    lloyd = S.quantile([float(r["lloyd_log_objective"]) for rows in groups.values() for r in rows], 0.5)
    claims = []
    if set(final) == set(EMBEDDINGS):
        claims.append(("final log objective: onehot, binary < Lloyd < none",
                       f"onehot {final['onehot']:.3f}, binary {final['binary']:.3f}, Lloyd {lloyd:.3f}, "
                       f"none {final['none']:.3f}",
                       final["onehot"] < lloyd and final["binary"] < lloyd < final["none"]))
    if "embedding=none" in groups:
        best_none = min(min(h["relative_objective"] for h in history) for history in histories["embedding=none"])
        claims.append(("none (d-only) improves but never matches one-step Lloyd during training",
                       f"best relative objective of any none seed {best_none:.3f}", best_none > 1))
    return claims


def parse_pair(text: str) -> tuple[int, int]:
    try:
        d, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"error: --pairs takes DxK, e.g. 32x10; got {text!r}") from None
    return d, k


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=["32x10"], help="DxK pairs, e.g. 32x10 4x6")
    parser.add_argument("--embeddings", nargs="+", default=EMBEDDINGS, choices=EMBEDDINGS)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--set", nargs="*", default=[], help="NAME=value: other fixed training fields")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    add_run_arguments(parser)
    parser.set_defaults(out=str(S.HERE / "results" / "studies"))
    args = parser.parse_args(argv)
    texts = []
    for pair in args.pairs:
        d, k = parse_pair(pair)
        study = Study(f"Embedding width at d = {d}, k = {k}: one-hot (D = {d + k}) vs binary vs none (D = {d})",
                      {"d": d, "k": k, "n": args.n}, {"embedding": list(args.embeddings)},
                      "paper 2 Figs. 2, 6, 10, 14 (n = 512, 10,000 steps, 10 seeds; onehot, binary < Lloyd < none)",
                      check_embedding)
        key = f"embedding_d{d}_k{k}"
        pair_args = argparse.Namespace(**vars(args))
        if args.checkpoints and len(args.pairs) > 1:  # one folder per pair: their runs share names
            pair_args.checkpoints = str(Path(args.checkpoints) / key)
        texts.append(run_study(key, study, pair_args, parse_assignments(args.set, False)))
    return texts


if __name__ == "__main__":
    main()
