"""The exact tests of analyses/framework/statistics.py against scipy.stats and against p-values counted by hand: the
sign test (``binomtest``), midranks (``rankdata``), the rank-sum test without ties (``mannwhitneyu``, exact) and with
ties and +inf (an exhaustive ``permutation_test`` of the rank sum), its smallest attainable p-value, the equivalence
(TOST) test and its converse (scipy's ``mannwhitneyu`` on the shifted samples, and by hand), and Fisher's exact test
(``fisher_exact``), on small samples like the claims' 5 and 10 seeds."""

import math
import random

import numpy as np
import pytest
from scipy import stats

from analyses.framework.statistics import (
    beyond_margin_p,
    equivalence_p,
    fisher_greater_p,
    midranks,
    rank_sum_p,
    sign_test_p,
    smallest_rank_sum_p,
)
from interp._checks import InvalidInput


def _rank_sum(x, y):
    return stats.rankdata(np.concatenate([x, y]))[: len(x)].sum()


def _permutation_p(a, b, alternative: str) -> float:
    """scipy's exact permutation p-value of a's rank sum (midranks), over every split of the pooled values."""
    return stats.permutation_test((np.array(a, dtype=float), np.array(b, dtype=float)), _rank_sum,
                                  permutation_type="independent", alternative=alternative, n_resamples=np.inf).pvalue


# ----- sign test ----------------------------------------------------------------------------------------------------
def test_sign_test_by_hand():
    assert sign_test_p(5, 5) == 1 / 32  # all 5 seeds: the claims' smallest p with 5 seeds, 0.031
    assert sign_test_p(4, 5) == 6 / 32  # C(5, 4) + C(5, 5) = 6
    assert sign_test_p(9, 10) == 11 / 1024  # 10 + 1 of 1024
    assert sign_test_p(0, 3) == 1.0 and sign_test_p(0, 0) == 1.0  # no trials: nothing to reject


@pytest.mark.parametrize("trials", range(1, 13))
def test_sign_test_matches_scipy_binomtest(trials):
    for hits in range(trials + 1):
        reference = stats.binomtest(hits, trials, 0.5, alternative="greater").pvalue
        assert sign_test_p(hits, trials) == pytest.approx(reference, rel=1e-12), (hits, trials)


# ----- midranks -----------------------------------------------------------------------------------------------------
def test_midranks_by_hand_and_against_rankdata():
    assert midranks([0.3, 0.1, 0.2]) == [3.0, 1.0, 2.0]
    assert midranks([0.1, 0.1, 0.2]) == [1.5, 1.5, 3.0]
    assert midranks([math.inf, 0.3, math.inf, 0.5, math.inf]) == [4.0, 1.0, 4.0, 2.0, 4.0]  # +inf ties as one value
    assert midranks([7.0, 7.0, 7.0, 7.0]) == [2.5, 2.5, 2.5, 2.5]
    assert midranks([]) == []
    generator = random.Random(3)
    for _ in range(40):
        values = [generator.choice([0.1, 0.2, 0.3, 0.4, math.inf]) for _ in range(generator.randint(1, 9))]
        assert midranks(values) == stats.rankdata(values, method="average").tolist(), values


# ----- rank-sum test ------------------------------------------------------------------------------------------------
def test_rank_sum_by_hand():
    separated = ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert rank_sum_p(*separated, "less") == pytest.approx(1 / 252)  # the one most extreme of C(10, 5) splits
    assert rank_sum_p(*separated, "greater") == 1.0
    assert rank_sum_p(*separated, "two-sided") == pytest.approx(2 / 252)
    # U = 4 of a 5 x 5 test: 12 of the 252 splits have U <= 4 (the claims' threshold, p = 0.048)
    assert rank_sum_p([1, 2, 3, 4, 9], [5, 6, 7, 8, 10], "less") == pytest.approx(12 / 252)
    assert rank_sum_p([1, 3, 5, 7, 9], [2, 4, 6, 8, 10], "two-sided") == pytest.approx(2 * 87 / 252)
    assert rank_sum_p([1.0], [2.0], "less") == 0.5  # one against one: two splits
    assert rank_sum_p([], [1.0], "less") == 1.0 and rank_sum_p([1.0], [], "two-sided") == 1.0


def test_rank_sum_with_ties_by_hand():
    # midranks 1.5, 1.5 | 4, 4, 4: a's rank sum 3 is the smallest; 1 of the C(5, 2) = 10 splits reaches it
    assert rank_sum_p([0.1, 0.1], [0.2, 0.2, 0.2], "less") == pytest.approx(0.1)
    assert rank_sum_p([0.1, 0.1], [0.2, 0.2, 0.2], "two-sided") == pytest.approx(0.2)
    # two failed seeds (+inf) against 0.3, 0.5, +inf: ranks 4, 4 | 1, 2, 4; 3 of the 10 splits give a sum >= 8
    assert rank_sum_p([math.inf, math.inf], [0.3, 0.5, math.inf], "greater") == pytest.approx(0.3)
    assert rank_sum_p([math.inf, math.inf], [0.3, 0.5, math.inf], "less") == 1.0
    # every value tied: each split has the same sum, so both one-sided p-values are 1
    assert rank_sum_p([0.2, 0.2], [0.2, 0.2], "less") == 1.0 and rank_sum_p([0.2], [0.2], "two-sided") == 1.0


@pytest.mark.parametrize("a, b", [
    ([0.91, 0.93, 0.95], [0.90, 0.92]),
    ([1.2, 0.8, 1.1, 0.9, 1.05], [0.7, 0.75, 0.85, 0.95, 0.6]),
    ([0.1], [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
    ([0.5, 0.4, 0.3, 0.2, 0.1], [0.55, 0.45, 0.35, 0.25, 0.15]),
])
def test_rank_sum_matches_scipy_mannwhitneyu_without_ties(a, b):
    for alternative in ("less", "greater", "two-sided"):
        reference = stats.mannwhitneyu(a, b, alternative=alternative, method="exact").pvalue
        assert rank_sum_p(a, b, alternative) == pytest.approx(reference, rel=1e-9), alternative


def test_rank_sum_matches_scipy_mannwhitneyu_on_random_small_samples():
    generator = random.Random(5)
    for _ in range(60):
        a = [generator.random() for _ in range(generator.randint(1, 6))]
        b = [generator.random() for _ in range(generator.randint(1, 7))]
        for alternative in ("less", "greater", "two-sided"):
            reference = stats.mannwhitneyu(a, b, alternative=alternative, method="exact").pvalue
            assert rank_sum_p(a, b, alternative) == pytest.approx(reference, rel=1e-9), (a, b, alternative)


@pytest.mark.parametrize("a, b", [
    ([0.1, 0.1], [0.2, 0.2, 0.2]),
    ([math.inf, math.inf], [0.3, 0.5, math.inf]),
    ([0.1, 0.2, 0.2, 0.3, math.inf], [0.2, 0.3, 0.3, 0.4, 0.4]),
    ([1.0, 1.0, 2.0], [1.0, 2.0, 2.0, 3.0]),
])
def test_rank_sum_with_ties_matches_an_exhaustive_permutation_test(a, b):
    """Ties (and +inf, the worst value of a failed seed) get midranks; the exact distribution of the rank sum is
    scipy's permutation_test over every split."""
    for alternative in ("less", "greater"):
        assert rank_sum_p(a, b, alternative) == pytest.approx(_permutation_p(a, b, alternative), rel=1e-9), alternative


def test_rank_sum_with_ties_matches_the_permutation_test_on_random_small_samples():
    generator = random.Random(7)
    for _ in range(25):
        a = [generator.choice([0.1, 0.2, 0.3, math.inf]) for _ in range(generator.randint(2, 5))]
        b = [generator.choice([0.1, 0.2, 0.3, 0.4, math.inf]) for _ in range(generator.randint(2, 5))]
        for alternative in ("less", "greater"):
            reference = _permutation_p(a, b, alternative)
            assert rank_sum_p(a, b, alternative) == pytest.approx(reference, rel=1e-9), (a, b, alternative)


def test_rank_sum_refuses_an_unknown_alternative():
    with pytest.raises(InvalidInput, match="alternative"):
        rank_sum_p([1.0], [2.0], "lower")


@pytest.mark.parametrize("n_a, n_b, expected", [(5, 5, 2 / 252), (10, 10, 2 / 184756), (3, 4, 2 / 35), (1, 1, 1.0),
                                                 (1, 2, 2 / 3), (2, 2, 1 / 3)])
def test_smallest_rank_sum_p_is_complete_separation(n_a, n_b, expected):
    a, b = list(range(n_a)), list(range(n_a, n_a + n_b))  # every value of a below every value of b
    assert smallest_rank_sum_p(n_a, n_b) == pytest.approx(expected, rel=1e-12)
    assert rank_sum_p(a, b, "two-sided") == pytest.approx(expected, rel=1e-12)
    reference = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
    assert smallest_rank_sum_p(n_a, n_b) == pytest.approx(reference, rel=1e-9)


# ----- Fisher's exact test ------------------------------------------------------------------------------------------
def test_fisher_by_hand():
    assert fisher_greater_p(3, 10, 0, 10) == pytest.approx(120 / 1140)  # the paper's 3/10 vs 0/10: p = 0.105
    assert fisher_greater_p(5, 5, 0, 5) == pytest.approx(1 / 252)
    assert fisher_greater_p(4, 5, 0, 5) == pytest.approx(6 / 252)
    assert fisher_greater_p(4, 5, 1, 5) == pytest.approx(26 / 252)
    assert fisher_greater_p(0, 5, 3, 5) == 1.0
    assert fisher_greater_p(2, 2, 0, 0) == 1.0 and fisher_greater_p(0, 0, 1, 3) == 1.0  # an empty group


def test_fisher_matches_scipy_fisher_exact_on_every_small_table():
    for n_a in range(1, 7):
        for n_b in range(1, 7):
            for a in range(n_a + 1):
                for b in range(n_b + 1):
                    reference = stats.fisher_exact([[a, n_a - a], [b, n_b - b]], alternative="greater").pvalue
                    assert fisher_greater_p(a, n_a, b, n_b) == pytest.approx(reference, rel=1e-9), (a, n_a, b, n_b)


@pytest.mark.parametrize("table", [(3, 10, 0, 10), (7, 10, 2, 10), (1, 10, 9, 10), (5, 8, 5, 12)])
def test_fisher_matches_scipy_at_ten_seeds(table):
    a, n_a, b, n_b = table
    reference = stats.fisher_exact([[a, n_a - a], [b, n_b - b]], alternative="greater").pvalue
    assert fisher_greater_p(*table) == pytest.approx(reference, rel=1e-9)


# ----- equivalence (TOST) and its converse ---------------------------------------------------------------------------

def test_equivalence_by_hand():
    a, b = [0.90, 0.91, 0.92, 0.93, 0.94], [0.905, 0.915, 0.925, 0.935, 0.945]
    # margin 0.1: b + 0.1 lies wholly above a and b - 0.1 wholly below: both one-sided tests at 1/252
    assert equivalence_p(a, b, 0.1) == pytest.approx(1 / 252)
    assert beyond_margin_p(a, b, 0.1) == 1.0
    # margin 0.001: the shifted samples interleave with a as before, far from separation
    assert equivalence_p(a, b, 0.001) > 0.3
    far = [value + 0.5 for value in b]  # a shift of -0.5, far outside a margin of 0.1
    assert equivalence_p(a, far, 0.1) == 1.0
    assert beyond_margin_p(a, far, 0.1) == pytest.approx(2 / 252)
    assert equivalence_p(a, [math.inf] * 5, 0.1) == 1.0  # failed seeds are never within a margin


@pytest.mark.parametrize("seed", range(8))
def test_equivalence_matches_scipy_on_shifted_samples(seed):
    generator = random.Random(seed)
    a = [generator.gauss(0.9, 0.02) for _ in range(5)]
    b = [generator.gauss(0.9 + generator.choice([0, 0.03, -0.05]), 0.02) for _ in range(5)]
    margin = generator.choice([0.01, 0.025, 0.05])
    up, down = [v + margin for v in b], [v - margin for v in b]
    reference = max(stats.mannwhitneyu(a, up, alternative="less", method="exact").pvalue,
                    stats.mannwhitneyu(a, down, alternative="greater", method="exact").pvalue)
    assert equivalence_p(a, b, margin) == pytest.approx(reference, rel=1e-9)
    converse = min(1.0, 2 * min(stats.mannwhitneyu(a, up, alternative="greater", method="exact").pvalue,
                                stats.mannwhitneyu(a, down, alternative="less", method="exact").pvalue))
    assert beyond_margin_p(a, b, margin) == pytest.approx(converse, rel=1e-9)


@pytest.mark.parametrize("margin", [0.0, -0.1, float("nan")])
def test_equivalence_refuses_a_margin_that_is_not_positive(margin):
    for test in (equivalence_p, beyond_margin_p):
        with pytest.raises(InvalidInput, match="margin must be > 0"):
            test([0.9], [0.9], margin)
