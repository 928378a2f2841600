"""The comparison's pieces against hand computations and scikit-learn: ``interp.compare.paired_summary`` (mean ± SE,
paired differences, medians, shares won), the batched k-means++ starts (``interp.algorithms.kmeans_plusplus``, plain
and greedy, against ``sklearn.cluster.kmeans_plusplus``'s distribution of seeding costs), Lloyd to convergence
(against scikit-learn's KMeans with tol = 0 from the same start), and scikit-learn timed in a process without torch."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from interp._checks import InvalidInput
from interp.algorithms import kmeans_objective, kmeans_plusplus, lloyd, lloyd_until_converged
from interp.compare import paired_markdown, paired_summary, sklearn_in_fresh_process
from interp.tasks import TaskConfig, init_centroids, sample_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_paired_summary_by_hand():
    rows = paired_summary({"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 2.0, 1.0, 5.0]}, ["b"],
                          {"a": [3.0, 1.0, 2.0], "b": []})
    a, b = rows
    # a: mean 2.5, sd sqrt(5/3), se sqrt(5/3)/2; d = a - b = (-1, 0, 2, -1): mean 0, sd sqrt(6/3) = sqrt(2)
    assert a["name"] == "a" and a["tasks"] == 4 and a["mean"] == 2.5
    assert a["se"] == pytest.approx(math.sqrt(5 / 3) / 2)
    assert a["minus_b"] == 0.0 and a["minus_b_se"] == pytest.approx(math.sqrt(2) / 2)
    assert a["minus_b_median"] == -0.5  # the two middle differences, -1 and 0
    assert (a["won_vs_b"], a["tied_with_b"]) == (0.5, 0.25)
    assert a["time_s"] == 2.0 and a["times_s"] == [3.0, 1.0, 2.0]
    assert (b["minus_b"], b["minus_b_se"], b["won_vs_b"], b["tied_with_b"]) == (0.0, 0.0, 0.0, 1.0)
    assert math.isnan(b["time_s"])
    tolerant = paired_summary({"a": [1.0, 2.0, 3.0, 4.0], "b": [1.5, 2.0, 1.0, 4.0 + 1e-9]}, ["b"], tie=1e-6)[0]
    assert (tolerant["won_vs_b"], tolerant["tied_with_b"]) == (0.25, 0.5)  # -0.5 won; 0 and -1e-9 tied
    table = paired_markdown(rows, ["b"], {"a": "A"})
    assert "| A | 2.5000 ± 0.6455 | +0.0000 ± 0.7071 | -0.5000 | 50.0% | 2.00 |" in table


@pytest.mark.parametrize("values, references, needle", [
    ({"a": [1.0, 2.0], "b": [1.0]}, ["a"], "one value per task"),
    ({"a": [1.0, float("nan")]}, ["a"], "NaN"),
    ({"a": [1.0, 2.0]}, ["c"], "reference 'c' is not one of the algorithms"),
    ({}, [], "at least one algorithm"),
])
def test_paired_summary_refuses_what_cannot_be_paired(values, references, needle):
    with pytest.raises(InvalidInput, match=needle):
        paired_summary(values, references)
    with pytest.raises(InvalidInput, match="tie must be a finite number >= 0"):
        paired_summary({"a": [1.0]}, ["a"], tie=-1.0)


def seeding_costs(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """ln Phi of each task (V,) at its centres, in NumPy."""
    return np.log(((points[:, :, None, :] - centres[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1))


@pytest.mark.parametrize("local_trials", [1, None])
def test_kmeans_plusplus_draws_sklearns_distribution_of_seeding_costs(local_trials):
    """Over 300 tasks (one draw each) the seeding cost ln Phi of the starts has scikit-learn's distribution: a
    two-sample Kolmogorov-Smirnov test does not reject at 0.001, and the means agree within 3 standard errors."""
    from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus

    points = sample_tasks(TaskConfig(n=128, d=4, k=6), 300, 11, dtype=torch.float64).points
    ours = kmeans_plusplus(points, 6, generator=12, local_trials=local_trials).numpy()
    theirs = np.stack([sklearn_kmeans_plusplus(task, 6, random_state=index, n_local_trials=local_trials)[0]
                       for index, task in enumerate(points.numpy())])
    a, b = seeding_costs(points.numpy(), ours), seeding_costs(points.numpy(), theirs)
    assert stats.ks_2samp(a, b).pvalue > 1e-3
    assert abs(a.mean() - b.mean()) < 3 * math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))


def test_greedy_starts_are_better_and_plain_ones_are_init_centroids_distribution():
    points = sample_tasks(TaskConfig(n=128, d=4, k=6), 300, 13, dtype=torch.float64).points
    greedy = torch.log(kmeans_objective(points, kmeans_plusplus(points, 6, generator=1)))
    plain = torch.log(kmeans_objective(points, kmeans_plusplus(points, 6, generator=2, local_trials=1)))
    reference = torch.log(kmeans_objective(points, init_centroids(points, 6, "kmeans++", 3)))
    assert greedy.mean() < plain.mean()
    assert stats.ks_2samp(plain.numpy(), reference.numpy()).pvalue > 1e-3
    rows = kmeans_plusplus(points, 6, generator=4)
    assert all(any(torch.equal(row, p) for p in points[0]) for row in rows[0])  # starts are data points


def test_lloyd_until_converged_is_sklearns_kmeans_with_tol_0():
    from sklearn.cluster import KMeans

    points = sample_tasks(TaskConfig(n=200, d=5, k=6), 8, 21, dtype=torch.float64).points
    start = init_centroids(points, 6, "random", 22)
    centres, iterations = lloyd_until_converged(points, start)
    for task in range(8):
        fitted = KMeans(6, init=start[task].numpy(), n_init=1, tol=0.0, max_iter=300).fit(points[task].numpy())
        np.testing.assert_allclose(centres[task].numpy(), fitted.cluster_centers_, atol=1e-10)
        assert iterations[task] <= fitted.n_iter_ <= iterations[task] + 1  # scikit-learn counts the checking step
    again = lloyd(points, centres, 1).centroids  # a fixed point
    assert torch.allclose(again, centres, atol=1e-12)
    steps_first = lloyd(points, start, int(iterations.max())).centroids
    assert torch.allclose(steps_first, centres, atol=1e-12)


def test_sklearn_runs_in_a_process_without_torch_and_gives_its_own_centres():
    from sklearn.cluster import KMeans

    points = sample_tasks(TaskConfig(n=64, d=3, k=4), 3, 5, dtype=torch.float64).points.numpy()
    found = sklearn_in_fresh_process(points, 4, seed=100, n_inits=(1, 2), rounds=2)
    assert found["torch_imported"] is False
    assert sorted(found["times"]) == [1, 2] and all(len(t) == 2 and min(t) > 0 for t in found["times"].values())
    for n_init in (1, 2):
        expected = np.stack([KMeans(4, init="k-means++", n_init=n_init, random_state=100 + index).fit(task)
                             .cluster_centers_ for index, task in enumerate(points)])
        np.testing.assert_array_equal(found["centres"][n_init], expected)
    assert all(pool["num_threads"] == 1 for pool in found["threadpools"])
