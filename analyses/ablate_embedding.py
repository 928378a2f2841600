"""Embedding-width ablation: one-hot (d + k) vs binary (d + ceil(log2 k)) vs none (d) (paper 2 §3).

Replaced by ``python -m analyses run embedding_d<d>_k<k> --budget quick|paper`` (one study folder per cell, e.g.
analyses/studies/embedding_d4_k6/; a new cell is a copy of analyses/studies/_template/); kept for this release.

For each (d, k) pair, trains every embedding for the same seeds and budget (interp.training.sweep, resumable) and
reports the training curves (relative validation objective) and the final evaluation against Lloyd (mean log objective
after 20 re-embedded steps, random init, unseen tasks), median and interquartile band over seeds, with the pair's
claims decided by the rules of ``analyses.claims`` (study ``embedding``). Then the claims across pairs (one-hot
faster than binary at small d, no gap by d = 32, the binary deficit growing with k) are decided on the rows of the
three pairs of the embedding study's design, (4, 6), (4, 16), (32, 6), that exist at this budget and seeds.

``--name stability`` runs the one-hot vs binary stability study instead (paper 2: one-hot unstable in 3 of 10 seeds
without gradient clipping at d = 32, k = 25; binary stable): table ``stability_d<d>_k<k>``, claims of study
``stability``.

``--name embedding_n512`` / ``stability_n512`` run the same designs at the papers' n = 512 (``--n 512``) into tables
``embedding_d<d>_k<k>_n512`` / ``stability_d<d>_k<k>_n512``, decided by the same rules (claims of studies
``embedding_n512``, ``stability_n512``); with one-hot among the embeddings, ``embedding_n512`` also decides study
``n_d4k16`` (does n matter at d = 4, k = 16?) on the one-hot rows of both tables.

Writes analyses/results/studies/embedding_d<d>_k<k>.csv, its _histories.jsonl and _training.json (``python -m
analyses.figures`` draws the figure from them); --results-md puts the sections into analyses/RESULTS.md.

Run: .venv/bin/python -m analyses.ablate_embedding --pairs 4x6 --n 128 --steps 10000 --seeds 153476998 235510766 \
        205084180 129959864 149896109 --eval-tasks 320 --workers 1 --results-md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses.framework.grid import GridStudy, check_study, embedding_cell, run_study, stability_cell
from analyses.sweep import RESUMABLE, add_run_arguments, add_set_argument, assignments, check_outputs
from interp import _arguments as arguments
from interp.model.config import EMBEDDINGS

PROG = "python -m analyses.ablate_embedding"
NAMES = ("embedding", "stability", "embedding_n512", "stability_n512")
AT_PAPER_N = {"embedding_n512": 512, "stability_n512": 512}  # the studies fixed at the papers' n


def pair(text: str) -> tuple[int, int]:
    """An argparse type: a (d, k) pair written DxK, e.g. 32x10."""
    try:
        d, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DxK, e.g. 32x10; got {text!r}") from None
    if d < 1 or k < 1:
        raise argparse.ArgumentTypeError(f"expected DxK with D, K >= 1, e.g. 32x10; got {text!r}")
    return d, k


def pair_study(d: int, k: int, embeddings: list[str], n: int, name: str) -> tuple[str, GridStudy]:
    """The sweep key and study of one (d, k) pair: the embedding cell, or with ``name`` "stability" the one-hot vs
    binary stability cell; a name ending in ``_n512`` is the same study at n = 512 in its own table."""
    suffix = f"_n{n}" if name in AT_PAPER_N else ""
    cell = stability_cell if name.startswith("stability") else embedding_cell
    study = dataclasses.replace(cell(d, k, n, name), grid={"embedding": list(embeddings)})
    return f"{name.split('_')[0]}_d{d}_k{k}{suffix}", study


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", type=pair, default=[(32, 10)], metavar="DxK",
                        help="(d, k) pairs, e.g. 32x10 4x6 (default 32x10)")
    parser.add_argument("--embeddings", nargs="+", default=EMBEDDINGS, choices=EMBEDDINGS)
    parser.add_argument("--n", type=arguments.positive_int, default=512)
    parser.add_argument("--name", choices=NAMES, default="embedding",
                        help="the study: the embedding ablation (default) or the stability study; with _n512 the "
                        "same at the papers' n = 512 (needs --n 512)")
    add_set_argument(parser, "other fixed training fields")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    add_run_arguments(parser, study=True)
    parser.set_defaults(out=str(S.HERE / "results" / "studies"))
    args = parser.parse_args(argv)
    overrides = assignments(args.set, "--set")
    if args.name in AT_PAPER_N and args.n != AT_PAPER_N[args.name]:
        parser.error(f"--n: the study {args.name} is at n = {AT_PAPER_N[args.name]}, got {args.n}")
    runs = []
    for d, k in args.pairs:
        key, study = pair_study(d, k, args.embeddings, args.n, args.name)
        pair_args = argparse.Namespace(**vars(args))
        if args.checkpoints and len(args.pairs) > 1:  # one folder per pair: their runs share names
            pair_args.checkpoints = str(Path(args.checkpoints) / key)
        check_study(key, study, pair_args, overrides, ("--pairs", "--n", "--set", "--steps"))
        runs.append((key, study, pair_args))
    check_outputs(args)
    texts = [run_study(key, study, pair_args, overrides) for key, study, pair_args in runs]
    if args.plan or args.train_only:  # the seed runs each pair's table lacks, or rows only; nothing scored
        return texts
    if args.name == "embedding" and {"onehot", "binary"} <= set(args.embeddings) and set(C.PAIRS) & set(args.pairs):
        from analyses.studies.embedding_across_pairs import across_pairs

        text = across_pairs(Path(args.out), args.steps, args.seeds, args.checkpoints, len(args.pairs) == 1)
        print(text)
        texts.append(text)
        if args.results_md:
            S.write_section("embedding_across_pairs", text, Path(args.results_md))
    if args.name == "embedding_n512" and "onehot" in args.embeddings and (4, 16) in args.pairs:
        from analyses.studies.n_d4k16 import n_at_pair

        text = n_at_pair(Path(args.out), args.steps, args.seeds)
        print(text)
        texts.append(text)
        if args.results_md:
            S.write_section("n_d4k16", text, Path(args.results_md))
    return texts


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted=RESUMABLE))
