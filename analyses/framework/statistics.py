"""The analyses' statistics: summaries over seeds (linear-interpolation quantiles, the median and interquartile band)
and exact tests on small samples: the sign test, the Mann-Whitney rank-sum test (with its two-one-sided equivalence
form) and Fisher's exact test.

Summaries are the papers' (paper 2 §3): median over seeds and the interquartile band (25%-75%), of the finite values.
The claims' rules (``analyses.claims``) decide with these on a few seeds per cell (5 or 10), where exact p-values
are cheap and asymptotic ones are wrong. Every test is pure Python (``math.comb``) and agrees with scipy.stats
(``tests/test_statistics.py``): ``binomtest``, ``mannwhitneyu(method="exact")`` without ties, an exhaustive
``permutation_test`` of the rank sum with ties, and ``fisher_exact``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from interp._checks import InvalidInput

ALTERNATIVES = ("less", "greater", "two-sided")


# ----- summaries over seeds ------------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of the finite values: with them sorted, x_lo + (x_hi - x_lo) (p - lo) at the
    position p = q (m - 1) (nan when there are none)."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return float("nan")
    position = q * (len(finite) - 1)
    low = math.floor(position)
    high = min(low + 1, len(finite) - 1)
    return finite[low] + (finite[high] - finite[low]) * (position - low)


def band(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, 25% quantile, 75% quantile) of the finite values over seeds (``quantile``)."""
    return quantile(values, 0.5), quantile(values, 0.25), quantile(values, 0.75)


def interquartile(per_seed: Sequence[Sequence[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per position: (median, 25% quantile, 75% quantile) over the seeds' curves (seeds x positions), ``band`` of each
    column."""
    per_x = [list(v) for v in zip(*per_seed)]
    return ([quantile(v, 0.5) for v in per_x], [quantile(v, 0.25) for v in per_x],
            [quantile(v, 0.75) for v in per_x])


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count) of all the values, infinities included
    (``statistics.median``); nan when there are none."""
    return statistics.median(values) if len(values) else math.nan


# ----- exact tests ---------------------------------------------------------------------------------------------------


def sign_test_p(hits: int, trials: int) -> float:
    """One-sided exact sign test.

    p = P(X >= hits) for X ~ Binomial(trials, 1/2), that is sum_{i = hits}^{trials} C(trials, i) / 2^trials.

    Parameters
    ----------
    hits : int
        Trials on the claimed side (seeds whose value lies there).
    trials : int
        All trials (seeds), ``0 <= hits <= trials``.

    Returns
    -------
    float
        The p-value; 1 when there are no trials.
    """
    if trials == 0:
        return 1.0
    return sum(math.comb(trials, i) for i in range(hits, trials + 1)) / 2**trials


def midranks(values: Sequence[float]) -> list[float]:
    """Ranks with ties averaged.

    Sorted ascending, the values at positions s..e (1-based) that are equal all get the rank (s + e) / 2.

    Parameters
    ----------
    values : sequence of float
        Any comparable values (+inf allowed; NaN is not ordered and must not occur).

    Returns
    -------
    list of float
        The rank of each value in 1..N, in the order of ``values``.
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def rank_sum_p(a: Sequence[float], b: Sequence[float], alternative: str) -> float:
    """Exact Mann-Whitney (Wilcoxon rank-sum) test.

    W = sum of a's midranks in the pooled sample, against its distribution over all C(N, len(a)) equally likely
    splits of the pooled midranks: "less" P(W <= w), "greater" P(W >= w), "two-sided" min(1, 2 min(less, greater)).

    Parameters
    ----------
    a, b : sequence of float
        The two samples (ties and +inf allowed).
    alternative : {"less", "greater", "two-sided"}
        "less": a tends lower than b; "greater": a tends higher.

    Returns
    -------
    float
        The p-value; 1 when a sample is empty.

    Raises
    ------
    InvalidInput
        For another ``alternative``.
    """
    if alternative not in ALTERNATIVES:
        raise InvalidInput(f"alternative must be 'less', 'greater' or 'two-sided', got {alternative!r}")
    if not a or not b:
        return 1.0
    doubled = [round(2 * rank) for rank in midranks([*a, *b])]  # midranks are multiples of 1/2
    observed = sum(doubled[: len(a)])
    counts: list[dict[int, int]] = [{0: 1}] + [{} for _ in a]  # counts[j][s]: subsets of size j, doubled sum s
    for rank in doubled:
        for size in range(len(a), 0, -1):
            for total, ways in counts[size - 1].items():
                counts[size][total + rank] = counts[size].get(total + rank, 0) + ways
    splits = math.comb(len(doubled), len(a))
    lower = sum(ways for total, ways in counts[len(a)].items() if total <= observed) / splits
    upper = sum(ways for total, ways in counts[len(a)].items() if total >= observed) / splits
    return {"less": lower, "greater": upper, "two-sided": min(1.0, 2 * min(lower, upper))}[alternative]


def smallest_rank_sum_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value the exact rank-sum test can give for samples of these sizes.

    Complete separation without ties is the most extreme of the C(n_a + n_b, n_a) splits: p = min(1, 2 / C(n_a + n_b,
    n_a)). A rule that needs p below this can never reject.

    Parameters
    ----------
    n_a, n_b : int
        The sample sizes, at least 1 each.

    Returns
    -------
    float
        The p-value of ``rank_sum_p(a, b, "two-sided")`` when every value of a lies below every value of b.
    """
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def equivalence_p(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """Exact rank-sum equivalence test (two one-sided tests, TOST) of a shift within +-margin.

    H0: a is shifted from b by at least ``margin`` (either way); H1: by less. p = max(P_less, P_greater) with
    P_less = ``rank_sum_p(a, b + margin, "less")`` (a lies below b shifted up) and P_greater = ``rank_sum_p(a, b -
    margin, "greater")`` (a lies above b shifted down); equivalence at level alpha when p <= alpha.

    Parameters
    ----------
    a, b : sequence of float
        The two samples (ties and +inf allowed; +inf is never within a margin of a finite value).
    margin : float
        The equivalence margin, > 0, in the samples' units.

    Returns
    -------
    float
        The TOST p-value.
    """
    if not margin > 0:
        raise InvalidInput(f"margin must be > 0, got {margin!r}")
    below = rank_sum_p(a, [value + margin for value in b], "less")
    above = rank_sum_p(a, [value - margin for value in b], "greater")
    return max(below, above)


def beyond_margin_p(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """Exact two-sided rank-sum test of a shift larger than ``margin`` (either way): the converse of
    :func:`equivalence_p`.

    p = min(1, 2 min(P_up, P_down)) with P_up = ``rank_sum_p(a, b + margin, "greater")`` (a lies above b by more than
    the margin) and P_down = ``rank_sum_p(a, b - margin, "less")`` (below it by more).

    Parameters
    ----------
    a, b : sequence of float
        The two samples (ties and +inf allowed).
    margin : float
        The margin, > 0, in the samples' units.

    Returns
    -------
    float
        The two-sided p-value.
    """
    if not margin > 0:
        raise InvalidInput(f"margin must be > 0, got {margin!r}")
    up = rank_sum_p(a, [value + margin for value in b], "greater")
    down = rank_sum_p(a, [value - margin for value in b], "less")
    return min(1.0, 2 * min(up, down))


def fisher_greater_p(hits_a: int, n_a: int, hits_b: int, n_b: int) -> float:
    """One-sided exact Fisher test that group a has the higher rate.

    p = P(X >= hits_a) for X hypergeometric: n_a draws from n_a + n_b items of which hits_a + hits_b are marked,
    that is sum_{x >= hits_a} C(marked, x) C(total - marked, n_a - x) / C(total, n_a).

    Parameters
    ----------
    hits_a, n_a : int
        Marked items (unstable seeds) and all items of group a.
    hits_b, n_b : int
        The same of group b.

    Returns
    -------
    float
        The p-value; 1 when a group is empty.
    """
    total, marked = n_a + n_b, hits_a + hits_b
    if n_a == 0 or n_b == 0:
        return 1.0
    tail = sum(math.comb(marked, x) * math.comb(total - marked, n_a - x) for x in range(hits_a, min(marked, n_a) + 1))
    return tail / math.comb(total, n_a)
