"""A learned model checks its answer against Lloyd's from the same start (``LearnedWorseThanLloyd``; the learned model
alone, ``lloyd_steps=0``, where a test is about its own answer: ``best`` recommends Lloyd steps after its own), the
estimator
warns as scikit-learn does when it finds fewer distinct clusters than asked (``ConvergenceWarning``), and its
``random_state``, ``n_init`` and ``steps`` are bounded with messages that name them.

The Lloyd inertias the estimator reports are checked against scikit-learn's ``KMeans`` run from the same start for the
same number of iterations (``n_init=1``, ``max_iter=steps``, ``tol=0``)."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning

import interp
from interp._checks import InvalidInput, InvalidInputType
from interp.estimator import LEARNED_MARGIN, InContextKMeans, LearnedWorseThanLloyd
from interp.tasks import TaskConfig, sample_tasks

STEPS = 20  # the estimator's default


def _fit(estimator, X):
    """``estimator.fit(X)`` and every warning it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X)
    return estimator, caught


def _of(caught, category):
    return [w for w in caught if issubclass(w.category, category)]


def _sklearn_inertia(X, init, steps=STEPS):
    """Lloyd's inertia after ``steps`` iterations from ``init`` by scikit-learn (the known-good figure)."""
    return KMeans(len(init), init=init, n_init=1, max_iter=steps, tol=0, algorithm="lloyd").fit(X).inertia_


def _by_hand_inertia(X, centres):
    return float(((X[:, None, :] - centres[None]) ** 2).sum(-1).min(1).sum())


# ----- the learned model checks itself against Lloyd --------------------------------------------------------------
def test_the_warning_is_exported():
    assert interp.LearnedWorseThanLloyd is LearnedWorseThanLloyd
    assert issubclass(LearnedWorseThanLloyd, UserWarning)


def test_best_on_wine_warns_with_the_ratio_to_lloyd_from_the_same_start():
    """Wine (13 features, scales from 0.1 to 1,000) is far from the training tasks: ``best`` ends at many times
    Lloyd's inertia from the same start, and says so."""
    X = load_wine().data  # (178, 13)
    init, _ = kmeans_plusplus(X, 10, random_state=0)
    fitted, caught = _fit(InContextKMeans(10, model="best", init=init, random_state=0, lloyd_steps=0), X)
    lloyd = _sklearn_inertia(X, init)
    assert fitted.lloyd_inertia_ == pytest.approx(lloyd, rel=1e-9)
    assert fitted.inertia_ == pytest.approx(_by_hand_inertia(X, fitted.cluster_centers_), rel=1e-9)
    ratio = fitted.inertia_ / lloyd
    assert fitted.inertia_ratio_ == pytest.approx(ratio, rel=1e-9)
    assert ratio > 5  # measured: 17x from the estimator's default start
    worse = _of(caught, LearnedWorseThanLloyd)
    assert len(worse) == 1
    message = str(worse[0].message)
    assert f"{ratio:.3g}" in message and "model='lloyd'" in message and f"{LEARNED_MARGIN:g}" in message, message


def test_n_equal_to_k_distinct_points_warns():
    """n = k = 10 distinct points: Lloyd from any start of distinct points is exact (inertia 0); ``best`` is not."""
    X = np.random.default_rng(0).normal(size=(10, 3))
    fitted, caught = _fit(InContextKMeans(10, model="best", init=X.copy(), random_state=0, lloyd_steps=0), X)
    assert fitted.lloyd_inertia_ == pytest.approx(0.0, abs=1e-20)
    assert fitted.inertia_ > 1e-3 and fitted.inertia_ratio_ == np.inf
    assert len(_of(caught, LearnedWorseThanLloyd)) == 1


@pytest.fixture(scope="module")
def main_tasks():
    """8 tasks of the training distribution (TaskConfig(n=512, d=32, k=10)) in float64."""
    return sample_tasks(TaskConfig(n=512, d=32, k=10), 8, 20270101).points.double().numpy()


def test_no_warning_on_tasks_of_the_training_distribution(main_tasks):
    for X in main_tasks:
        init, _ = kmeans_plusplus(X, 10, random_state=1)
        fitted, caught = _fit(InContextKMeans(10, model="best", init=init, random_state=0, lloyd_steps=0), X)
        assert _of(caught, LearnedWorseThanLloyd) == []
        assert fitted.lloyd_inertia_ == pytest.approx(_sklearn_inertia(X, init), rel=1e-9)
        assert fitted.inertia_ratio_ <= LEARNED_MARGIN


def test_several_runs_compare_the_best_learned_with_the_best_lloyd_from_the_same_starts():
    """n_init runs: ``lloyd_inertia_`` is the lowest Lloyd inertia from the same starts, which is what
    ``model="lloyd"`` with the same ``random_state`` and ``n_init`` finds."""
    X = load_wine().data
    learned, caught = _fit(InContextKMeans(10, model="best", n_init=3, random_state=4, lloyd_steps=0), X)
    lloyd = InContextKMeans(10, model="lloyd", n_init=3, random_state=4).fit(X)
    assert learned.lloyd_inertia_ == pytest.approx(lloyd.inertia_, rel=1e-9)
    assert learned.inertia_ratio_ == pytest.approx(learned.inertia_ / lloyd.inertia_, rel=1e-9)
    assert len(_of(caught, LearnedWorseThanLloyd)) == 1


def test_lloyd_reports_itself():
    X = load_wine().data
    fitted, caught = _fit(InContextKMeans(10, random_state=0), X)
    assert fitted.lloyd_inertia_ == fitted.inertia_ and fitted.inertia_ratio_ == 1.0
    assert _of(caught, LearnedWorseThanLloyd) == []


# ----- fewer distinct clusters than asked, as scikit-learn warns -----------------------------------------------------
def _duplicated():
    """5 distinct points, each 20 times: at most 5 distinct clusters for k = 10."""
    return np.repeat(np.random.default_rng(3).normal(size=(5, 2)), 20, axis=0)


def _sklearn_message(X, k):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        KMeans(k, n_init=1, random_state=0).fit(X)
    return [str(w.message) for w in _of(caught, ConvergenceWarning)]


@pytest.mark.parametrize("model", ["lloyd", "best"])
def test_duplicated_points_warn_as_sklearn_does(model):
    X = _duplicated()
    theirs = _sklearn_message(X, 10)
    assert theirs == ["Number of distinct clusters (5) found smaller than n_clusters (10). Possibly due to "
                      "duplicate points in X."]
    fitted, caught = _fit(InContextKMeans(10, model=model, random_state=0), X)
    ours = [str(w.message) for w in _of(caught, ConvergenceWarning)]
    assert len(np.unique(fitted.labels_)) == 5
    assert ours == theirs


def test_empty_clusters_on_distinct_points_say_so():
    """A learned model on wine leaves some centres nearest to no point although X has no duplicates: the warning
    says so rather than blaming duplicates."""
    X = load_wine().data
    fitted, caught = _fit(InContextKMeans(10, model="best", random_state=0, lloyd_steps=0), X)
    nearest = ((X[:, None, :] - fitted.cluster_centers_[None]) ** 2).sum(-1).argmin(1)  # by hand
    found = len(np.unique(nearest))
    assert found < 9 and len(np.unique(X, axis=0)) == len(X)  # measured: 8
    assert [str(w.message) for w in _of(caught, ConvergenceWarning)] == [
        f"Number of distinct clusters ({found}) found smaller than n_clusters (10), though X has at least 10 "
        f"distinct points: {10 - found} centres are the nearest centre of no point"]


def test_distinct_rows_are_counted_in_blocks(monkeypatch):
    from interp import estimator

    monkeypatch.setattr(estimator, "_CHUNK", 4)  # blocks of 2 rows of 2 features
    rows = np.array([[0.0, 1.0], [-0.0, 1.0], [0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [2.0, 3.0], [5.0, 5.0]])
    assert estimator._has_distinct_rows(rows, 3) and not estimator._has_distinct_rows(rows[:6], 3)
    assert estimator._has_distinct_rows(rows[:6], 2) and not estimator._has_distinct_rows(rows[:3], 2)


def test_distinct_clusters_do_not_warn():
    X = np.random.default_rng(0).normal(size=(10, 3))  # n = k = 10 distinct points: 10 clusters
    assert _sklearn_message(X, 10) == []
    _, caught = _fit(InContextKMeans(10, random_state=0), X)
    assert _of(caught, ConvergenceWarning) == []


# ----- random_state, n_init and steps ----------------------------------------------------------------------------
X_SMALL = np.random.default_rng(1).normal(size=(30, 2))


@pytest.mark.parametrize("value, error", [(-1, InvalidInput), (2**32, InvalidInput), ("abc", InvalidInputType),
                                          (1.5, InvalidInputType), (True, InvalidInputType),
                                          (np.random.default_rng(0), InvalidInputType)])
def test_bad_random_state_is_refused_naming_it(value, error):
    with pytest.raises(error, match=r"^random_state must be None, an int in \[0, 2\*\*32 - 1\] or a "
                                    r"numpy\.random\.RandomState, got "):
        InContextKMeans(3, random_state=value).fit(X_SMALL)


@pytest.mark.parametrize("value", [0, 2**32 - 1, np.int64(5), None, np.random.RandomState(2)])
def test_good_random_states_are_taken(value):
    InContextKMeans(3, random_state=value, steps=2).fit(X_SMALL)


def test_n_init_is_bounded():
    with pytest.raises(InvalidInput, match=r"^n_init must be at most 1,000, got 1,001$"):
        InContextKMeans(3, n_init=1001).fit(X_SMALL)
    InContextKMeans(3, n_init=1000, steps=1, random_state=0).fit(X_SMALL)


@pytest.mark.parametrize("name", ["steps", "n_steps"])
def test_a_huge_step_count_is_refused_at_once(name):
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # n_steps is the old name
        with pytest.raises(InvalidInput, match=rf"^{name} must be at most 10,000, got 1,000,000,000$"):
            InContextKMeans(3, **{name: 10**9}).fit(X_SMALL)
    assert time.perf_counter() - started < 1.0


# ----- the margin and its documentation come from the committed measurements ----------------------------------------
def _measured():
    from analyses.studies.learned_vs_lloyd import measure as learned_vs_lloyd

    return learned_vs_lloyd, json.loads(learned_vs_lloyd.OUT.read_text())


def test_the_margin_is_the_measured_one():
    """The committed measurements were taken at the estimator's margin, and at it the warning is (almost) silent on
    the training distribution and fires on the hostile cases other than digits."""
    _, results = _measured()
    assert results["settings"]["margin"] == LEARNED_MARGIN and results["settings"]["tasks"] >= 200
    assert results["summary"]["main_warned"] <= 0.01
    assert results["models"]["best"]["main"]["warned"] == 0.0
    for case, share in results["summary"]["hostile_warned_by_case"].items():
        assert share >= (0.0 if case == "digits_pca32" else 0.95), case


def test_the_docs_show_the_generated_tables():
    module, results = _measured()
    page = (Path(__file__).resolve().parents[1] / "docs" / "learned_model.md").read_text()
    assert module.tables(results) in page


def test_the_script_refuses_bad_options_in_one_line(tmp_path, capsys):
    from interp import _arguments as arguments

    module, _ = _measured()
    for argv, needle in [(["--out", str(tmp_path / "no" / "x.json")], "--out "),
                         (["--from-json", "--out", str(tmp_path / "x.json")], "--from-json reads --out"),
                         (["--tasks", "0"], "argument --tasks: expected an integer >= 1, got 0"),
                         (["--hostile-seeds", "1001"], "argument --hostile-seeds: expected an integer from 1 to")]:
        try:
            code = arguments.run(module.main, module.PROG, argv)
        except SystemExit as stop:  # argparse's refusal
            code = stop.code
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert code == 2 and error.startswith(f"{module.PROG}: error: ") and needle in error, (argv, error)
    assert not (tmp_path / "no").exists()


def test_the_script_writes_what_the_tables_read(tmp_path):  # about 3 s: 5 models x (2 + 7) fits
    module, _ = _measured()
    out = tmp_path / "small.json"
    results = module.main(["--tasks", "2", "--hostile-seeds", "1", "--out", str(out)])
    written = json.loads(out.read_text())
    assert set(written["models"]) == set(module.MODELS) and written["settings"]["tasks"] == 2
    for model in written["models"].values():
        assert set(model["hostile"]) == set(module.HOSTILE) and len(model["hostile"]["wine"]["ratios"]) == 1
        assert model["hostile"]["wine"]["warned"] == 1.0  # every model is far worse than Lloyd on wine
    assert module.tables(written) == module.tables(json.loads(json.dumps(results, default=str)))
