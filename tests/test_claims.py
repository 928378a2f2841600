"""The claim registry of analyses/claims.py: for every claim, made-up study rows whose answer is known by hand give
each of the three outcomes (reproduced, not reproduced, undecided because the control fails) with the deciding
figure computed by hand; every rule and control reads only columns its rows' writer writes (the sweep, the multistep
seed rows, the generalisation rows, Table 1's reader); docs/claims.md is the generator's output. The exact tests
themselves are checked against scipy in tests/test_statistics.py."""

import csv
import io
import json
import math
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from analyses import claims as C
from interp._checks import InvalidInput, InvalidInputType

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (11, 12, 13, 14, 15)
TEN_SEEDS = tuple(range(21, 31))
BASE_CONFIG = {"d": 32, "k": 10, "n": 128, "embedding": "onehot", "family": "normal", "loss": "softmin", "tau": 0.1,
               "lr": 0.01, "steps": 10000, "grad_clip": None}
FAMILIES = ("normal", "cauchy", "gumbel", "laplace", "lognormal")
NON_CAUCHY = ("normal", "gumbel", "laplace", "lognormal")
R, N, U = "reproduced", "not reproduced", "undecided at this budget"


# ----- made-up rows and histories -----------------------------------------------------------------------------------
def cell(study, fields, seeds=SEEDS, status=None, config=None, **columns):
    """The CSV rows of one grid point, one per seed; a column's value is one per seed (a list) or shared."""
    label = "_".join(f"{key}={value}" for key, value in fields.items())
    rows = []
    for i, seed in enumerate(seeds):
        row = {"study": study, "name": f"{label}_seed={seed}", "label": label, "seed": str(seed), "steps": "10000",
               "status": status[i] if status else "ok", "relative_objective": "0.9", "model_log_objective": "4.0",
               "lloyd_log_objective": "4.2", "model_curve": "[]", "lloyd_curve": "[]", "loss_gap_mean": "0.1",
               "loss_gap_max": "0.1", "transfer": "{}",
               "config": json.dumps({**BASE_CONFIG, **(config or {}), **fields, "seed": seed})}
        for column, value in columns.items():
            value = value[i] if isinstance(value, list) else value
            row[column] = json.dumps(value) if isinstance(value, dict) else str(value)
        rows.append(row)
    return rows


def curve(*values):
    """A training history logged every 50 steps, step 0 first."""
    return [{"step": 50 * i, "loss": None if i == 0 else 1.0, "relative_objective": v, "lr": 0.01}
            for i, v in enumerate(values)]


def hist(rows, *curves):
    """{"<study>/<name>": history} for ``rows``: one curve for all rows, or one per row."""
    return {f"{row['study']}/{row['name']}": curves[0] if len(curves) == 1 else curves[i]
            for i, row in enumerate(rows)}


def spread(start, step=0.01, n=5):
    return [round(start + step * i, 6) for i in range(n)]


@dataclass
class Case:
    rows: list
    histories: dict | None
    figure: str
    control: str | None = None  # a part of the control's figure the case must show (the failing part)


CLAIM = {claim.id: claim for claim in C.CLAIMS}
SCENARIOS = {}


def scenarios(*ids):
    def register(function):
        for claim_id in ids:
            SCENARIOS[claim_id] = (function, claim_id)
        return function
    return register


# ----- study a: embedding width -------------------------------------------------------------------------------------
CELLS = ((4, 6), (4, 16), (32, 6), (8, 8))  # the embedding cells; (8, 8) registered by its study folder


def _pair(claim_id):
    d, k = (int(v) for v in claim_id.split(".")[1][1:].split("k"))
    return d, k, f"embedding_d{d}_k{k}", f"d={d},k={k}"


def emb(table, d, k, embedding, **kwargs):
    return cell(table, {"embedding": embedding}, config={"d": d, "k": k}, **kwargs)


@scenarios(*(f"embedding.d{d}k{k}.onehot_binary_beat_one_step_lloyd" for d, k in CELLS),
           "embedding_n512.d4k16.onehot_binary_beat_one_step_lloyd")
def _beat(claim_id):
    d, k, table, at = _pair(claim_id)
    onehot = emb(table, d, k, "onehot", relative_objective=spread(0.90))
    binary = emb(table, d, k, "binary", relative_objective=spread(0.95))
    # a diverged seed counts as the worst value, whatever its last relative objective says
    diverged = emb(table, d, k, "binary", status=["ok"] * 4 + ["diverged"], relative_objective=spread(0.95)[:4] + [0.5])
    short = emb(table, d, k, "binary", seeds=SEEDS[:4], relative_objective=spread(0.95)[:4])
    first = f"{at} onehot: 5/5 seeds < 1, median 0.920, p = 0.031"
    return {R: Case(onehot + binary, None, f"{first}; {at} binary: 5/5 seeds < 1, median 0.970, p = 0.031"),
            N: Case(onehot + diverged, None, f"{first}; {at} binary: 4/5 seeds < 1, median 0.970, p = 0.188"),
            U: Case(onehot + short, None, f"{first}; {at} binary: 4/4 seeds < 1, median 0.965, p = 0.062",
                    f"seeds {at} onehot 5, {at} binary 4 (>= 5 each)")}


@scenarios(*(f"embedding.d{d}k{k}.none_never_matches" for d, k in CELLS),
           "embedding_n512.d4k16.none_never_matches")
def _none(claim_id):
    d, k, table, at = _pair(claim_id)
    none = emb(table, d, k, "none", relative_objective=1.2)
    onehot = emb(table, d, k, "onehot", relative_objective=0.9)
    slow = emb(table, d, k, "onehot", relative_objective=1.1)
    above = curve(5.0, 2.0, 1.5, 1.2)
    dips = curve(5.0, 2.0, 0.98, 1.2)  # touched one-step Lloyd once
    good = f"{at} none: 5/5 seeds improve on step 0 and never reach 1 (median best 1.200), p = 0.031"
    return {R: Case(none + onehot, hist(none, above), good),
            N: Case(none + onehot, hist(none, above, above, above, dips, dips),
                    f"{at} none: 3/5 seeds improve on step 0 and never reach 1 (median best 1.200), p = 0.500"),
            U: Case(none + slow, hist(none, above), good, f"{at} onehot median relative objective 1.100 (< 1 needed)")}


@scenarios(*(f"embedding.d{d}k{k}.twenty_step_order" for d, k in CELLS),
           "embedding_n512.d4k16.twenty_step_order")
def _order(claim_id):
    d, k, table, at = _pair(claim_id)
    onehot = emb(table, d, k, "onehot", model_log_objective=3.8, lloyd_log_objective=4.0)
    binary = emb(table, d, k, "binary", model_log_objective=3.9, lloyd_log_objective=4.0)
    none = emb(table, d, k, "none", model_log_objective=4.3, lloyd_log_objective=4.0)
    none_good = emb(table, d, k, "none", model_log_objective=3.95, lloyd_log_objective=4.0)
    onehot_nan = emb(table, d, k, "onehot", model_log_objective=3.8, lloyd_log_objective=[4.0] * 4 + ["nan"])
    head = (f"{at} onehot: 5/5 seeds < 0, median -0.200, p = 0.031; {at} binary: 5/5 seeds < 0, median -0.100, "
            "p = 0.031")
    return {R: Case(onehot + binary + none, None, f"{head}; {at} none: 5/5 seeds > 0, median +0.300, p = 0.031"),
            N: Case(onehot + binary + none_good, None,
                    f"{head}; {at} none: 0/5 seeds > 0, median -0.050, p = 1.000"),
            U: Case(onehot_nan + binary + none, None,
                    f"{at} onehot: 4/5 seeds < 0, median -0.200, p = 0.188; {at} binary: 5/5 seeds < 0, median "
                    f"-0.100, p = 0.031; {at} none: 5/5 seeds > 0, median +0.300, p = 0.031",
                    "Lloyd's 20-step log objective finite in 14/15 scored rows")}


def _areas(table, d, k, embedding, areas, relative=0.9, seeds=SEEDS):
    """Rows whose training curves have mean relative objective ``areas`` after step 0 (curve: 5, a, a)."""
    rows = emb(table, d, k, embedding, seeds=seeds, relative_objective=relative)
    return rows, hist(rows, *(curve(5.0, a, a) for a in areas))


def _join(*parts):
    rows, histories = [], {}
    for part_rows, part_histories in parts:
        rows += part_rows
        histories.update(part_histories)
    return rows, histories


@scenarios("embedding.onehot_faster_at_small_d")
def _faster(claim_id):
    fast, slow = spread(1.00), spread(1.10)
    base = [_areas("embedding_d4_k6", 4, 6, "onehot", fast), _areas("embedding_d4_k6", 4, 6, "binary", slow)]
    good = _join(*base, _areas("embedding_d4_k16", 4, 16, "onehot", fast),
                 _areas("embedding_d4_k16", 4, 16, "binary", slow))
    bad = _join(*base, _areas("embedding_d4_k16", 4, 16, "onehot", fast),
                _areas("embedding_d4_k16", 4, 16, "binary", spread(0.90)))
    unconverged = _join(*base, _areas("embedding_d4_k16", 4, 16, "onehot", fast, relative=1.05),
                        _areas("embedding_d4_k16", 4, 16, "binary", slow))
    first = "d=4,k=6 onehot median 1.020 vs binary median 1.120, one-sided p = 0.004"
    second = "d=4,k=16 onehot median 1.020 vs binary median 1.120, one-sided p = 0.004"
    return {R: Case(*good, f"{first}; {second}"),
            N: Case(*bad, f"{first}; d=4,k=16 onehot median 1.020 vs binary median 0.920, one-sided p = 1.000"),
            U: Case(*unconverged, f"{first}; {second}",
                    "d=4,k=16 onehot median relative objective 1.050 (< 1 needed)")}


@scenarios("embedding.no_gap_at_d32")
def _no_gap(claim_id):
    t = "embedding_d32_k6"
    onehot = _areas(t, 32, 6, "onehot", [1.00, 1.02, 1.04, 1.06, 1.08])
    # interleaved with one-hot: U = 10 of 25, two-sided p = 2 * 87/252 = 0.690
    close = _areas(t, 32, 6, "binary", [1.01, 1.03, 1.05, 1.07, 1.09])
    far = _areas(t, 32, 6, "binary", [1.11, 1.13, 1.15, 1.17, 1.19])  # separated: p = 2/252
    unconverged = _areas(t, 32, 6, "binary", [1.01, 1.03, 1.05, 1.07, 1.09], relative=1.02)
    equal = "d=32,k=6 onehot median 1.040 vs binary median 1.050 (binary +1.0%), two-sided p = 0.690"
    return {R: Case(*_join(onehot, close), equal),
            N: Case(*_join(onehot, far),
                    "d=32,k=6 onehot median 1.040 vs binary median 1.150 (binary +10.6%), two-sided p = 0.008"),
            U: Case(*_join(onehot, unconverged), equal, "d=32,k=6 binary median relative objective 1.020 (< 1 needed)")}


@scenarios("embedding.binary_deficit_grows_with_k")
def _deficit(claim_id):
    k6 = [_areas("embedding_d4_k6", 4, 6, "onehot", [1.0] * 5),
          _areas("embedding_d4_k6", 4, 6, "binary", spread(1.01))]  # deficits +1% .. +5%
    onehot16 = _areas("embedding_d4_k16", 4, 16, "onehot", [1.0] * 5)
    grows = _join(*k6, onehot16, _areas("embedding_d4_k16", 4, 16, "binary", spread(1.20)))  # +20% .. +24%
    shrinks = _join(*k6, onehot16, _areas("embedding_d4_k16", 4, 16, "binary", spread(0.95)))  # -5% .. -1%
    # one binary seed at k = 6 has no one-hot partner: its deficit is +inf and the pairing control fails
    unpaired = _join(k6[0], _areas("embedding_d4_k6", 4, 6, "binary", spread(1.01)[:4] + [1.05],
                                   seeds=SEEDS[:4] + (99,)), onehot16,
                     _areas("embedding_d4_k16", 4, 16, "binary", spread(1.20)))
    return {R: Case(*grows, "d=4 binary deficit at k=16 median +22.0% vs at k=6 median +3.0%, one-sided p = 0.004"),
            N: Case(*shrinks, "d=4 binary deficit at k=16 median -3.0% vs at k=6 median +3.0%, one-sided p = 1.000"),
            # k = 16 above four of the five k = 6 deficits: U = 20, P(U >= 20) = 19/252
            U: Case(*unpaired, "d=4 binary deficit at k=16 median +22.0% vs at k=6 median +3.0%, one-sided p = 0.075",
                    "d=4,k=6 onehot and binary share their seeds: no; 5/5 one-hot seeds ended cleanly")}


# ----- study b: tau x loss ------------------------------------------------------------------------------------------
TAUS = (1.0, 0.25, 0.14, 0.1)


def tau(loss, t, **kwargs):
    return cell("tau_loss", {"loss": loss, "tau": t}, config={"d": 4, "k": 6}, **kwargs)


@scenarios("tau_loss.l2_tighter_than_ne")
def _tighter(claim_id):
    def grid(l2_at_1=0.10, ne_seeds=SEEDS):
        rows = []
        for t in TAUS:
            rows += tau("softmin", t, seeds=ne_seeds if t == 0.14 else SEEDS, loss_gap_mean=spread(0.50))
            rows += tau("sparsemax", t, loss_gap_mean=spread(l2_at_1 if t == 1.0 else 0.10))
        return rows

    part = "L2 tau={} median 0.12 vs NE median 0.52, one-sided p = 0.004"
    good = "; ".join(part.format(t) for t in ("1", "0.25", "0.14", "0.1"))
    return {R: Case(grid(), None, good),
            N: Case(grid(l2_at_1=0.60), None, "L2 tau=1 median 0.62 vs NE median 0.52, one-sided p = 1.000; "
                    + "; ".join(part.format(t) for t in ("0.25", "0.14", "0.1"))),
            # 5 against 3 seeds, separated: p = 1 / C(8, 3) = 1/56
            U: Case(grid(ne_seeds=SEEDS[:3]), None, "; ".join(
                [part.format("1"), part.format("0.25"), "L2 tau=0.14 median 0.12 vs NE median 0.51, one-sided "
                 "p = 0.018", part.format("0.1")]), "NE tau=0.14 3, NE tau=0.1 5")}


@scenarios("tau_loss.tau01_both_beat_one_step_lloyd")
def _tau_beat(claim_id):
    ne = tau("softmin", 0.1, relative_objective=spread(0.90))
    l2 = tau("sparsemax", 0.1, relative_objective=spread(0.95))
    l2_miss = tau("sparsemax", 0.1, relative_objective=[0.95, 0.96, 1.05, 1.06, 1.07])
    first = "NE tau=0.1: 5/5 seeds < 1, median 0.920, p = 0.031"
    return {R: Case(ne + l2, None, f"{first}; L2 tau=0.1: 5/5 seeds < 1, median 0.970, p = 0.031"),
            N: Case(ne + l2_miss, None, f"{first}; L2 tau=0.1: 2/5 seeds < 1, median 1.050, p = 0.812"),
            U: Case(ne, None, f"{first}; L2 tau=0.1: 0/0 seeds < 1, median nan, p = 1.000",
                    "seeds NE tau=0.1 5, L2 tau=0.1 0 (>= 5 each)")}


@scenarios("tau_loss.tau1_ne_misses_lloyd")
def _ne_misses(claim_id):
    converged = tau("softmin", 0.1, relative_objective=spread(0.90))
    return {R: Case(tau("softmin", 1.0, relative_objective=spread(1.50)) + converged, None,
                    "NE tau=1: 5/5 seeds > 1, median 1.520, p = 0.031"),
            N: Case(tau("softmin", 1.0, relative_objective=[0.95, 0.96, 1.5, 1.51, 1.52]) + converged, None,
                    "NE tau=1: 3/5 seeds > 1, median 1.500, p = 0.500"),
            U: Case(tau("softmin", 1.0, relative_objective=spread(1.50))
                    + tau("softmin", 0.1, relative_objective=spread(1.10)), None,
                    "NE tau=1: 5/5 seeds > 1, median 1.520, p = 0.031",
                    "NE tau=0.1 median relative objective 1.120 (< 1 needed)")}


@scenarios("tau_loss.tau1_l2_improves_but_misses_lloyd")
def _l2_misses(claim_id):
    high = tau("sparsemax", 1.0, relative_objective=1.3)
    beats = tau("sparsemax", 1.0, relative_objective=[1.3, 1.3, 1.3, 0.95, 0.95])
    improves = curve(3.0, 2.0, 1.3)
    good = "L2 tau=1: 5/5 seeds improve on step 0 but stay above 1 (median final 1.300), p = 0.031"
    return {R: Case(high + tau("sparsemax", 0.1, relative_objective=0.9), hist(high, improves), good),
            N: Case(beats + tau("sparsemax", 0.1, relative_objective=0.9), hist(beats, improves),
                    "L2 tau=1: 3/5 seeds improve on step 0 but stay above 1 (median final 1.300), p = 0.500"),
            U: Case(high + tau("sparsemax", 0.1, relative_objective=spread(1.03)), hist(high, improves), good,
                    "L2 tau=0.1 median relative objective 1.050 (< 1 needed)")}


@scenarios("tau_loss.higher_tau_worse")
def _worse(claim_id):
    ne = tau("softmin", 1.0, relative_objective=spread(1.50)) + tau("softmin", 0.1, relative_objective=spread(0.90))
    good = ne + tau("sparsemax", 1.0, relative_objective=spread(1.20)) + tau("sparsemax", 0.1,
                                                                               relative_objective=spread(0.90))
    bad = ne + tau("sparsemax", 1.0, relative_objective=spread(0.80)) + tau("sparsemax", 0.1,
                                                                              relative_objective=spread(0.90))
    slow = ne + tau("sparsemax", 1.0, relative_objective=spread(1.20)) + tau("sparsemax", 0.1,
                                                                               relative_objective=spread(1.05))
    first = "NE tau=1 median 1.520 vs tau=0.1 median 0.920, one-sided p = 0.004"
    return {R: Case(good, None, f"{first}; L2 tau=1 median 1.220 vs tau=0.1 median 0.920, one-sided p = 0.004"),
            N: Case(bad, None, f"{first}; L2 tau=1 median 0.820 vs tau=0.1 median 0.920, one-sided p = 1.000"),
            U: Case(slow, None, f"{first}; L2 tau=1 median 1.220 vs tau=0.1 median 1.070, one-sided p = 0.004",
                    "L2 tau=0.1 median relative objective 1.070 (< 1 needed)")}


@scenarios("tau_loss.higher_tau_faster")
def _faster_tau(claim_id):
    early = curve(3.0, 1.2, 1.2, 1.2, 1.2, 1.2)  # settles at step 50
    at_200 = curve(3.0, 2.0, 1.5, 1.0, 0.9, 0.9)  # 1.0 is 11% above 0.9: settles at step 200 of 250
    at_250 = curve(3.0, 2.5, 2.0, 1.6, 1.3, 1.2)  # 1.3 is 8% above 1.2: settles only at the last step
    late = curve(3.0, 2.0, 1.5, 1.2, 1.0, 0.9)  # 1.0 is 11% above 0.9: settles at the last step, 250 of 250

    def grid(ne_1, ne_01, l2_1, l2_01):
        rows, histories = [], {}
        for loss, t, history in (("softmin", 1.0, ne_1), ("softmin", 0.1, ne_01), ("sparsemax", 1.0, l2_1),
                                 ("sparsemax", 0.1, l2_01)):
            part = tau(loss, t)
            rows += part
            histories.update(hist(part, history))
        return rows, histories

    ne_part = "NE tau=1 median 50 vs tau=0.1 median 200, one-sided p = 0.004"
    return {R: Case(*grid(early, at_200, early, at_200),
                    f"{ne_part}; L2 tau=1 median 50 vs tau=0.1 median 200, one-sided p = 0.004"),
            N: Case(*grid(early, at_200, at_250, at_200),
                    f"{ne_part}; L2 tau=1 median 250 vs tau=0.1 median 200, one-sided p = 1.000"),
            U: Case(*grid(early, late, early, at_200),
                    "NE tau=1 median 50 vs tau=0.1 median 250, one-sided p = 0.004; L2 tau=1 median 50 vs tau=0.1 "
                    "median 200, one-sided p = 0.004", "NE tau=0.1 median settling step 250 of 250 (<= 80% needed)")}


# ----- study c: d and k ---------------------------------------------------------------------------------------------
@scenarios("d.beats_one_step_lloyd_at_every_d", "k.beats_one_step_lloyd_at_every_k")
def _grid(claim_id):
    field = claim_id.split(".")[0]
    values = (4, 8, 16, 32) if field == "d" else (6, 10, 16, 25)

    def rows(last, seeds=SEEDS):
        out = []
        for value in values:
            out += cell(field, {field: value}, seeds=seeds if value == values[-1] else SEEDS,
                        relative_objective=last if value == values[-1] else spread(0.90))
        return out

    head = "; ".join(f"{field}={v}: 5/5 seeds < 1, median 0.920, p = 0.031" for v in values[:-1])
    last = f"{field}={values[-1]}"
    return {R: Case(rows(spread(0.90)), None, f"{head}; {last}: 5/5 seeds < 1, median 0.920, p = 0.031"),
            N: Case(rows([0.9, 0.91, 0.92, 0.93, 1.01]), None,
                    f"{head}; {last}: 4/5 seeds < 1, median 0.920, p = 0.188"),
            U: Case(rows(spread(0.90)[:4], SEEDS[:4]), None,
                    f"{head}; {last}: 4/4 seeds < 1, median 0.915, p = 0.062", f"{last} 4 (>= 5 each)")}


# ----- study d: training family and transfer ------------------------------------------------------------------------
def fam(family, model=3.8, lloyd=4.0, transfer=None, **kwargs):
    """Rows trained on ``family``: the 20-step model/Lloyd objectives on their own family and on every test family
    (``transfer``: test family -> model objective, Lloyd 4.0; default 3.8 everywhere)."""
    scores = {test: {"model": 3.8, "lloyd": 4.0} for test in FAMILIES}
    for test, value in (transfer or {}).items():
        scores[test] = {"model": value, "lloyd": 4.0} if not isinstance(value, dict) else value
    return cell("family", {"family": family}, config={"d": 32, "k": 10}, model_log_objective=model,
                lloyd_log_objective=lloyd, transfer=scores, **kwargs)


@scenarios("family.cauchy_fails")
def _cauchy_fails(claim_id):
    cauchy = fam("cauchy", model=5.0)
    return {R: Case(cauchy + fam("normal"), None, "cauchy: 5/5 seeds > 0, median +1.000, p = 0.031"),
            N: Case(fam("cauchy", model=[3.9, 3.9, 5.0, 5.0, 5.0]) + fam("normal"), None,
                    "cauchy: 3/5 seeds > 0, median +1.000, p = 0.500"),
            U: Case(cauchy + fam("normal", model=4.1), None, "cauchy: 5/5 seeds > 0, median +1.000, p = 0.031",
                    "normal median 20-step gap +0.100 (< 0 needed)")}


@scenarios("family.others_beat_lloyd")
def _others(claim_id):
    def rows(laplace_status=None, gumbel_lloyd=4.0):
        return (fam("normal") + fam("gumbel", lloyd=gumbel_lloyd) + fam("laplace", status=laplace_status)
                + fam("lognormal"))

    part = "{}: 5/5 seeds < 0, median -0.200, p = 0.031"
    return {R: Case(rows(), None, "; ".join(part.format(f) for f in NON_CAUCHY)),
            N: Case(rows(laplace_status=["ok"] * 4 + ["diverged"]), None, "; ".join(
                [part.format("normal"), part.format("gumbel"), "laplace: 4/5 seeds < 0, median -0.200, p = 0.188",
                 part.format("lognormal")])),
            U: Case(rows(gumbel_lloyd=[4.0] * 4 + ["nan"]), None, "; ".join(
                [part.format("normal"), "gumbel: 4/5 seeds < 0, median -0.200, p = 0.188",
                 part.format("laplace"), part.format("lognormal")]),
                "Lloyd's 20-step log objective finite in 19/20 scored rows")}


@scenarios("family.transfer_among_non_cauchy")
def _transfer(claim_id):
    good = "{}->{}: 5/5 seeds < 0, median -0.200, p = 0.031"
    pairs = [(a, b) for a in NON_CAUCHY for b in NON_CAUCHY]
    broken = fam("normal", transfer={"gumbel": 3.8})
    broken[4]["transfer"] = json.dumps({k: v for k, v in json.loads(broken[4]["transfer"]).items() if k != "gumbel"})
    rest = fam("gumbel") + fam("laplace") + fam("lognormal")
    return {R: Case(fam("normal") + rest, None, "; ".join(good.format(a, b) for a, b in pairs)),
            N: Case(fam("normal") + fam("gumbel") + fam("laplace") + fam("lognormal", transfer={"laplace": 4.1}), None,
                    "; ".join("lognormal->laplace: 0/5 seeds < 0, median +0.100, p = 1.000"
                              if (a, b) == ("lognormal", "laplace") else good.format(a, b) for a, b in pairs)),
            U: Case(broken + rest, None,
                    "; ".join("normal->gumbel: 4/5 seeds < 0, median -0.200, p = 0.188"
                              if (a, b) == ("normal", "gumbel") else good.format(a, b) for a, b in pairs),
                    "all 5 test families scored with finite Lloyd objectives in 19/20 scored rows")}


@scenarios("family.cauchy_trained_fail_everywhere")
def _cauchy_everywhere(claim_id):
    worse = {test: 5.0 for test in FAMILIES}
    bad = "cauchy->{}: 5/5 seeds > 0, median +1.000, p = 0.031"
    return {R: Case(fam("cauchy", model=5.0, transfer=worse) + fam("normal"), None,
                    "; ".join(bad.format(t) for t in FAMILIES)),
            N: Case(fam("cauchy", model=5.0, transfer={**worse, "lognormal": 3.9}) + fam("normal"), None,
                    "; ".join(bad.format(t) for t in FAMILIES[:-1])
                    + "; cauchy->lognormal: 0/5 seeds > 0, median -0.100, p = 1.000"),
            U: Case(fam("cauchy", model=5.0, transfer=worse) + fam("normal", model=4.1), None,
                    "; ".join(bad.format(t) for t in FAMILIES), "normal median 20-step gap +0.100 (< 0 needed)")}


@scenarios("family.others_on_cauchy_not_competitive")
def _on_cauchy(claim_id):
    def rows(gumbel_status=None, laplace_model=3.8):
        out = []
        for family in NON_CAUCHY:
            out += fam(family, transfer={"cauchy": 4.5}, status=gumbel_status if family == "gumbel" else None,
                       model=laplace_model if family == "laplace" else 3.8)
        return out

    part = "{}->cauchy: 5/5 seeds finite and worse than Lloyd (median +0.500), p = 0.031"
    return {R: Case(rows(), None, "; ".join(part.format(f) for f in NON_CAUCHY)),
            # a diverged gumbel seed is not "finite": 4 of 5
            N: Case(rows(gumbel_status=["ok"] * 4 + ["diverged"]), None, "; ".join(
                "gumbel->cauchy: 4/5 seeds finite and worse than Lloyd (median +0.500), p = 0.188"
                if f == "gumbel" else part.format(f) for f in NON_CAUCHY)),
            U: Case(rows(laplace_model=4.1), None, "; ".join(part.format(f) for f in NON_CAUCHY),
                    "laplace median 20-step gap +0.100 (< 0 needed)")}


@scenarios("family.loss_gap_normal_small_cauchy_large")
def _loss_gap(claim_id):
    normal = fam("normal", loss_gap_max=spread(0.05))
    cauchy = fam("cauchy", loss_gap_max=[2.0, 2.5, 3.0, 3.5, 4.0])
    good = "normal: 5/5 seeds <= 0.125, median 0.07, p = 0.031; cauchy: 5/5 seeds > 1.25, median 3.00, p = 0.031"
    return {R: Case(normal + cauchy, None, good),
            N: Case(fam("normal", loss_gap_max=[0.05, 0.06, 0.2, 0.3, 0.4]) + cauchy, None,
                    "normal: 2/5 seeds <= 0.125, median 0.20, p = 0.812; cauchy: 5/5 seeds > 1.25, median 3.00, "
                    "p = 0.031"),
            U: Case(normal + cauchy[:4], None, "normal: 5/5 seeds <= 0.125, median 0.07, p = 0.031; cauchy: 4/4 "
                    "seeds > 1.25, median 2.75, p = 0.062", "seeds normal 5, cauchy 4 (>= 5 each)")}


def test_loss_gap_thresholds_scale_with_n():
    """At the papers' n = 512 the thresholds are the paper's own, 0.5 and 5."""
    rows = (cell("family", {"family": "normal"}, config={"n": 512}, loss_gap_max=spread(0.30))
            + cell("family", {"family": "cauchy"}, config={"n": 512}, loss_gap_max=spread(6.0)))
    verdict = C.decide(CLAIM["family.loss_gap_normal_small_cauchy_large"], rows)
    assert verdict.outcome == R
    assert verdict.figure == ("normal: 5/5 seeds <= 0.5, median 0.32, p = 0.031; cauchy: 5/5 seeds > 5, median 6.02, "
                              "p = 0.031")


# ----- study e: stability -------------------------------------------------------------------------------------------
STABLE = curve(5.0, 2.0, 1.5, 1.0, 0.95)
SPIKY = curve(5.0, 2.0, 1.0, 1.5, 0.95)  # 1.5 is 50% above the best so far (1.0)


def stab(embedding, unstable=(), diverged=(), seeds=TEN_SEEDS, config=None):
    """10 seeds of one embedding; seeds at the indices ``unstable`` spike, those at ``diverged`` diverged."""
    status = ["diverged" if i in diverged else "ok" for i in range(len(seeds))]
    rows = cell("stability_d32_k25", {"embedding": embedding}, seeds=seeds, status=status,
                config={"d": 32, "k": 25, **(config or {})})
    return rows, hist(rows, *(SPIKY if i in unstable else STABLE for i in range(len(seeds))))


@scenarios("stability.binary_stable", "stability_n512.binary_stable")
def _binary_stable(claim_id):
    clipped = {"grad_clip": 1.0}
    # a finite jump of the validation objective is not numerical instability: the spiky binary seed counts as stable
    return {R: Case(*_join(stab("onehot", diverged=(0, 1, 2)), stab("binary", unstable=(4,))),
                    "binary: 0/10 seeds numerically unstable (0 needed)"),
            N: Case(*_join(stab("onehot"), stab("binary", diverged=(4,))),
                    "binary: 1/10 seeds numerically unstable (0 needed)"),
            U: Case(*_join(stab("onehot", config=clipped), stab("binary", config=clipped)),
                    "binary: 0/10 seeds numerically unstable (0 needed)",
                    "no gradient clipping and >= 10000 configured steps in 0/20 rows")}


@scenarios("stability.onehot_unstable_in_some_seeds", "stability_n512.onehot_unstable_in_some_seeds")
def _onehot_unstable(claim_id):
    return {R: Case(*_join(stab("onehot", diverged=(0, 1, 2)), stab("binary")),
                    "onehot: 3/10 seeds numerically unstable (>= 1 needed)"),
            N: Case(*_join(stab("onehot", unstable=(1, 2)), stab("binary")),
                    "onehot: 0/10 seeds numerically unstable (>= 1 needed)"),
            U: Case(*_join(stab("onehot", diverged=(1,), seeds=TEN_SEEDS[:9]), stab("binary")),
                    "onehot: 1/9 seeds numerically unstable (>= 1 needed)", "seeds onehot 9, binary 10 (>= 10 each)")}


def test_an_unscorable_seed_is_numerically_unstable():
    rows, histories = _join(stab("onehot"), stab("binary"))
    rows[5]["status"] = "unscorable"
    verdict = C.decide(CLAIM["stability.onehot_unstable_in_some_seeds"], rows, histories)
    assert (verdict.outcome, verdict.figure) == (R, "onehot: 1/10 seeds numerically unstable (>= 1 needed)")


def test_stability_needs_the_papers_step_budget():
    rows, histories = _join(stab("onehot", diverged=(1,), config={"steps": 3000}),
                            stab("binary", config={"steps": 3000}))
    verdict = C.decide(CLAIM["stability.onehot_unstable_in_some_seeds"], rows, histories)
    assert verdict.outcome == U
    assert "no gradient clipping and >= 10000 configured steps in 0/20 rows" in verdict.control_figure


# ----- lr and n -----------------------------------------------------------------------------------------------------
def lr(value, **kwargs):
    return cell("lr", {"lr": value}, config={"d": 32, "k": 6}, **kwargs)


@scenarios("lr.lr001_best")
def _lr_best(claim_id):
    def rows(at_01=1.50, last_seeds=SEEDS):
        return (lr(0.001, relative_objective=spread(1.10)) + lr(0.01, relative_objective=spread(0.90))
                + lr(0.1, relative_objective=spread(at_01)) + lr(1.0, seeds=last_seeds, relative_objective=spread(3.0)))

    first = "lr=0.01 median 0.920 vs lr=0.001 median 1.120, one-sided p = 0.004"
    last = "lr=0.01 median 0.920 vs lr=1 median 3.020, one-sided p = 0.004"
    return {R: Case(rows(), None, f"{first}; lr=0.01 median 0.920 vs lr=0.1 median 1.520, one-sided p = 0.004; {last}"),
            N: Case(rows(at_01=0.80), None,
                    f"{first}; lr=0.01 median 0.920 vs lr=0.1 median 0.820, one-sided p = 1.000; {last}"),
            # 5 against 3 seeds, separated: p = 1/56
            U: Case(rows(last_seeds=SEEDS[:3]), None, f"{first}; lr=0.01 median 0.920 vs lr=0.1 median 1.520, "
                    "one-sided p = 0.004; lr=0.01 median 0.920 vs lr=1 median 3.010, one-sided p = 0.018",
                    "lr=1 3 (>= 5 each)")}


@scenarios("lr.high_lr_unstable")
def _lr_unstable(claim_id):
    def rows(base_spikes=0, high_diverged=4):
        status = ["diverged"] * high_diverged + ["ok"] * (5 - high_diverged)
        parts = [lr(0.001), lr(0.01), lr(0.1), lr(1.0, status=status)]
        histories = {}
        histories.update(hist(parts[0], STABLE))
        histories.update(hist(parts[1], *([SPIKY] * base_spikes + [STABLE] * (5 - base_spikes))))
        histories.update(hist(parts[2], SPIKY))
        histories.update(hist(parts[3], STABLE))
        return [row for part in parts for row in part], histories

    # Fisher, 5 of 10 seeds drawn: 5/5 vs 0/5: 1/252; 4/5 vs 0/5: 6/252; 3/5 vs 0/5: 21/252;
    # 5/5 vs 1/5: 6/252; 4/5 vs 1/5: (25 + 1)/252
    return {R: Case(*rows(), "lr=0.1: 5/5 seeds unstable vs 0/5 at lr=0.01, one-sided p = 0.004; lr=1: 4/5 seeds "
                    "unstable vs 0/5 at lr=0.01, one-sided p = 0.024"),
            N: Case(*rows(high_diverged=3), "lr=0.1: 5/5 seeds unstable vs 0/5 at lr=0.01, one-sided p = 0.004; lr=1: "
                    "3/5 seeds unstable vs 0/5 at lr=0.01, one-sided p = 0.083"),
            U: Case(*rows(base_spikes=1), "lr=0.1: 5/5 seeds unstable vs 1/5 at lr=0.01, one-sided p = 0.024; lr=1: "
                    "4/5 seeds unstable vs 1/5 at lr=0.01, one-sided p = 0.103",
                    "lr=0.01: 1/5 seeds unstable (0 needed)")}


@scenarios("n.no_effect")
def _n(claim_id):
    def rows(cells):
        return [row for n, vs in cells.items()
                for row in cell("n", {"n": n}, config={"d": 4, "k": 6}, relative_objective=vs)]

    tight = {n: [round(0.900 + 0.001 * i + offset, 6) for i in range(5)]
             for n, offset in ((128, 0.0), (256, 0.0002), (512, 0.0004), (1024, 0.0006))}
    low = [0.90, 0.92, 0.94, 0.96, 0.98]
    wide = {128: low, 256: [v + 0.01 for v in low], 512: [v + 0.001 for v in low], 1024: [v + 0.011 for v in low]}
    level = "0.008333"
    # tight: every cell spans 0.004 < 0.025, so b + 0.025 lies wholly above a and b - 0.025 wholly below: each
    # one-sided test at 1/252 = 0.004. 1024 moved to 0.950..0.954: 0.9 lies wholly below it - 0.025, two-sided
    # 2/252 = 0.008 <= 0.05/6. wide (every cell spans 0.08 > 0.025): counted over the C(10, 5) splits of the
    # midranks (itertools, outside this code), n=128 vs n=256 gives 7/252 for a below b + 0.025 and 87/252 for a
    # above b - 0.025, so TOST p = 87/252 = 0.345; no pair lies beyond the margin either way: p = 1
    return {R: Case(rows(tight), None, "medians n=128 0.902, n=256 0.902, n=512 0.902, n=1024 0.903; largest "
                    "equivalence (TOST, +-0.025) p = 0.004 (n=128 vs n=256; <= 0.05 needed)"),
            N: Case(rows({**tight, 1024: spread(0.95, 0.001)}), None, "medians n=128 0.902, n=256 0.902, n=512 0.902, "
                    "n=1024 0.952; largest equivalence (TOST, +-0.025) p = 1.000 (n=128 vs n=1024; <= 0.05 needed)"),
            U: Case(rows(wide), None, "medians n=128 0.940, n=256 0.950, n=512 0.941, n=1024 0.951; largest "
                    "equivalence (TOST, +-0.025) p = 0.345 (n=128 vs n=256; <= 0.05 needed)",
                    "equivalence not shown; smallest p of a difference beyond +-0.025 = 1.000 (n=128 vs n=256; <= "
                    f"{level} decides against)")}


def test_no_effect_needs_a_model_that_learned():
    rows = [row for n in (128, 256, 512, 1024) for row in
            cell("n", {"n": n}, config={"d": 4, "k": 6}, relative_objective=spread(1.10, 0.001))]
    verdict = C.decide(CLAIM["n.no_effect"], rows)
    assert verdict.outcome == U and "n=512 median relative objective 1.102 (< 1 needed)" in verdict.control_figure


@scenarios("n_d4k16.no_effect")
def _n_at_pair(claim_id):
    def rows(at_128, at_512):
        return [row for n, table, vs in ((128, "embedding_d4_k16", at_128), (512, "embedding_d4_k16_n512", at_512))
                for row in cell(table, {"embedding": "onehot"}, config={"d": 4, "k": 16, "n": n},
                                relative_objective=vs)]

    low = [1.03, 1.05, 1.07, 1.09, 1.11]
    # the same counts as n.no_effect's cases; one pair, so the level against is 0.05
    return {R: Case(rows(spread(1.030, 0.001), spread(1.0304, 0.001)), None, "medians d=4,k=16 onehot n=128 1.032, "
                    "d=4,k=16 onehot n=512 1.032; largest equivalence (TOST, +-0.025) p = 0.004 (d=4,k=16 onehot "
                    "n=128 vs d=4,k=16 onehot n=512; <= 0.05 needed)"),
            N: Case(rows(spread(1.030, 0.001), spread(0.970, 0.001)), None, "medians d=4,k=16 onehot n=128 1.032, "
                    "d=4,k=16 onehot n=512 0.972; largest equivalence (TOST, +-0.025) p = 1.000 (d=4,k=16 onehot "
                    "n=128 vs d=4,k=16 onehot n=512; <= 0.05 needed)"),
            U: Case(rows(low, [v + 0.01 for v in low]), None, "medians d=4,k=16 onehot n=128 1.070, d=4,k=16 onehot "
                    "n=512 1.080; largest equivalence (TOST, +-0.025) p = 0.345 (d=4,k=16 onehot n=128 vs d=4,k=16 "
                    "onehot n=512; <= 0.05 needed)", "equivalence not shown; smallest p of a difference beyond "
                    "+-0.025 = 1.000")}


# ----- multistep: per-step curves of one checkpoint per seed --------------------------------------------------------
def steps_curve(start, first, last, t=20):
    """A per-step curve (JSON) over steps 0..t: ``start`` at step 0, ``first`` at step 1, ``last`` from step 2 on."""
    return json.dumps([start, first] + [last] * (t - 1))


def ms(embedding, model=5.0, stacked=30.0, lloyd=5.25, t=20, **kwargs):
    """Seed rows of one embedding (d = 32, k = 10, n = 512): every curve starts at 6.35; the re-embedded and the
    stacked model are at 5.4 after step 1 (the same layer once), Lloyd at 5.59; after step t at ``model``,
    ``stacked``, ``lloyd`` (one value or one per seed)."""
    def per_seed(value, first):
        return [steps_curve(6.35, first, v, t) for v in value] if isinstance(value, list) else \
            steps_curve(6.35, first, value, t)
    return cell("multistep", {"embedding": embedding}, config={"n": 512, **kwargs.pop("config", {})},
                model_curve=per_seed(model, 5.4),
                stacked_curve=per_seed(stacked, 5.4), lloyd_curve=per_seed(lloyd, 5.59), **kwargs)


@scenarios("multistep.stacking_diverges")
def _stacking(claim_id):
    # rises stacked[T] - stacked[1]: 30.0 - 5.4 = 24.6 (one-hot), 28.0 - 5.4 = 22.6 (binary), 22.0 - 5.4 = 16.6 (none)
    good = ms("onehot") + ms("binary", stacked=28.0) + ms("none", stacked=22.0)
    head = ("onehot: 5/5 seeds with stacked[T] > stacked[1] (median rise +24.600), p = 0.031; binary: 5/5 seeds with "
            "stacked[T] > stacked[1] (median rise +22.600), p = 0.031")
    # two none seeds end at 5.0 < 5.4 (a fall of 0.4): 3 of 5 rise, p = P(X >= 3) = 16/32; median of the rises
    # (16.6, 16.6, 16.6, -0.4, -0.4) is 16.6
    bad = ms("onehot") + ms("binary", stacked=28.0) + ms("none", stacked=[22.0, 22.0, 22.0, 5.0, 5.0])
    # curves over steps 0..10 only: the rule reads their last step, the control wants T = 20
    short = ms("onehot", t=10) + ms("binary", stacked=28.0, t=10) + ms("none", stacked=22.0, t=10)
    none = "none: 5/5 seeds with stacked[T] > stacked[1] (median rise +16.600), p = 0.031"
    return {R: Case(good, None, f"{head}; {none}"),
            N: Case(bad, None, f"{head}; none: 3/5 seeds with stacked[T] > stacked[1] (median rise +16.600), "
                    "p = 0.500"),
            U: Case(short, None, f"{head}; {none}", "T = 20 steps in 0/15 scored rows")}


@scenarios("multistep.reembedded_onehot_binary_beat_lloyd")
def _multistep_beat(claim_id):
    # step-T gaps: 5.0 - 5.25 = -0.25 (one-hot), 5.05 - 5.25 = -0.20 (binary)
    good = "onehot: 5/5 seeds < 0, median -0.250, p = 0.031; binary: 5/5 seeds < 0, median -0.200, p = 0.031"
    # a binary seed saved before its 10,000 steps counts as +inf: 4 of 5, p = 6/32; median of (-0.2 x 4, inf) -0.2
    unfinished = ms("binary", model=5.05, status=["ok"] * 4 + ["unfinished"])
    return {R: Case(ms("onehot") + ms("binary", model=5.05), None, good),
            N: Case(ms("onehot") + unfinished, None, "onehot: 5/5 seeds < 0, median -0.250, p = 0.031; binary: 4/5 "
                    "seeds < 0, median -0.200, p = 0.188"),
            U: Case(ms("onehot", config={"steps": 3000}) + ms("binary", model=5.05, config={"steps": 3000}), None,
                    good, ">= 10000 configured training steps in 0/10 rows")}


@scenarios("multistep.reembedded_none_improves_but_misses_lloyd")
def _none_misses(claim_id):
    # none: 5.34 < its start 6.35 and 5.34 - 5.25 = +0.09 above Lloyd
    good = "none: 5/5 seeds with model[T] < model[0] and model[T] > Lloyd[T] (median step-T gap +0.090), p = 0.031"
    # three none seeds end at 5.2, below Lloyd: 2 of 5, p = 26/32; median of (0.09, 0.09, -0.05 x 3) is -0.05
    return {R: Case(ms("none", model=5.34) + ms("onehot"), None, good),
            N: Case(ms("none", model=[5.34, 5.34, 5.2, 5.2, 5.2]) + ms("onehot"), None,
                    "none: 2/5 seeds with model[T] < model[0] and model[T] > Lloyd[T] (median step-T gap -0.050), "
                    "p = 0.812"),
            U: Case(ms("none", model=5.34) + ms("onehot", model=5.3), None, good,
                    "onehot median step-T gap +0.050 (< 0 needed)")}


# ----- generalisation: the one-hot checkpoints under length and shift -----------------------------------------------
LENGTHS = (128, 256, 1024, 2048)
SHIFTS = ("unequal weights", "anisotropic", "half scale", "double scale")


def gen(protocol, setting, model=5.0, lloyd=5.25, model_1=5.4, eval_n=512, **kwargs):
    """The one-hot seed rows of one evaluation setting: curves start at 6.35, after step 1 the model is at
    ``model_1`` and Lloyd at 5.59, after step 20 at ``model`` and ``lloyd`` (one value or one per seed)."""
    def per_seed(value, first):
        return [steps_curve(6.35, first, v) for v in value] if isinstance(value, list) else \
            steps_curve(6.35, first, value)
    return cell("generalisation", {"protocol": protocol, "setting": setting},
                config={"embedding": "onehot", "n": 512, "eval_n": eval_n, **kwargs.pop("config", {})},
                model_curve=per_seed(model, model_1), lloyd_curve=per_seed(lloyd, 5.59), **kwargs)


def home(**kwargs):
    return gen("main", "in-distribution", **kwargs)


@scenarios("generalisation.length_beats_lloyd_at_every_n")
def _length(claim_id):
    def rows(last=5.0, at=512):
        return [row for n in LENGTHS for row in gen("length", f"n={n}", model=last if n == 2048 else 5.0,
                                                    eval_n=n)] + home(eval_n=at)

    # every gap 5.0 - 5.25 = -0.25; at n = 2048 in the bad case 5.3 - 5.25 = +0.05
    part = "n={}: 5/5 seeds < 0, median -0.250, p = 0.031"
    good = "; ".join(part.format(n) for n in LENGTHS)
    return {R: Case(rows(), None, good),
            N: Case(rows(last=5.3), None, "; ".join(part.format(n) for n in LENGTHS[:3])
                    + "; n=2048: 0/5 seeds < 0, median +0.050, p = 1.000"),
            # the in-distribution rows were scored at n = 128, not the papers' 512: no positive control
            U: Case(rows(at=128), None, good, "in-distribution n=512 0 (>= 5 each)")}


@scenarios("generalisation.shift_beats_lloyd_at_every_shift")
def _shift(claim_id):
    def rows(half=5.0, double_lloyd=5.25):
        return [row for shift in SHIFTS for row in gen("shift", shift, model=half if shift == "half scale" else 5.0,
                                                       lloyd=double_lloyd if shift == "double scale" else 5.25)
                ] + home()

    part = "{}: 5/5 seeds < 0, median -0.250, p = 0.031"
    return {R: Case(rows(), None, "; ".join(part.format(s) for s in SHIFTS)),
            # two half-scale seeds at 5.3 (+0.05): 3 of 5, p = 16/32; median of (-0.25 x 3, +0.05 x 2) is -0.25
            N: Case(rows(half=[5.0, 5.0, 5.0, 5.3, 5.3]), None, "; ".join(
                "half scale: 3/5 seeds < 0, median -0.250, p = 0.500" if s == "half scale" else part.format(s)
                for s in SHIFTS)),
            # a NaN Lloyd objective makes that seed's gap +inf: 4 of 5, p = 6/32; 4 x 5 + 5 scored rows read
            U: Case(rows(double_lloyd=[5.25] * 4 + [math.nan]), None, "; ".join(
                "double scale: 4/5 seeds < 0, median -0.250, p = 0.188" if s == "double scale" else part.format(s)
                for s in SHIFTS), "Lloyd's step-T log objective finite in 24/25 scored rows")}


@scenarios("generalisation.double_scale_starts_worse_then_overtakes")
def _double(claim_id):
    # step 1: 5.7 - 5.59 = +0.11 (worse), 5.5 - 5.59 = -0.09 (better); step 20: 5.0 - 5.25 = -0.25
    double = gen("shift", "double scale", model_1=5.7)
    good = ("double scale: 5/5 seeds worse than Lloyd after step 1 and better after step T (median gaps +0.110 at "
            "step 1, -0.250 at step T), p = 0.031")
    return {R: Case(double + home(), None, good),
            N: Case(gen("shift", "double scale", model_1=5.5) + home(), None,
                    "double scale: 0/5 seeds worse than Lloyd after step 1 and better after step T (median gaps -0.090 "
                    "at step 1, -0.250 at step T), p = 1.000"),
            U: Case(gen("shift", "double scale", model_1=5.7, config={"steps": 3000})
                    + home(config={"steps": 3000}), None, good, ">= 10000 configured training steps in 0/10 rows")}


# ----- table1: one benchmark run, one row per k ---------------------------------------------------------------------
KS = (6, 25, 100, 400, 1000)
PAPER_SPEEDUP = (0.88, 1.05, 2.16, 4.90, 12.14)  # paper 2 Table 1
PAPER_SAVED = (0.9, 4.0, 16.1, 51.5, 69.3)
TITLE = ('one-hot vs binary, one-layer learnable model, {"d": 32, "n": 1024, "batch": 32}, 2 threads, median of 5 '
         'interleaved rounds (paper 2 Table 1)')
COMMAND = "python -m analyses.bench_inference --embeddings-only --embedding-rounds 5"


def bench(speedups=PAPER_SPEEDUP, saved=PAPER_SAVED, title=TITLE, command=COMMAND, ks=KS):
    """The rows of one Table 1 run (as analyses.bench_inference.table1_rows gives them), one per k in ``ks``."""
    return [{"study": "table1", "name": f"k={k}", "label": f"k={k}", "status": "ok", "k": str(k),
             "speedup": str(speedup), "memory_saved": str(memory), "title": title, "command": command,
             "config": json.dumps({"k": k})}
            for k, speedup, memory in zip(KS, speedups, saved) if k in ks]


@scenarios("table1.binary_faster_from_k25")
def _table1_faster(claim_id):
    good = "speed-up k=25 1.05x, k=100 2.16x, k=400 4.90x, k=1000 12.14x (> 1 at each needed)"
    return {R: Case(bench(), None, good),
            N: Case(bench(speedups=(0.88, 0.97, 2.16, 4.90, 12.14)), None,
                    "speed-up k=25 0.97x, k=100 2.16x, k=400 4.90x, k=1000 12.14x (> 1 at each needed)"),
            U: Case(bench(title=TITLE.replace("median of 5", "median of 2")), None, good,
                    "both embeddings timed interleaved in one process, median of 2 rounds (>= 3 needed)")}


@scenarios("table1.speedup_grows_with_k")
def _table1_grows(claim_id):
    good = "speed-up k=6 0.88x, k=25 1.05x, k=100 2.16x, k=400 4.90x, k=1000 12.14x (non-decreasing in k needed)"
    # a title without its rounds and a command whose --rounds is another table's: the rounds are not known
    unstated = 'one-hot vs binary, one-layer learnable model, {"d": 32, "n": 1024, "batch": 32}, 2 threads'
    return {R: Case(bench(), None, good),
            N: Case(bench(speedups=(0.88, 1.05, 2.16, 1.90, 12.14)), None,
                    "speed-up k=6 0.88x, k=25 1.05x, k=100 2.16x, k=400 1.90x, k=1000 12.14x (non-decreasing in k "
                    "needed)"),
            U: Case(bench(title=unstated, command="python -m analyses.bench_inference --rounds 9"), None, good,
                    "interleaved rounds not stated in the title or command (>= 3 needed)")}


@scenarios("table1.binary_saves_memory_growing_with_k")
def _table1_memory(claim_id):
    return {R: Case(bench(), None, "memory saved k=6 0.9%, k=25 4.0%, k=100 16.1%, k=400 51.5%, k=1000 69.3% (> 0 at "
                    "every k and non-decreasing needed)"),
            # non-decreasing, but at k = 6 binary takes more memory than one-hot
            N: Case(bench(saved=(-0.5, 4.0, 16.1, 51.5, 69.3)), None, "memory saved k=6 -0.5%, k=25 4.0%, k=100 "
                    "16.1%, k=400 51.5%, k=1000 69.3% (> 0 at every k and non-decreasing needed)"),
            U: Case(bench(ks=KS[:4]), None, "memory saved k=6 0.9%, k=25 4.0%, k=100 16.1%, k=400 51.5%, k=1000 nan% "
                    "(> 0 at every k and non-decreasing needed)", "present: 4/5")}


def test_table1_needs_the_stated_threads_and_one_run():
    claim = CLAIM["table1.speedup_grows_with_k"]
    verdict = C.decide(claim, bench(title=TITLE.replace("2 threads", "1 thread")))
    assert verdict.outcome == U and "threads stated: 1 (2 needed)" in verdict.control_figure
    rows = bench()
    rows[0]["command"] = "python -m analyses.bench_inference --embeddings-only --embedding-rounds 7"
    verdict = C.decide(claim, rows)
    assert (verdict.outcome, verdict.control_figure) == (U, "rows of 2 benchmark runs (1 needed)")


def test_table1_rounds_from_the_title_or_the_embedding_rounds_option():
    assert C.table1_rounds(TITLE, "") == 5
    assert C.table1_rounds("2 threads", COMMAND) == 5
    assert C.table1_rounds("2 threads", "python -m analyses.bench_inference --embedding-rounds=4 --quick") == 4
    assert C.table1_rounds("2 threads", "python -m analyses.bench_inference --rounds 9") is None  # another table's
    assert C.table1_rounds("2 threads", "python -m other --embedding-rounds 5") is None
    verdict = C.decide(CLAIM["table1.speedup_grows_with_k"], bench(title=TITLE.split(", median")[0]))
    assert verdict.outcome == R  # the rounds read from --embedding-rounds 5
    assert verdict.control_figure.startswith("both embeddings timed interleaved in one process, median of 5 rounds")

# ----- every claim, every outcome -----------------------------------------------------------------------------------
def _case(claim_id, outcome):
    function, key = SCENARIOS[claim_id]
    return function(key)[outcome]


def test_every_claim_has_its_three_scenarios():
    assert set(SCENARIOS) == set(CLAIM)


@pytest.mark.parametrize("outcome", [R, N, U])
@pytest.mark.parametrize("claim_id", sorted(SCENARIOS))
def test_claim_outcome(claim_id, outcome):
    case = _case(claim_id, outcome)
    verdict = C.decide(CLAIM[claim_id], case.rows, case.histories)
    assert verdict.outcome == outcome, (verdict.figure, verdict.control_figure)
    assert verdict.figure == case.figure
    if outcome == U:
        assert case.control in verdict.control_figure


# ----- the registry -------------------------------------------------------------------------------------------------
def writer_columns(study):
    """The columns of the rows a study's claims read, as their writer lists them: the sweep's
    (``interp.training.sweep.FIELDS``), or the multistep seed rows', the generalisation rows' and Table 1's."""
    from analyses.studies.inference_embedding.measure import TABLE1_COLUMNS
    from analyses.studies.main_seeds.generalisation import COLUMNS
    from analyses.studies.multistep.measure import SEED_ROW_COLUMNS
    from interp.training.sweep import FIELDS

    return set({"multistep": SEED_ROW_COLUMNS, "generalisation": COLUMNS, "table1": TABLE1_COLUMNS}.get(study, FIELDS))


def test_every_study_has_a_claim_and_every_claim_a_study():
    assert {claim.study for claim in C.CLAIMS} == set(C.STUDIES)
    assert len({claim.id for claim in C.CLAIMS}) == len(C.CLAIMS)
    for claim in C.CLAIMS:
        assert claim.id.startswith(claim.study + ".")
        assert claim.paper.startswith("paper 2") and claim.metric and claim.rule.text and claim.control.text


def test_the_registry_holds_every_study_with_its_tables_and_seeds():
    assert set(C.STUDIES) == {"embedding", "tau_loss", "d", "k", "family", "stability", "lr", "n", "embedding_n512",
                              "stability_n512", "n_d4k16", "multistep", "generalisation", "table1"}
    assert C.STUDIES["embedding"].tables == ("embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6",
                                             "embedding_d8_k8")
    assert C.STUDIES["embedding_n512"].tables == ("embedding_d4_k16_n512",)
    assert C.STUDIES["n_d4k16"].tables == ("embedding_d4_k16", "embedding_d4_k16_n512")
    assert C.STUDIES["multistep"].tables == ("multistep_seeds",)
    assert C.STUDIES["generalisation"].tables == ("generalisation",)
    assert C.STUDIES["table1"].tables == ("inference_embeddings",)
    own = {"multistep", "generalisation", "table1"}  # rows of their own writers, which the markdown names
    assert all(C.STUDIES[s].source for s in own) and not any(C.STUDIES[s].source for s in C.STUDIES if s not in own)
    stable = {"stability", "stability_n512"}
    assert all(C.STUDIES[s].seeds == 10 for s in stable) and C.STUDIES["table1"].seeds == 1
    assert all(C.STUDIES[s].seeds == 5 for s in C.STUDIES if s not in stable | {"table1"})


def test_rules_and_controls_read_only_their_writers_columns():
    from interp.training.sweep import FIELDS

    assert {"study", "name", "status", "config", "relative_objective", "transfer"} <= set(FIELDS)
    for claim in C.CLAIMS:
        columns = writer_columns(claim.study)
        assert set(claim.rule.columns) <= columns and set(claim.control.columns) <= columns, claim.id
        assert set(claim.rule.history_keys + claim.control.history_keys) <= {"step", "relative_objective"}


def test_committed_sweep_tables_have_the_sweeps_columns():
    """The committed CSVs of the studies that read sweep rows hold exactly the sweep's columns."""
    from interp.training.sweep import FIELDS

    tables = {table for design in C.STUDIES.values() if not design.source for table in design.tables}
    for table in sorted(tables):
        path = ROOT / "analyses" / "results" / "studies" / f"{table}.csv"
        if path.exists():
            with open(path, newline="") as handle:
                assert tuple(next(csv.reader(handle))) == FIELDS, table


def _stripped(case, check):
    rows = tuple({column: row[column] for column in check.columns} for row in case.rows)
    histories = None
    if check.history_keys:
        histories = {key: [{name: entry[name] for name in check.history_keys} for entry in history]
                     for key, history in case.histories.items()}
    return rows, histories


@pytest.mark.parametrize("claim_id", sorted(SCENARIOS))
def test_rule_and_control_read_only_their_declared_columns(claim_id):
    """Run each rule and control on rows holding only the columns (and history keys) it declares: reading any other
    raises KeyError (or InvalidInput for a history it did not declare), and the findings are unchanged."""
    claim = CLAIM[claim_id]
    for outcome in (R, N, U):
        case = _case(claim_id, outcome)
        verdict = C.decide(claim, case.rows, case.histories)
        rule = claim.rule.evaluate(C.Evidence(*_stripped(case, claim.rule)))
        control = claim.control.evaluate(C.Evidence(*_stripped(case, claim.control)))
        assert rule.figure == verdict.figure and control.figure == verdict.control_figure


# ----- the metrics' definitions on hand-made curves -----------------------------------------------------------------
def _one(history, status="ok"):
    row = cell("t", {"x": 1}, seeds=(1,), status=[status])[0]
    return C.Evidence((row,), {f"t/{row['name']}": history}), row


def test_curve_metrics_by_hand():
    ev, row = _one(curve(5.0, 2.0, 1.0, 1.5, 0.95))
    assert C.curve_area(ev, row) == pytest.approx((2.0 + 1.0 + 1.5 + 0.95) / 4)
    assert C.largest_jump(ev, row) == pytest.approx(0.5) and C.unstable(ev, row)
    assert C.largest_jump_at(ev, row) == (pytest.approx(0.5), 150, 1.0, 1.5)  # from the best 1.0 to 1.5 at step 150
    assert C.settling_step(ev, row) == 200  # only the final 0.95 lies within 5% of itself
    ev, row = _one(curve(5.0, 1.0, 1.2, 0.9, 1.8, 2.0))  # two rises: 1.0 -> 1.2 (20%) and 0.9 -> 2.0 (122%)
    assert C.largest_jump_at(ev, row) == (pytest.approx(1.1 / 0.9), 250, 0.9, 2.0)
    ev, row = _one(curve(5.0, 2.0, math.nan, 1.0))
    jump, step, _, value = C.largest_jump_at(ev, row)
    assert jump == math.inf and step == 100 and math.isnan(value)
    ev, row = _one(curve(5.0, 2.0, 1.0, 0.99, 0.98))
    assert C.largest_jump(ev, row) == 0.0 and not C.unstable(ev, row) and C.settling_step(ev, row) == 100
    assert math.isnan(C.largest_jump_at(ev, row)[1])  # no rise: no step
    ev, row = _one(curve(5.0, 2.0, 1.0), status="diverged")
    assert C.unstable(ev, row) and C.curve_area(ev, row) == math.inf and C.settling_step(ev, row) == math.inf
    assert C.final_relative(ev, row) == math.inf and C.twenty_step_gap(ev, row) == math.inf


# ----- decide's inputs ----------------------------------------------------------------------------------------------
def test_decide_refuses_bad_inputs():
    claim = CLAIM["d.beats_one_step_lloyd_at_every_d"]
    rows = cell("d", {"d": 4})
    with pytest.raises(InvalidInput, match="several rows"):
        C.decide(claim, rows + rows[:1])  # the same row twice (two budgets of one table)
    with pytest.raises(InvalidInputType, match="claim"):
        C.decide("d.beats_one_step_lloyd_at_every_d", rows)
    with pytest.raises(InvalidInputType, match="rows"):
        C.decide(claim, "rows")
    with pytest.raises(InvalidInputType, match="histories"):
        C.decide(claim, rows, histories=[])
    needs_curves = CLAIM["embedding.d4k6.none_never_matches"]
    none = emb("embedding_d4_k6", 4, 6, "none", relative_objective=1.2)
    with pytest.raises(InvalidInput, match="histories lacks the training history of row 'embedding_d4_k6/"):
        C.decide(needs_curves, none + emb("embedding_d4_k6", 4, 6, "onehot"))
    with pytest.raises(InvalidInput, match="empty"):
        C.decide(needs_curves, none, hist(none, []))


def test_rows_of_the_three_embedding_tables_share_names_but_not_keys():
    rows = [row for d, k in ((4, 6), (4, 16), (32, 6)) for row in emb(f"embedding_d{d}_k{k}", d, k, "onehot")]
    assert len({row["name"] for row in rows}) == 5 and len({C.row_key(row) for row in rows}) == 15
    with pytest.raises(InvalidInput, match="histories lacks"):  # the claims that read the curves need them
        C.decide_study("embedding", rows)


def test_decide_study_and_histories_by_key():
    rows = cell("embedding_d4_k6", {"embedding": "none"}, seeds=SEEDS[:2])
    by_label = {"embedding=none": [curve(2.0, 1.5), curve(3.0, 1.2)]}
    assert C.histories_by_key(rows, by_label) == {f"embedding_d4_k6/embedding=none_seed={SEEDS[0]}": curve(2.0, 1.5),
                                                  f"embedding_d4_k6/embedding=none_seed={SEEDS[1]}": curve(3.0, 1.2)}
    with pytest.raises(InvalidInput, match="by_label lacks"):
        C.histories_by_key(rows, {"embedding=none": [curve(2.0)]})
    results = C.decide_study("d", cell("d", {"d": 4}))
    assert [claim.id for claim, _ in results] == ["d.beats_one_step_lloyd_at_every_d"]
    assert results[0][1].outcome == U  # three of the four d missing
    with pytest.raises(InvalidInput, match="study must be one of"):
        C.claims_of("width")
    table = C.verdict_lines(results)
    assert table[0] == "| paper's finding | measured (rule) | control | verdict |"
    assert table[2].endswith("| **undecided at this budget** |")


# ----- docs/claims.md -----------------------------------------------------------------------------------------------
def test_docs_claims_md_is_the_generators_output():
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        C.main(["--markdown"])
    assert (ROOT / "docs" / "claims.md").read_text() == buffer.getvalue()
    text = buffer.getvalue()
    assert all(f"| `{claim.id}` |" in text for claim in C.CLAIMS)
    assert "Leaner Transformers Can Easily Learn to Cluster" in text  # cites the paper itself, by title


# ----- which claims share training runs -----------------------------------------------------------------------------
def test_rows_read_records_the_cells_a_rule_reads():
    """n.no_effect's rule reads its four cells and nothing else; a row of another grid point is not read."""
    rows = [row for n in (128, 256, 512, 1024) for row in cell("n", {"n": n}, config={"d": 4, "k": 6})]
    stray = cell("n", {"n": 64}, config={"d": 4, "k": 6})
    read = C.rows_read(CLAIM["n.no_effect"], rows + stray)
    assert len(read) == 20 and all(row in rows for row in read)


def test_rows_read_records_the_cells_a_control_reads():
    """tau1_ne_misses_lloyd's rule reads NE tau = 1 only; its control also reads NE tau = 0.1 (which must reach
    one-step Lloyd for the verdict to count), so the verdict reads both cells; L2 at tau = 1 is read by neither."""
    ne_1 = tau("softmin", 1.0, relative_objective=spread(1.50))
    ne_01 = tau("softmin", 0.1, relative_objective=spread(0.90))
    l2_1 = tau("sparsemax", 1.0, relative_objective=spread(0.95))
    read = C.rows_read(CLAIM["tau_loss.tau1_ne_misses_lloyd"], ne_1 + ne_01 + l2_1)
    assert len(read) == 10 and all(row in ne_1 + ne_01 for row in read)


def test_run_identity_is_the_config_with_its_seed_whatever_the_table():
    one = cell("embedding_d4_k6", {"embedding": "onehot"}, config={"d": 4, "k": 6})[0]
    same = {**one, "study": "tau_loss", "name": "loss=softmin_tau=0.1_seed=11"}
    other_seed = cell("embedding_d4_k6", {"embedding": "onehot"}, seeds=(12,), config={"d": 4, "k": 6})[0]
    assert C.run_identity(one) == C.run_identity(same) != C.run_identity(other_seed)


def test_run_identity_fills_fields_added_later_and_drops_evaluation_settings():
    """A row written before a TrainConfig option existed is the run with that option at its default; the evaluation
    setting a generalisation row adds to its config (protocol, setting, eval_n) is not part of the training run."""
    full = cell("lr", {"lr": 0.01}, config={"d": 32, "k": 6, "slot_order": "fixed", "unroll": 1, "rollout": 0})[0]
    older = cell("embedding_d32_k6", {"lr": 0.01}, config={"d": 32, "k": 6})[0]
    scored = {**full, "config": json.dumps({**json.loads(full["config"]), "protocol": "length", "setting": "n=128",
                                            "eval_n": 128})}
    other_option = cell("lr", {"lr": 0.01}, config={"d": 32, "k": 6, "slot_order": "shuffled"})[0]
    assert C.run_identity(full) == C.run_identity(older) == C.run_identity(scored) != C.run_identity(other_option)
    unseeded = {**full, "config": json.dumps({"k": 10})}  # a benchmark's row: no training run, not the default one
    with pytest.raises(ValueError, match=r"lacks \['seed'\]"):
        C.run_identity(unseeded)


def test_shared_runs_names_claims_of_other_studies_only():
    read = {"a.x": {"r1", "r2"}, "a.y": {"r2"}, "b.z": {"r2", "r3"}, "c.w": {"r4"}}
    study = {"a.x": "a", "a.y": "a", "b.z": "b", "c.w": "c"}
    assert C.shared_runs(read, study) == {"a.x": ["b.z"], "a.y": ["b.z"], "b.z": ["a.x", "a.y"], "c.w": []}


def test_committed_dependence_follows_from_the_committed_rows():
    from analyses.studies.dependence import measure as dependence

    committed = json.loads((ROOT / "analyses" / "results" / "studies" / "dependence.json").read_text())["claims"]
    assert dependence.dependence(ROOT / "analyses" / "results" / "studies") == committed
    # the run every d = 4, k = 6 study holds: the one-hot tau = 0.1 seed of the embedding, tau x loss, d and n studies
    assert {"d.beats_one_step_lloyd_at_every_d", "n.no_effect", "tau_loss.tau01_both_beat_one_step_lloyd"} <= set(
        committed["embedding.d4k6.onehot_binary_beat_one_step_lloyd"]["shares_runs_with"])
    # tau x loss at d = 32 decides the tau_loss claims on its own rows, and its NE tau = 0.1 cell is the lr study's
    # lr = 0.01 run (same config and seed): entries keyed by section, sharing with the lr claims
    if "lr.lr001_best" in committed and "tau_loss_d32/tau_loss.tau01_both_beat_one_step_lloyd" in committed:
        assert "tau_loss_d32/tau_loss.tau01_both_beat_one_step_lloyd" in committed["lr.lr001_best"]["shares_runs_with"]
        # its control reads NE tau = 0.1, the lr = 0.01 run; L2's claim reads only sparsemax runs, which no lr run is
        assert "lr.lr001_best" in committed["tau_loss_d32/tau_loss.tau1_ne_misses_lloyd"]["shares_runs_with"]
        assert committed["tau_loss_d32/tau_loss.tau1_l2_improves_but_misses_lloyd"]["shares_runs_with"] == []
    # the lr = 0.01 run is also the one-hot d = 32, k = 6 run of the embedding table (written before the newer options)
    if "lr.lr001_best" in committed and "embedding.d32k6.onehot_binary_beat_one_step_lloyd" in committed:
        assert "embedding.d32k6.onehot_binary_beat_one_step_lloyd" in committed["lr.lr001_best"]["shares_runs_with"]
    # generalisation scores the one-hot checkpoints whose multi-step curves the multistep study reads
    if "generalisation.length_beats_lloyd_at_every_n" in committed:
        assert "multistep.reembedded_onehot_binary_beat_lloyd" in committed[
            "generalisation.length_beats_lloyd_at_every_n"]["shares_runs_with"]
        assert committed["generalisation.length_beats_lloyd_at_every_n"]["runs"] == 5
