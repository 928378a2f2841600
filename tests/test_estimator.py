"""InContextKMeans (and its old name TransformerKMeans): scikit-learn's estimator checks, agreement with KMeans, the
unit-cube mapping, learned models."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.utils.estimator_checks import check_estimator

import interp
from interp.algorithms import lloyd
from interp.estimator import InContextKMeans, TransformerKMeans, expected_failed_checks

SHIPPED = "main-onehot"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def blobs(n=120, d=3, k=4, seed=0, spread=0.05):
    rng = np.random.RandomState(seed)
    centres = rng.uniform(-5, 5, size=(k, d))
    labels = rng.randint(k, size=n)
    return centres[labels] + spread * 10 * rng.standard_normal((n, d)), labels


# ----- scikit-learn conventions ---------------------------------------------------------------------------
def _run_checks(estimator):
    declared = expected_failed_checks(estimator)
    results = check_estimator(estimator, expected_failed_checks=declared, on_fail=None, on_skip=None)
    by_status = {}
    for result in results:
        by_status.setdefault(result["status"], set()).add(result["check_name"])
    return declared, by_status, results


def test_check_estimator_construction():
    declared, by_status, results = _run_checks(InContextKMeans())
    assert declared == {}
    assert not by_status.get("failed") and not by_status.get("xfail"), by_status
    # the only skip is the array-API check (needs SCIPY_ARRAY_API set)
    assert by_status.get("skipped", set()) <= {"check_array_api_input"}
    assert len(by_status["passed"]) > 35


def test_check_estimator_shipped_checkpoint():
    estimator = InContextKMeans(n_clusters=10, model=SHIPPED)
    declared, by_status, results = _run_checks(estimator)
    assert not by_status.get("failed"), [(r["check_name"], r["exception"]) for r in results if r["status"] == "failed"]
    # every declared check really cannot apply: it fails, and because of n_clusters
    assert by_status.get("xfail", set()) == set(declared)
    for result in results:
        if result["status"] == "xfail":
            assert "n_clusters" in str(result["exception"]), result
    assert all("n_clusters" in reason for reason in declared.values())


def test_exported_from_the_package():
    assert interp.InContextKMeans is InContextKMeans
    assert interp.TransformerKMeans is TransformerKMeans


def test_the_old_name_still_works_with_a_warning():
    """``TransformerKMeans`` is the old name of ``InContextKMeans``: it warns when constructed and clusters the same;
    the new name, and a clone of it, never warn."""
    X = np.random.default_rng(0).normal(size=(60, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = InContextKMeans(3, random_state=0)
        copy = clone(new)
        new.fit(X)
    assert type(copy) is InContextKMeans and copy.get_params() == new.get_params()
    with pytest.warns(FutureWarning, match=r"TransformerKMeans was renamed InContextKMeans"):
        old = TransformerKMeans(3, random_state=0)
    assert isinstance(old, InContextKMeans) and old.get_params() == new.get_params()
    np.testing.assert_array_equal(old.fit(X).labels_, new.labels_)
    with pytest.warns(FutureWarning, match="TransformerKMeans was renamed"):  # a clone keeps the old name
        assert clone(old).get_params() == new.get_params()


# ----- the construction is Lloyd ----------------------------------------------------------------------------
def test_lloyd_model_equals_sklearn_kmeans_with_the_same_init():
    X, truth = blobs(200, 3, 5, seed=1, spread=0.3)
    init = X[[np.flatnonzero(truth == j)[0] for j in range(5)]]  # one point per blob: no cluster empties
    ours = InContextKMeans(5, init=init, steps=15).fit(X)
    ref = KMeans(5, init=init, n_init=1, max_iter=15, tol=0, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-12)
    assert ours.n_iter_ == 15


def test_lloyd_model_runs_lloyd_in_the_unit_cube():
    """X -> (X - min) / (largest span), Lloyd there (interp.algorithms.lloyd), centres mapped back."""
    X, _ = blobs(150, 4, 3, seed=2)
    X[:, 2] *= 0.01  # a narrow feature: one common scale, not per-feature min-max
    init = X[[5, 70, 140]]
    low, span = X.min(0), (X.max(0) - X.min(0)).max()
    cube = torch.from_numpy((X - low) / span)[None]
    assert cube.min() == 0 and cube.max() == 1
    ref = lloyd(cube, torch.from_numpy((init - low) / span)[None], 6)
    assert not ref.any_empty
    est = InContextKMeans(3, steps=6, init=init).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.centroids[0].numpy() * span + low, rtol=0, atol=1e-12)
    # labels_ = nearest fitted centre = Lloyd's next assignment
    after = lloyd(cube, torch.from_numpy((init - low) / span)[None], 7).assignment_trajectory[0, 6].numpy()
    np.testing.assert_array_equal(est.labels_, after)


def test_fitted_attributes_are_consistent():
    X, _ = blobs(100, 2, 4, seed=3)
    est = InContextKMeans(4, random_state=0).fit(X)
    assert est.cluster_centers_.shape == (4, 2) and est.labels_.shape == (100,)
    np.testing.assert_array_equal(est.labels_, est.predict(X))
    distances = est.transform(X)
    assert distances.shape == (100, 4)
    np.testing.assert_array_equal(distances.argmin(1), est.labels_)
    assert est.inertia_ == pytest.approx((distances.min(1) ** 2).sum(), rel=1e-12)
    assert est.score(X) == pytest.approx(-est.inertia_, rel=1e-12)
    np.testing.assert_array_equal(InContextKMeans(4, random_state=0).fit_predict(X), est.labels_)
    np.testing.assert_allclose(InContextKMeans(4, random_state=0).fit_transform(X), distances)
    assert list(est.get_feature_names_out()) == [f"incontextkmeans{i}" for i in range(4)]


def test_n_init_keeps_the_best_run_and_random_state_is_reproducible():
    X, _ = blobs(200, 2, 8, seed=4, spread=0.08)
    single = InContextKMeans(8, init="random", n_init=1, steps=5, random_state=7).fit(X)
    best = InContextKMeans(8, init="random", n_init=6, steps=5, random_state=7).fit(X)
    assert best.inertia_ <= single.inertia_ + 1e-9  # run 0 of the batch is the single run (same generator draws)
    again = InContextKMeans(8, init="random", n_init=6, steps=5, random_state=7).fit(X)
    np.testing.assert_array_equal(best.cluster_centers_, again.cluster_centers_)
    rng_state = InContextKMeans(8, init="random", steps=5, random_state=np.random.RandomState(7)).fit(X)
    np.testing.assert_array_equal(rng_state.cluster_centers_, single.cluster_centers_)


def test_array_init_with_n_init_warns_and_runs_once():
    X, _ = blobs(60, 2, 3, seed=5)
    with pytest.warns(RuntimeWarning, match="only one init"):
        InContextKMeans(3, init=X[:3], n_init=4).fit(X)


def test_constant_features_and_inputs_not_mutated():
    X, _ = blobs(80, 3, 3, seed=6)
    X[:, 1] = 2.5  # constant feature: span 1, centres keep it exactly
    X_copy = X.copy()
    init = X[:3].copy()
    est = InContextKMeans(3, init=init).fit(X)
    np.testing.assert_array_equal(X, X_copy)
    np.testing.assert_array_equal(init, X_copy[:3])
    np.testing.assert_allclose(est.cluster_centers_[:, 1], 2.5, rtol=0, atol=0)


def test_pickle_round_trip_keeps_predictions():
    X, _ = blobs(60, 2, 3, seed=8)
    est = InContextKMeans(3, random_state=0).fit(X)
    copy = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(copy.predict(X), est.predict(X))


# ----- learned checkpoints ----------------------------------------------------------------------------------
def test_shipped_model_pads_dimensions_and_clusters_well():
    X, truth = blobs(300, 5, 10, seed=9, spread=0.02)
    est = InContextKMeans(10, model=SHIPPED, steps=10, random_state=0).fit(X)
    assert est.cluster_centers_.shape == (10, 5)
    # a learned model (its quality depends on the shipped snapshot): at least better than a single centre
    assert est.inertia_ < ((X - X.mean(0)) ** 2).sum()
    assert np.isfinite(est.cluster_centers_).all()
    np.testing.assert_array_equal(est.labels_, est.predict(X))


def test_shipped_model_refuses_what_it_cannot_serve():
    X, _ = blobs(100, 3, 4, seed=10)
    with pytest.raises(ValueError, match=r"serves only n_clusters=10, got n_clusters=4"):
        InContextKMeans(4, model=SHIPPED).fit(X)
    wide = np.random.RandomState(0).rand(50, 33)
    with pytest.raises(ValueError, match=r"dimension at most d=32.*33 features"):
        InContextKMeans(10, model=SHIPPED).fit(wide)


def test_a_saved_construction_loads_as_a_path(tmp_path):
    from interp.model.checkpoint import save_model
    from interp.model.constructions import lloyd_transformer

    path = save_model(tmp_path / "exact.safetensors", lloyd_transformer(4, 3, n_layers=1))
    X, _ = blobs(90, 2, 3, seed=11)
    from_path = InContextKMeans(3, model=str(path), random_state=0).fit(X)
    built = InContextKMeans(3, random_state=0).fit(X)
    # d=2 zero-padded to the saved model's d=4: the padded features stay 0, so it is still Lloyd
    np.testing.assert_allclose(from_path.cluster_centers_, built.cluster_centers_, atol=1e-12)


def test_slot_order_follows_the_checkpoint_unless_given():
    """``slot_order=None`` runs the checkpoint's recommended order: main-onehot's fixed one, "best"'s shuffled one
    (seeded from random_state); an explicit order overrides it; the construction is equivariant to it."""
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(c, 0.05, size=(40, 4)) for c in rng.uniform(0, 1, size=(10, 4))])
    fixed = InContextKMeans(10, model="main-onehot", init="random", random_state=1).fit(X)
    explicit = InContextKMeans(10, model="main-onehot", init="random", random_state=1, slot_order="fixed").fit(X)
    shuffled = InContextKMeans(10, model="main-onehot", init="random", random_state=1, slot_order="shuffle").fit(X)
    np.testing.assert_array_equal(fixed.cluster_centers_, explicit.cluster_centers_)
    assert not np.array_equal(fixed.cluster_centers_, shuffled.cluster_centers_)
    best = InContextKMeans(10, model="best", init="random", random_state=1).fit(X)
    again = InContextKMeans(10, model="best", init="random", random_state=1, slot_order="shuffle").fit(X)
    np.testing.assert_array_equal(best.cluster_centers_, again.cluster_centers_)
    lloyd_fixed = InContextKMeans(3, init="random", random_state=2).fit(X)
    lloyd_shuffled = InContextKMeans(3, init="random", random_state=2, slot_order="shuffle").fit(X)
    np.testing.assert_allclose(lloyd_shuffled.cluster_centers_, lloyd_fixed.cluster_centers_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("slot_order", ["random", 1, ["shuffle"]])
def test_bad_slot_order_is_refused(slot_order):
    with pytest.raises(ValueError, match="slot_order must be None, 'fixed' or 'shuffle'"):
        InContextKMeans(3, slot_order=slot_order).fit(np.random.default_rng(0).random((20, 2)))


def test_the_old_name_of_steps_still_works_with_a_warning():
    """``steps`` is the one name of the number of clustering steps; ``n_steps`` (estimator) and ``n_iter``
    (reference algorithms) run the same and warn."""
    from interp.algorithms import lloyd, soft_kmeans

    X, _ = blobs(200, 3, 4, seed=4)
    new = InContextKMeans(4, steps=3, random_state=0).fit(X)
    with pytest.warns(FutureWarning, match=r"n_steps=\.\.\.\) is renamed steps="):
        old = InContextKMeans(4, n_steps=3, random_state=0).fit(X)
    np.testing.assert_array_equal(new.cluster_centers_, old.cluster_centers_)
    with pytest.raises(ValueError, match="give steps= only"):
        InContextKMeans(4, steps=5, n_steps=3).fit(X)
    points = torch.from_numpy(X)[None]
    init = points[:, :4]
    for algorithm in (lloyd, soft_kmeans):
        with pytest.warns(FutureWarning, match=r"n_iter=\.\.\.\) is renamed steps="):
            renamed = algorithm(points, init, n_iter=3)
        assert torch.equal(renamed.centroids, algorithm(points, init, steps=3).centroids)
        with pytest.raises(ValueError, match="give steps= only"):
            algorithm(points, init, steps=3, n_iter=3)


def test_check_estimator_on_a_model_of_many_k():
    """any-k serves n_clusters 2 to 16: only the checks that force n_clusters=1 are declared, and they fail because of
    it; the ones that force 2 or 3 run and pass (check_clustering scores its clustering of 3 blobs)."""
    estimator = InContextKMeans(n_clusters=4, model="any-k")
    declared, by_status, results = _run_checks(estimator)
    assert not by_status.get("failed"), [(r["check_name"], r["exception"]) for r in results if r["status"] == "failed"]
    assert set(declared) == {"check_dont_overwrite_parameters", "check_fit2d_1sample", "check_fit2d_1feature",
                             "check_fit2d_predict1d", "check_methods_subset_invariance"}
    assert by_status.get("xfail", set()) == set(declared)
    assert {"check_methods_sample_order_invariance", "check_clustering"} <= by_status["passed"]
