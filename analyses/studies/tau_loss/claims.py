"""The claims of the loss (NE softmax vs L2 sparsemax) x temperature tau grid at d = 4, k = 6 (study ``tau_loss``,
paper 2 Figs. 2, 5, 9, 14; docs/claims.md). Study tau_loss_d32 decides the same claims on its own rows; they are
registered once, here."""

import math
from collections.abc import Callable, Sequence

from analyses import claims as C
from analyses.framework.statistics import median as _median


def _tau_cell(loss: str, tau: float) -> C.Cell:
    return (f"{C.LOSS_NAMES[loss]} tau={tau:g}", {"loss": loss, "tau": tau})


def _tau_claims() -> list[C.Claim]:
    every = [_tau_cell(loss, tau) for loss in C.LOSS_NAMES for tau in C.TAUS]
    ne = {tau: _tau_cell("softmin", tau) for tau in C.TAUS}
    l2 = {tau: _tau_cell("sparsemax", tau) for tau in C.TAUS}
    gap = C.loss_gap("loss_gap_mean")

    def tighter(ev: C.Evidence) -> C.Finding:
        return C._all([C._ranks(l2[tau][0], C._values(ev, l2[tau], gap), "NE", C._values(ev, ne[tau], gap), "less",
                                fmt=".2f") for tau in C.TAUS])

    def both_beat(ev: C.Evidence) -> C.Finding:
        return C._all([C._sign(cell[0], C._values(ev, cell, C.final_relative), "<", 1) for cell in (ne[0.1], l2[0.1])])

    def ne_misses(ev: C.Evidence) -> C.Finding:
        return C._sign(ne[1.0][0], C._values(ev, ne[1.0], C.final_relative), ">", 1)

    def l2_improves_misses(ev: C.Evidence) -> C.Finding:
        flags, finals = [], []
        for row in ev.cell(**l2[1.0][1]):
            final = C.final_relative(ev, row)
            finals.append(final)
            flags.append(1 < final < float(ev.history(row)[0]["relative_objective"]))
        return C._flags(l2[1.0][0], flags, f"improve on step 0 but stay above 1 (median final {_median(finals):.3f})")

    def worse(ev: C.Evidence) -> C.Finding:
        return C._all([C._ranks(cells[1.0][0], C._values(ev, cells[1.0], C.final_relative), "tau=0.1",
                                C._values(ev, cells[0.1], C.final_relative), "greater") for cells in (ne, l2)])

    def faster(ev: C.Evidence) -> C.Finding:
        return C._all([C._ranks(cells[1.0][0], C._values(ev, cells[1.0], C.settling_step), "tau=0.1",
                                C._values(ev, cells[0.1], C.settling_step), "less", fmt=".0f") for cells in (ne, l2)])

    def settles(ev: C.Evidence, cell: C.Cell) -> C.Finding:
        rows = ev.cell(**cell[1])
        last = max((float(ev.history(row)[-1]["step"]) for row in rows), default=math.nan)
        median = _median([C.settling_step(ev, row) for row in rows])
        return C.Finding(median <= C.SETTLED_BY * last, f"{cell[0]} median settling step {median:.0f} of {last:.0f} "
                                                        f"(<= {C.SETTLED_BY:.0%} needed)")

    def enough_and_reach(cells: Sequence[C.Cell], reference: Sequence[C.Cell]) -> Callable[[C.Evidence], C.Finding]:
        return lambda ev: C._all([C._enough(ev, cells), *(C._reaches(ev, cell) for cell in reference)])

    paper = "paper 2 Figs. 2, 9, 14"
    return [
        C.Claim("tau_loss.l2_tighter_than_ne", "tau_loss", paper + ", Fig. 5, Prop. H.1",
                "The L2 (sparsemax) loss is tighter than the NE (softmax) loss at every tau",
                "loss gap = loss_gap_mean: smoothed loss minus k-means objective after one step, mean over the "
                "evaluation tasks, with each run's own tau and loss. Chosen over the logged batch losses because every "
                "run is scored on the same tasks (a batch loss is one noisy batch of 32 tasks) and tightness is what "
                "the paper's bound (Prop. H.1) is about",
                C._check("at each tau: one-sided rank test of gap(L2) < gap(NE) (all four must pass)",
                         ("loss_gap_mean",), tighter),
                C._check(f"at least {C.MIN_SEEDS} seeds in each of the 8 cells", (), lambda ev: C._enough(ev, every))),
        C.Claim("tau_loss.tau01_both_beat_one_step_lloyd", "tau_loss", paper,
                "At tau = 0.1 the models trained with either loss beat one-step Lloyd", C.R1_METRIC + C.WHY_R1,
                C._check("sign test of R1 < 1 for NE and for L2 at tau = 0.1 (both must pass)", C.R1_COLUMNS,
                         both_beat),
                C._check(f"at least {C.MIN_SEEDS} seeds of NE and L2 at tau = 0.1", (),
                         lambda ev: C._enough(ev, (ne[0.1], l2[0.1])))),
        C.Claim("tau_loss.tau1_ne_misses_lloyd", "tau_loss", paper,
                "At tau = 1 the NE-trained model does not generalise: it misses one-step Lloyd (the paper: its "
                "validation objective rises)", C.R1_METRIC + C.WHY_R1,
                C._check("sign test of R1 > 1 for NE at tau = 1", C.R1_COLUMNS, ne_misses),
                C._check(f"at least {C.MIN_SEEDS} seeds of NE at tau = 1 and 0.1, and NE at tau = 0.1 reaches one-step "
                         "Lloyd (median final R1 < 1): the miss is tau's, not the budget's", C.R1_COLUMNS,
                         enough_and_reach((ne[1.0], ne[0.1]), (ne[0.1],)))),
        C.Claim("tau_loss.tau1_l2_improves_but_misses_lloyd", "tau_loss", paper,
                "At tau = 1 the L2-trained model improves but misses one-step Lloyd",
                "R1, final and at step 0 (history relative_objective)" + C.WHY_R1,
                C._check("sign test of the seeds with 1 < final R1 < step-0 R1 (L2, tau = 1)", C.R1_COLUMNS,
                         l2_improves_misses, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds of L2 at tau = 1 and 0.1, and L2 at tau = 0.1 reaches one-step "
                         "Lloyd (median final R1 < 1)", C.R1_COLUMNS,
                         enough_and_reach((l2[1.0], l2[0.1]), (l2[0.1],)))),
        C.Claim("tau_loss.higher_tau_worse", "tau_loss", paper,
                "Higher tau converges to worse solutions (tau = 1 against tau = 0.1, for each loss)",
                C.R1_METRIC + C.WHY_R1,
                C._check("for NE and for L2: one-sided rank test of R1(tau = 1) > R1(tau = 0.1) (both must pass)",
                         C.R1_COLUMNS, worse),
                C._check(f"at least {C.MIN_SEEDS} seeds in the 4 cells, and both losses reach one-step Lloyd at tau = "
                         "0.1 (median final R1 < 1): at a budget where tau = 0.1 has not converged, a high tau can "
                         "look better only because it is faster", C.R1_COLUMNS,
                         enough_and_reach((ne[1.0], ne[0.1], l2[1.0], l2[0.1]), (ne[0.1], l2[0.1])))),
        C.Claim("tau_loss.higher_tau_faster", "tau_loss", paper,
                "Higher tau converges faster (tau = 1 against tau = 0.1, for each loss)",
                f"settling step S: the first logged step from which every logged R1 stays within {C.SETTLE:.0%} of the "
                "run's final R1 (history step, relative_objective); it measures when a run stops moving, whatever "
                "level it stops at, which is what 'faster' means next to 'worse'",
                C._check("for NE and for L2: one-sided rank test of S(tau = 1) < S(tau = 0.1) (both must pass)", (),
                         faster, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds in the 4 cells, and at tau = 0.1 both losses settle within "
                         f"{C.SETTLED_BY:.0%} of the logged steps (median S): a run still moving at the end has no "
                         "settling step to compare", (),
                         lambda ev: C._all([C._enough(ev, (ne[1.0], ne[0.1], l2[1.0], l2[0.1])), settles(ev, ne[0.1]),
                                            settles(ev, l2[0.1])]), history=True)),
    ]


CLAIMS = tuple(_tau_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("tau_loss", "Loss (NE softmax vs L2 sparsemax) x temperature tau",
                  "d = 4, k = 6, one-hot, n = 128; tau in {1, 0.25, 0.14, 0.1} x loss in {softmin (NE), sparsemax "
                  "(L2)}; 10,000 steps, 5 seeds. The same rules decide the same grid at d = 32 (paper 2 shows both d), "
                  "on the rows of `analyses/results/studies/tau_loss_d32.csv` (section `tau_loss_d32` of "
                  "analyses/RESULTS.md)", ("tau_loss",)),
)
