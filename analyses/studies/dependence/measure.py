"""Which claims rest on the same training runs: the evidence each registered claim's verdict reads, at the papers'
budget.

Several studies hold runs of one training config and seed: the one-hot d = 4, k = 6, tau = 0.1 run is a cell of the
embedding, tau x loss, d and n studies; the one-hot d = 32, k = 6 run one of the embedding, d, k and lr studies and of
tau x loss at d = 32; the main configuration's checkpoints are scored by both the multistep and the generalisation
study. Each sweep table that holds such a run trains it anew from the same initial weights and task draws, so the rows
are one seeded training (rows written by different versions of the code can differ by float rounding, which training
amplifies). For every claim of ``analyses.claims`` decided on sweep rows, this module records the runs its verdict
reads (``claims.rows_read``: the cells its rule and its control ask for, since the control decides whether the verdict
counts; a run is ``claims.run_identity``, its training config with the seed) on the committed rows at 10,000 steps and
the papers'-budget seeds, and which claims of other studies read one of the same runs. The overview of
analyses/RESULTS.md marks those claims and counts the verdicts twice: over every claim, and over the claims whose runs
no other study's claim reads (independent evidence only). A section that decides a study's claims on other tables
(``SECTIONS``: tau x loss at d = 32) has its own entries, keyed ``<section>/<claim id>``.

Writes analyses/results/studies/dependence.json.

Run: python -m analyses.studies.dependence.measure
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyses import _shared
from analyses import _studies as S
from analyses import claims as C
from analyses.framework.budgets import MORE_SEEDS, PAPER, SEEDS
from interp import _arguments as arguments
from interp._checks import check_output_file

PROG = "python -m analyses.dependence"
OUT = S.HERE / "results" / "studies" / "dependence.json"


# sections that decide a study's claims on the rows of other tables: section -> (the claims' study, the tables); their
# entries are keyed "<section>/<claim id>" (the claim ids are the study's)
SECTIONS = {"tau_loss_d32": ("tau_loss", ("tau_loss_d32",))}


STEPS = PAPER.steps


def entry(claims: dict, section: str, claim_id: str) -> dict:
    """The dependence entry of the claim ``claim_id`` as decided in the RESULTS.md section ``section``."""
    return claims.get(f"{section}/{claim_id}") or claims.get(claim_id, {})


def study_evidence(tables: tuple[str, ...], folder: Path) -> tuple[list[dict], dict | None]:
    """The committed rows of ``tables`` at STEPS steps and the papers'-budget seeds (the latest row of each name per
    table), and their training histories keyed by ``claims.row_key`` (None when some were not kept)."""
    from analyses.framework.grid import tables_evidence

    return tables_evidence(folder, tables, STEPS, SEEDS + MORE_SEEDS, lambda table: Path("runs") / "studies" / table)


def dependence(folder: Path) -> dict:
    """{claim id: {"study", "runs" (how many runs its rule and control read), "shares_runs_with" (claim ids of other
    studies)}} for every claim whose study has sweep rows at the papers' budget."""
    read, study_of = {}, {}
    deciders = [(study, study, C.STUDIES[study].tables) for study in C.STUDIES] + [
        (section, study, tables) for section, (study, tables) in SECTIONS.items()]
    for name, study, tables in deciders:
        prefix = "" if name == study else f"{name}/"
        rows, histories = study_evidence(tables, folder)
        if not rows:
            continue
        for claim in C.claims_of(study):
            needs_curves = claim.rule.history_keys or claim.control.history_keys
            if needs_curves and histories is None:
                continue  # a claim whose curves were not kept is undecided by its section; it reads no run here
            read[prefix + claim.id] = {C.run_identity(row) for row in C.rows_read(claim, rows, histories)}
            study_of[prefix + claim.id] = name
    shared = C.shared_runs(read, study_of)
    return {claim: {"study": study_of[claim], "runs": len(read[claim]), "shares_runs_with": shared[claim]}
            for claim in read}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(OUT), help="the JSON to write")
    args = parser.parse_args(argv)
    out = check_output_file(args.out, "--out")
    result = dependence(S.HERE / "results" / "studies")
    _shared.write_json({"command": PROG, "source": "written by that command", "claims": result}, out)
    sharing = sorted(claim for claim, entry in result.items() if entry["shares_runs_with"])
    print(f"{len(result)} claims; {len(sharing)} read runs another study's claims read: {', '.join(sharing)}")
    return result


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
