"""The claims of the learning-rate grid at d = 32, k = 6 (study ``lr``, paper 2 App. F; docs/claims.md)."""

import json

from analyses import claims as C
from analyses.framework.statistics import fisher_greater_p

UNSTABLE_METRIC = (f"unstable seeds: a seed is unstable when its run diverged or was unscorable (status not ok) or its "
                   f"relative objective rose more than {C.SPIKE:.0%} above the lowest value logged before it (history "
                   "relative_objective; the definition the lr study used before these runs)")


def _lr_claims() -> list[C.Claim]:
    rates = (0.001, 0.01, 0.1, 1.0)
    cell = {lr: (f"lr={lr:g}", {"lr": lr}) for lr in rates}

    def best(ev: C.Evidence) -> C.Finding:
        return C._all([C._ranks(cell[0.01][0], C._values(ev, cell[0.01], C.final_relative), cell[lr][0],
                                C._values(ev, cell[lr], C.final_relative), "less") for lr in (0.001, 0.1, 1.0)])

    def high_unstable(ev: C.Evidence) -> C.Finding:
        base = [C.unstable(ev, row) for row in ev.cell(**cell[0.01][1])]
        findings = []
        for lr in (0.1, 1.0):
            flags = [C.unstable(ev, row) for row in ev.cell(**cell[lr][1])]
            p = fisher_greater_p(sum(flags), len(flags), sum(base), len(base))
            findings.append(C.Finding(p <= C.ALPHA, f"{cell[lr][0]}: {sum(flags)}/{len(flags)} seeds unstable vs "
                                                    f"{sum(base)}/{len(base)} at lr=0.01, one-sided p = {p:.3f}"))
        return C._all(findings)

    def stable_base(ev: C.Evidence) -> C.Finding:
        flags = [C.unstable(ev, row) for row in ev.cell(**cell[0.01][1])]
        return C.Finding(not any(flags), f"lr=0.01: {sum(flags)}/{len(flags)} seeds unstable (0 needed)")

    paper = "paper 2 App. F"
    return [
        C.Claim("lr.lr001_best", "lr", paper, "At d = 32, lr 0.01 gives the best final objective",
                C.R1_METRIC + C.WHY_R1,
                C._check("one-sided rank test of R1(lr 0.01) < R1(lr) for each lr in {0.001, 0.1, 1} (all must pass)",
                         C.R1_COLUMNS, best),
                C._check(f"at least {C.MIN_SEEDS} seeds at each lr", (),
                         lambda ev: C._enough(ev, list(cell.values())))),
        C.Claim("lr.high_lr_unstable", "lr", paper, "At d = 32, lr 0.1 and 1.0 are unstable", UNSTABLE_METRIC,
                C._check("for lr 0.1 and for lr 1.0: one-sided Fisher test of a higher rate of unstable seeds than at "
                         "lr 0.01 (both must pass)", (), high_unstable, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds at each lr, no gradient clipping, and no seed unstable at lr "
                         "0.01 (a stable baseline: instability of every lr would say nothing about high lr)", (),
                         lambda ev: C._all([C._enough(ev, list(cell.values())), stable_base(ev), _no_clipping(ev)]),
                         history=True)),
    ]


def _no_clipping(ev: C.Evidence) -> C.Finding:
    clipped = sum(json.loads(str(row["config"])).get("grad_clip") is not None for row in ev.rows)
    return C.Finding(clipped == 0, f"{clipped}/{len(ev.rows)} rows trained with gradient clipping (0 needed)")


CLAIMS = tuple(_lr_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("lr", "Learning rate at d = 32", "d = 32, k = 6, one-hot, n = 128; lr in {0.001, 0.01, 0.1, 1}; "
                  "5 seeds (the paper: 5,000 steps)", ("lr",)),
)
