"""Embedding-width ablation: one-hot (d + k) vs binary (d + ceil(log2 k)) vs none (d) (paper 2 §3).

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
import json
import statistics
import sys
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses.studies import Study, check_study, run_study, tables_evidence
from analyses.sweep import RESUMABLE, add_run_arguments, add_set_argument, assignments, check_outputs
from interp import _arguments as arguments
from interp.model.config import EMBEDDINGS
from interp.training.sweep import read_rows

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


def pair_study(d: int, k: int, embeddings: list[str], n: int, name: str) -> tuple[str, Study]:
    """The sweep key and Study of one (d, k) pair: the embedding ablation, or with ``name`` "stability" the
    one-hot vs binary stability study; a name ending in ``_n512`` is the same study at n = 512 in its own table."""
    grid = {"embedding": list(embeddings)}
    suffix = f"_n{n}" if name in AT_PAPER_N else ""
    if name.startswith("stability"):
        return f"stability_d{d}_k{k}{suffix}", Study(
            f"One-hot vs binary stability without gradient clipping at d = {d}, k = {k}, n = {n}",
            {"d": d, "k": k, "n": n}, grid, "paper 2 §3.5 (one-hot unstable in 3 of 10 seeds without clipping, "
            "binary stable; n = 512, 10,000 steps)", name)
    return f"embedding_d{d}_k{k}{suffix}", Study(
        f"Embedding width at d = {d}, k = {k}, n = {n}: one-hot (D = {d + k}) vs binary vs none (D = {d})",
        {"d": d, "k": k, "n": n}, grid,
        "paper 2 Figs. 2, 6, 10, 14 (n = 512, 10,000 steps, 10 seeds; onehot, binary < Lloyd < none)",
        name, claim_prefix=f"{name}.d{d}k{k}.")


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
        text = across_pairs(Path(args.out), args.steps, args.seeds, args.checkpoints, len(args.pairs) == 1)
        print(text)
        texts.append(text)
        if args.results_md:
            S.write_section("embedding_across_pairs", text, Path(args.results_md))
    if args.name == "embedding_n512" and "onehot" in args.embeddings and (4, 16) in args.pairs:
        text = n_at_pair(Path(args.out), args.steps, args.seeds)
        print(text)
        texts.append(text)
        if args.results_md:
            S.write_section("n_d4k16", text, Path(args.results_md))
    return texts


def n_at_pair(out: Path, steps: int, seeds: list[int]) -> str:
    """Does n matter at d = 4, k = 16? Study ``n_d4k16`` of ``analyses.claims`` decided on the one-hot rows of
    embedding_d4_k16 (n = 128) and embedding_d4_k16_n512 (n = 512) at this budget and these seeds."""
    rows = []
    for table in C.STUDIES["n_d4k16"].tables:
        latest = {}
        for row in read_rows(out / f"{table}.csv"):
            config = json.loads(row["config"])
            if int(row["seed"]) in seeds and config["steps"] == steps and config["embedding"] == "onehot":
                latest[row["name"]] = row
        rows += latest.values()
    lines = [f"## Study `n_d4k16`: training length n at d = 4, k = 16, n = 128 vs 512 (`{S.program()}`)", "",
             f"Command: `{S.command_line()}`  ",
             f"Rows: the {len(rows)} one-hot rows of {', '.join(C.STUDIES['n_d4k16'].tables)} at {steps} steps and "
             f"seeds {', '.join(map(str, seeds))} (the same rows as the embedding sections: not independent evidence)."
             "  ", f"Equivalence margin: +-{C.EQUIVALENCE_MARGIN:g} in R1 (docs/claims.md).", "",
             C.RULES_LINE, "", *C.verdict_lines(C.decide_study("n_d4k16", rows))]
    return "\n".join(lines) + "\n"


def design_rows(out: Path, steps: int, seeds: list[int], checkpoints: str | None,
                single_pair: bool = False) -> tuple[list[dict], dict | None]:
    """The rows of the embedding study's tables in ``out`` at this budget and these seeds (the latest row of each
    name), and their training curves keyed as ``analyses.claims`` reads them (None if some were not kept). Rows
    without a kept curve fall back to their checkpoints in ``checkpoints`` (itself when the command named a single
    pair, else its per-table subfolder, as ``main`` gives ``run_study``)."""
    def folder_of(table: str) -> Path:  # the folders run_study used
        if checkpoints:
            return Path(checkpoints) if single_pair else Path(checkpoints) / table
        return Path("runs") / "studies" / table

    return tables_evidence(out, C.STUDIES["embedding"].tables, steps, seeds, folder_of)


def across_pairs(out: Path, steps: int, seeds: list[int], checkpoints: str | None = None,
                 single_pair: bool = False) -> str:
    """Paper 2 §3.5 across (d, k): one-hot converges faster than binary at small d, no gap by d = 32, the binary
    deficit grows with k at small d; decided by ``analyses.claims`` on the rows of the three design pairs."""
    rows, histories = design_rows(out, steps, seeds, checkpoints, single_pair)
    evidence = C.Evidence(tuple(rows), histories)
    lines = [f"## Study `embedding_across_pairs`: one-hot vs binary convergence across (d, k) (`{S.program()}`)",
             "",
             f"Command: `{S.command_line()}`  ",
             f"Rows: the {len(rows)} rows of {', '.join(C.STUDIES['embedding'].tables)} at {steps} steps and seeds "
             f"{', '.join(map(str, seeds))}.  ",
             "Speed of convergence A = mean relative validation objective over the training curve after step 0 (lower "
             "is faster); median over seeds.", ""]
    if histories is not None:
        lines += ["| d | k | seeds | A one-hot | A binary | binary / one-hot - 1 |", "|---|---|---|---|---|---|"]
        for d, k in C.PAIRS:
            areas = {name: [C.curve_area(evidence, row) for row in evidence.cell(d=d, k=k, embedding=name)]
                     for name in ("onehot", "binary")}
            if areas["onehot"] and areas["binary"]:
                onehot, binary = statistics.median(areas["onehot"]), statistics.median(areas["binary"])
                lines.append(f"| {d} | {k} | {len(areas['onehot'])} | {onehot:.3f} | {binary:.3f} | "
                             f"{binary / onehot - 1:+.1%} |")
        lines.append("")
    results = []
    for claim in C.claims_of("embedding"):
        if claim.id.startswith("embedding.d"):
            continue  # a pair's own claims are in its section
        if histories is None:
            results.append((claim, C.Verdict(C.UNDECIDED, "reads the training curves, which were not kept for these "
                                             "rows", "not evaluated")))
        else:
            results.append((claim, C.decide(claim, rows, histories)))
    lines += [C.RULES_LINE, "", *C.verdict_lines(results)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted=RESUMABLE))
