"""The claims of the studies ``multistep`` (multi-step inference: re-embedding vs naive stacking vs Lloyd, paper 2
Fig. 6) and ``generalisation`` (length and shift, paper 2 Fig. 7), both scored on the seeds' checkpoints that this
folder trains (docs/claims.md). Their rows hold the per-step curves of the evaluation protocol (``C.curve_at``)."""

import json
import math
from collections.abc import Callable, Mapping, Sequence

from analyses import claims as C
from analyses.framework.statistics import median as _median
from interp.model.config import EMBEDDINGS

CURVE_COLUMNS = ("model_curve", "lloyd_curve")
STEP_T_METRIC = ("G_T = model_curve[T] - lloyd_curve[T]: mean log k-means objective over the unseen tasks after T "
                 "re-embedded model steps minus after T Lloyd iterations from the same random starts (T = 20; < 0 "
                 "beats Lloyd)")


def _full_budget(ev: C.Evidence, cells: Sequence[C.Cell]) -> C.Finding:
    rows = [row for _, fields in cells for row in ev.cell(**fields)]
    good = sum(json.loads(str(row["config"]))["steps"] >= C.PAPER_STEPS for row in rows)
    return C.Finding(good == len(rows), f">= {C.PAPER_STEPS} configured training steps in {good}/{len(rows)} rows")


def _scored(ev: C.Evidence, cells: Sequence[C.Cell]) -> list[Mapping[str, object]]:
    return [row for _, fields in cells for row in ev.cell(**fields) if row["status"] != "unscorable"]


def _t_steps(ev: C.Evidence, cells: Sequence[C.Cell], columns: Sequence[str]) -> C.Finding:
    rows = _scored(ev, cells)
    good = sum(all(len(C._curve_values(row, column)) == C.MULTISTEP_T + 1 for column in columns) for row in rows)
    return C.Finding(good == len(rows), f"T = {C.MULTISTEP_T} steps in {good}/{len(rows)} scored rows")


def _lloyd_t_finite(ev: C.Evidence, cells: Sequence[C.Cell]) -> C.Finding:
    rows = _scored(ev, cells)
    finite = sum(bool(values) and math.isfinite(values[-1]) for values in
                 (C._curve_values(row, "lloyd_curve") for row in rows))
    return C.Finding(finite == len(rows), f"Lloyd's step-T log objective finite in {finite}/{len(rows)} scored rows")


def _beats_lloyd_t(ev: C.Evidence, cell: C.Cell) -> C.Finding:
    median = _median(C._values(ev, cell, C.step_t_gap))
    return C.Finding(median < 0, f"{cell[0]} median step-T gap {median:+.3f} (< 0 needed)")


def _curve_control(cells: Sequence[C.Cell], columns: Sequence[str],
                   positive: C.Cell | None = None) -> Callable[[C.Evidence], C.Finding]:
    """Over ``cells`` and the ``positive`` control's cell: enough seeds, the papers' training budget, T = 20 steps in
    ``columns`` and Lloyd finite at step T; and ``positive`` beats Lloyd at step T in the median."""
    def evaluate(ev: C.Evidence) -> C.Finding:
        every = [*cells, *([positive] if positive else [])]
        return C._all([C._enough(ev, every), *([_beats_lloyd_t(ev, positive)] if positive else []),
                       _full_budget(ev, every), _t_steps(ev, every, columns), _lloyd_t_finite(ev, every)])
    return evaluate


MULTISTEP_METRIC = ("mean log k-means objective after steps 0..T (T = 20) over the unseen tasks (n = 512, random "
                    "starts), per seed: model_curve (the layer applied T times, re-embedding [X; 0], [C; codes] "
                    "before every step), stacked_curve (the residual streams flow on: naive stacking), lloyd_curve (T "
                    "Lloyd iterations from the same starts); one row per checkpoint (seed) of the embedding ablation "
                    "at d = 32, k = 10, n = 512, tau = 0.1")
MULTISTEP_COLUMNS = ("model_curve", "stacked_curve", "lloyd_curve")


def _multistep_claims() -> list[C.Claim]:
    cell = {name: (name, {"embedding": name}) for name in EMBEDDINGS}
    every = list(cell.values())

    def diverges(ev: C.Evidence) -> C.Finding:
        findings = []
        for name in EMBEDDINGS:
            flags, rises = [], []
            for row in ev.cell(**cell[name][1]):
                first, last = C.curve_at(row, "stacked_curve", 1), C.curve_at(row, "stacked_curve", -1)
                rise = last - first if math.isfinite(first) and math.isfinite(last) else math.nan
                flags.append(rise > 0)
                rises += [rise] if math.isfinite(rise) else []
            findings.append(C._flags(name, flags, f"with stacked[T] > stacked[1] (median rise {_median(rises):+.3f})"))
        return C._all(findings)

    def beat(ev: C.Evidence) -> C.Finding:
        return C._all([C._sign(cell[name][0], C._values(ev, cell[name], C.step_t_gap), "<", 0, fmt="+.3f")
                       for name in ("onehot", "binary")])

    def none_between(ev: C.Evidence) -> C.Finding:
        flags = [C.curve_at(row, "model_curve", -1) < C.curve_at(row, "model_curve", 0)
                 and C.step_t_gap(ev, row) > 0 for row in ev.cell(**cell["none"][1])]
        gaps = C._values(ev, cell["none"], C.step_t_gap)
        return C._flags("none", flags, f"with model[T] < model[0] and model[T] > Lloyd[T] (median step-T gap "
                                       f"{_median(gaps):+.3f})")

    paper = "paper 2 Fig. 6, §3"
    control = (f"at least {C.MIN_SEEDS} seeds of {{}}, trained for at least {C.PAPER_STEPS} configured steps, T = "
               f"{C.MULTISTEP_T} in every scored row and Lloyd's step-T objective finite in every scored row")
    return [
        C.Claim("multistep.stacking_diverges", "multistep", paper,
                "Naive stacking (applying the trained layer T times without re-embedding) diverges after step 1, for "
                "every embedding", MULTISTEP_METRIC + "; here the stacked curve at step 1 and at step T",
                C._check("for each of one-hot, binary and none: sign test of the seeds whose stacked objective at step "
                         "T is above its step-1 value (a seed that did not end cleanly, or whose values are not "
                         "finite, is not counted as diverging; all three must pass)", ("stacked_curve",), diverges),
                C._check(control.format("each embedding"), MULTISTEP_COLUMNS,
                         _curve_control(every, MULTISTEP_COLUMNS))),
        C.Claim("multistep.reembedded_onehot_binary_beat_lloyd", "multistep", paper,
                "Re-embedded for T = 20 steps, the one-hot and the binary model beat Lloyd's 20 iterations",
                STEP_T_METRIC + "; " + MULTISTEP_METRIC,
                C._check("sign test of G_T < 0 for one-hot and for binary (both must pass)", CURVE_COLUMNS, beat),
                C._check(control.format("one-hot and of binary"), CURVE_COLUMNS,
                         _curve_control((cell["onehot"], cell["binary"]), CURVE_COLUMNS))),
        C.Claim("multistep.reembedded_none_improves_but_misses_lloyd", "multistep", paper,
                "Re-embedded for T = 20 steps, the d-only model (none) improves on its start but stays worse than "
                "Lloyd's 20 iterations", MULTISTEP_METRIC + "; here model_curve at steps 0 and T and G_T",
                C._check("sign test of the none seeds with model_curve[T] < model_curve[0] and G_T > 0", CURVE_COLUMNS,
                         none_between),
                C._check(control.format("none and of one-hot") + ", and one-hot beats Lloyd at step T (median G_T < "
                         "0): the budget trains an embedding that can, so a miss is the embedding's", CURVE_COLUMNS,
                         _curve_control((cell["none"],), CURVE_COLUMNS, positive=cell["onehot"]))),
    ]


GENERALISATION_METRIC = ("the one-hot model's checkpoints (seeds) scored by `interp evaluate` (320 unseen tasks per "
                         "setting, random starts, T = 20): per seed and setting the mean log objective after steps "
                         "0..T of the re-embedded model (model_curve) and of Lloyd (lloyd_curve)")


def _generalisation_claims() -> list[C.Claim]:
    def onehot(name: str, protocol: str, setting: str) -> C.Cell:
        return (name, {"embedding": "onehot", "protocol": protocol, "setting": setting})

    lengths = [onehot(f"n={n}", "length", f"n={n}") for n in C.GENERALISATION_LENGTHS]
    shifts = [onehot(shift, "shift", shift) for shift in C.SHIFTS]
    double = shifts[-1]
    home = ("in-distribution n=512", {"embedding": "onehot", "protocol": "main", "setting": "in-distribution",
                                      "eval_n": C.PAPER_N})

    def every(cells: Sequence[C.Cell]) -> Callable[[C.Evidence], C.Finding]:
        return lambda ev: C._all([C._sign(c[0], C._values(ev, c, C.step_t_gap), "<", 0, fmt="+.3f") for c in cells])

    def overtakes(ev: C.Evidence) -> C.Finding:
        rows = ev.cell(**double[1])
        first = [C._number(C.curve_at(row, "model_curve", 1) - C.curve_at(row, "lloyd_curve", 1)) for row in rows]
        last = [C.step_t_gap(ev, row) for row in rows]
        flags = [math.isfinite(a) and a > 0 and b < 0 for a, b in zip(first, last)]
        return C._flags(double[0], flags, f"worse than Lloyd after step 1 and better after step T (median gaps "
                                          f"{_median(first):+.3f} at step 1, {_median(last):+.3f} at step T)")

    control = (f"at least {C.MIN_SEEDS} seeds in every setting read and in-distribution (protocol main, n = 512); the "
               "in-distribution model beats Lloyd at step T (median G_T < 0): the checkpoints are trained, so a miss "
               f"is the setting's; at least {C.PAPER_STEPS} configured training steps, T = {C.MULTISTEP_T} and Lloyd's "
               "step-T objective finite in every scored row")
    paper = "paper 2 Fig. 7"
    return [
        C.Claim("generalisation.length_beats_lloyd_at_every_n", "generalisation", paper,
                "Length generalisation: trained at n = 512, the one-hot model beats Lloyd after 20 steps at every n in "
                f"{{{', '.join(map(str, C.GENERALISATION_LENGTHS))}}}", STEP_T_METRIC + "; " + GENERALISATION_METRIC,
                C._check("sign test of G_T < 0 at each n (all four must pass)", CURVE_COLUMNS, every(lengths)),
                C._check(control, CURVE_COLUMNS, _curve_control(lengths, CURVE_COLUMNS, positive=home))),
        C.Claim("generalisation.shift_beats_lloyd_at_every_shift", "generalisation", paper,
                "Shift generalisation: the one-hot model beats Lloyd after 20 steps under every distribution shift "
                "(unequal weights, anisotropic, half scale, double scale)",
                STEP_T_METRIC + "; " + GENERALISATION_METRIC,
                C._check("sign test of G_T < 0 in each shift setting (all four must pass)", CURVE_COLUMNS,
                         every(shifts)),
                C._check(control, CURVE_COLUMNS, _curve_control(shifts, CURVE_COLUMNS, positive=home))),
        C.Claim("generalisation.double_scale_starts_worse_then_overtakes", "generalisation", paper,
                "At double scale the one-hot model starts slightly worse than Lloyd and overtakes it later",
                "model_curve - lloyd_curve after step 1 and after step T (T = 20); " + GENERALISATION_METRIC,
                C._check("sign test of the double-scale seeds with model_curve[1] > lloyd_curve[1] and model_curve[T] "
                         "< lloyd_curve[T]", CURVE_COLUMNS, overtakes),
                C._check(control, CURVE_COLUMNS, _curve_control((double,), CURVE_COLUMNS, positive=home))),
    ]


CLAIMS = (*_multistep_claims(), *_generalisation_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("multistep", "Multi-step inference over seeds: re-embedding vs naive stacking vs Lloyd",
                  "the 10,000-step checkpoints of the embedding ablation at d = 32, k = 10, n = 512, tau = 0.1 "
                  "(embedding in {onehot, binary, none}, 5 seeds each), each applied T = 20 times re-embedded and "
                  "stacked, against 20 Lloyd iterations; 320 unseen tasks, n = 512, random starts",
                  ("multistep_seeds",), source="`analyses/results/studies/multistep_seeds.csv`, one row per checkpoint "
                  "(`python -m analyses.main_seeds`: each seed trained, then scored by `analyses.multistep --seed-rows "
                  "--keep-rows`)"),
    C.StudyDesign("generalisation", "Length and shift generalisation of the one-hot model over seeds",
                  "the 5 one-hot checkpoints of the multistep study (d = 32, k = 10, trained at n = 512, 10,000 steps) "
                  "scored by `interp evaluate`: protocols main (n = 512), length (n in {128, 256, 1024, 2048}) and "
                  "shift (unequal weights, anisotropic, half scale, double scale); 320 tasks per setting, random "
                  "starts, T = 20", ("generalisation",),
                  source="`analyses/results/studies/generalisation.csv`, one row per checkpoint and setting "
                  "(`python -m analyses.main_seeds`: each one-hot seed trained, then scored by "
                  "`analyses.generalisation --keep-rows`)"),
)
