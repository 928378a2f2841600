"""The claims of the training family and the 5 x 5 transfer grid at d = 32, k = 10 (study ``family``, paper 2
Figs. 4, 5, 8, 16, 18; docs/claims.md)."""

import json
import math

from analyses import claims as C
from analyses.framework.statistics import median as _median
from interp.task_config import FAMILIES


def _family_claims() -> list[C.Claim]:
    cell = {family: (family, {"family": family}) for family in FAMILIES}
    others = [cell[family] for family in C.NON_CAUCHY]

    def cauchy_fails(ev: C.Evidence) -> C.Finding:
        return C._sign("cauchy", C._values(ev, cell["cauchy"], C.twenty_step_gap), ">", 0, fmt="+.3f")

    def others_beat(ev: C.Evidence) -> C.Finding:
        return C._all([C._sign(c[0], C._values(ev, c, C.twenty_step_gap), "<", 0, fmt="+.3f") for c in others])

    def transfer(ev: C.Evidence) -> C.Finding:
        return C._all([C._sign(f"{train}->{test}", C._values(ev, cell[train], C.transfer_gap(test)), "<", 0, fmt="+.3f")
                       for train in C.NON_CAUCHY for test in C.NON_CAUCHY])

    def cauchy_everywhere(ev: C.Evidence) -> C.Finding:
        return C._all([C._sign(f"cauchy->{test}", C._values(ev, cell["cauchy"], C.transfer_gap(test)), ">", 0,
                               fmt="+.3f") for test in FAMILIES])

    def on_cauchy(ev: C.Evidence) -> C.Finding:
        findings = []
        for train in C.NON_CAUCHY:
            rows = ev.cell(**cell[train][1])
            gaps = [C.transfer_gap("cauchy")(ev, row) for row in rows]
            flags = [math.isfinite(g) and g > 0 for g in gaps]
            findings.append(C._flags(f"{train}->cauchy", flags,
                                     f"finite and worse than Lloyd (median {_median(gaps):+.3f})"))
        return C._all(findings)

    def loss_gaps(ev: C.Evidence) -> C.Finding:
        rows = ev.cell(**cell["normal"][1]) + ev.cell(**cell["cauchy"][1])
        n = json.loads(str(rows[0]["config"]))["n"] if rows else C.PAPER_N
        scale = n / C.PAPER_N
        gap = C.loss_gap("loss_gap_max")
        return C._all([C._sign("normal", C._values(ev, cell["normal"], gap), "<=", 0.5 * scale, fmt=".2f"),
                       C._sign("cauchy", C._values(ev, cell["cauchy"], gap), ">", 5 * scale, fmt=".2f")])

    paper = "paper 2 Figs. 4, 16"
    grid = "paper 2 Figs. 8, 18"
    return [
        C.Claim("family.cauchy_fails", "family", paper,
                "Models trained on cauchy tasks fail: on cauchy tasks they end worse than Lloyd",
                C.G20_METRIC + C.WHY_FAMILY,
                C._check("sign test of G20 > 0 for the cauchy-trained models", C.G20_COLUMNS, cauchy_fails),
                C._check(f"at least {C.MIN_SEEDS} seeds trained on cauchy and on normal, and the normal-trained models "
                         "beat Lloyd on normal tasks (median G20 < 0): the budget trains a family that can",
                         C.G20_COLUMNS, lambda ev: C._all([C._enough(ev, (cell["cauchy"], cell["normal"])),
                                                           C._beats_lloyd_20(ev, cell["normal"])]))),
        C.Claim("family.others_beat_lloyd", "family", paper,
                "Models trained on normal, gumbel, laplace and lognormal tasks beat Lloyd on their own family",
                C.G20_METRIC + C.WHY_FAMILY_AGAIN,
                C._check("sign test of G20 < 0 for each of the four families (all must pass)", C.G20_COLUMNS,
                         others_beat),
                C._check(f"at least {C.MIN_SEEDS} seeds per family, and Lloyd's 20-step log objective finite in every "
                         "scored row", ("lloyd_log_objective",),
                         lambda ev: C._all([C._enough(ev, others), C._lloyd_finite(ev, others)]))),
        C.Claim("family.transfer_among_non_cauchy", "family", grid,
                "Among normal, gumbel, laplace and lognormal, every (training family, test family) pair beats Lloyd",
                "G20 on each test family (column transfer: 20-step model and Lloyd objectives per test family)"
                + C.WHY_FAMILY_AGAIN,
                C._check("sign test of G20 < 0 for each of the 16 pairs (all must pass)", ("transfer",), transfer),
                C._check(f"at least {C.MIN_SEEDS} seeds per training family, and every scored row holds all 5 test "
                         "families with finite Lloyd objectives", ("transfer",),
                         lambda ev: C._all([C._enough(ev, others), C._transfer_complete(ev, others)]))),
        C.Claim("family.cauchy_trained_fail_everywhere", "family", grid,
                "Models trained on cauchy tasks are worse than Lloyd on every test family",
                "G20 on each test family (column transfer)" + C.WHY_FAMILY_AGAIN,
                C._check("sign test of G20 > 0 on each of the 5 test families (all must pass)", ("transfer",),
                         cauchy_everywhere),
                C._check(f"at least {C.MIN_SEEDS} seeds trained on cauchy and on normal, the normal-trained models "
                         "beat Lloyd on normal tasks (median G20 < 0), and every cauchy row holds all 5 test families",
                         C.G20_COLUMNS + ("transfer",),
                         lambda ev: C._all([C._enough(ev, (cell["cauchy"], cell["normal"])),
                                            C._beats_lloyd_20(ev, cell["normal"]),
                                            C._transfer_complete(ev, (cell["cauchy"],))]))),
        C.Claim("family.others_on_cauchy_not_competitive", "family", grid,
                "Models trained on the other four families, tested on cauchy tasks, do not diverge but do not beat "
                "Lloyd",
                "G20 on cauchy tasks (column transfer), finite = did not diverge" + C.WHY_FAMILY_AGAIN,
                C._check("for each of the four families: sign test of the seeds with a finite G20 > 0 on cauchy (all "
                         "must pass)", ("transfer",), on_cauchy),
                C._check(f"at least {C.MIN_SEEDS} seeds per family, each family beats Lloyd on its own tasks (median "
                         "G20 < 0): the models are trained, so the cauchy result is about cauchy; every scored row "
                         "holds all 5 test families", C.G20_COLUMNS + ("transfer",),
                         lambda ev: C._all([C._enough(ev, others), *(C._beats_lloyd_20(ev, c) for c in others),
                                            C._transfer_complete(ev, others)]))),
        C.Claim("family.loss_gap_normal_small_cauchy_large", "family", "paper 2 Fig. 5",
                "The smoothed-vs-true loss gap is at most about 0.5 for normal and can exceed 5 for cauchy (at n = "
                "512; here scaled by n / 512, the gap being a sum over the n points)",
                "loss_gap_max: the largest over the evaluation tasks of the smoothed loss minus the k-means objective "
                "after one step; the paper's statement is about the largest gaps ('can exceed')",
                C._check("sign tests of gap <= 0.5 n/512 (normal) and of gap > 5 n/512 (cauchy) (both must pass)",
                         ("loss_gap_max",), loss_gaps),
                C._check(f"at least {C.MIN_SEEDS} seeds trained on normal and on cauchy", (),
                         lambda ev: C._enough(ev, (cell["normal"], cell["cauchy"])))),
    ]


CLAIMS = tuple(_family_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("family", "Training family and the 5 x 5 transfer grid",
                  "d = 32, k = 10, one-hot, n = 128, tau = 0.1; training family in {normal, cauchy, gumbel, laplace, "
                  "lognormal}, each model scored on all five; 10,000 steps, 5 seeds", ("family",)),
)
