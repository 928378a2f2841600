"""``TransformerKMeans``: a scikit-learn clusterer whose iterations are run by a k-means transformer.

    TransformerKMeans(n_clusters=8, *, model="lloyd", n_steps=20, init="k-means++", n_init=1, random_state=None)

``model="lloyd"`` is the exact construction (paper 1, Thm 2.1; one-hot, gamma = inf, float64): one shared layer run
``n_steps`` times, i.e. ``n_steps`` Lloyd iterations, for any d and n_clusters. A shipped name
(``"main-onehot"``, ``"main-binary"``, ``"main-none"``) or a checkpoint path is a learned model: it serves only
``n_clusters == model.config.k`` and data with at most ``model.config.d`` features (the rest are zero-padded),
and runs re-embedded steps as it was evaluated (paper 2, App. C; docs/evaluation.md).

Data are mapped to the unit cube the models assume (docs/learned_model.md) by ``(X - X.min(0)) / scale`` with ONE scale
for all features, the largest per-feature span of the training data (1 if every feature is constant): every
feature then lies in [0, 1] and the widest fills it. A common scale is a similarity transform, so the k-means
problem is unchanged ("any k-means instance maps to [0,1]^d by translation and scaling without changing the
problem", paper 2, App. D) and ``model="lloyd"`` equals ``sklearn.cluster.KMeans`` on X from the same start as long
as no cluster empties (the construction then puts an empty centre at the mean of all points, where scikit-learn
relocates far points; README "Decisions").
(Per-feature min-max, as the training tasks were scaled, would re-weight the features and cluster a different
problem.) So a learned model only ever sees data inside the unit cube it was trained on, whatever the scale or
offset of X (called directly on data outside [-0.5, 1.5]^d, a learned model warns ``OutOfTrainingRange``). The
fitted centres are mapped back, and ``predict``, ``transform`` and ``score`` work in the original space, like
:class:`sklearn.cluster.KMeans`:

* ``cluster_centers_`` (n_clusters, n_features): the model's centres after ``n_steps`` steps, original space;
* ``labels_``: nearest centre of each training point (ties to the lowest index), consistent with the centres;
* ``inertia_``: sum of squared distances of the training points to their nearest centre;
* ``n_iter_`` = ``n_steps`` (the model always runs all its steps, no early stopping);
* ``transform(X)``: Euclidean distances to the centres; ``score(X)`` = minus the inertia of X.

``init``: ``"k-means++"`` / ``"random"`` (:func:`interp.tasks.init_centroids`, seeded from ``random_state``) or
an (n_clusters, n_features) array in the original space. ``n_init`` runs (one batch) keep the lowest inertia
(the first run within 1e-10 relative of it); with an array init only one run is made (warning), as scikit-learn
does.

The default ``n_clusters=8`` is scikit-learn's; ``fit`` refuses fewer samples than clusters with a clear
``ValueError`` (as KMeans). The construction passes every scikit-learn estimator check. scikit-learn 1.9 has no
estimator tag for checks that cannot apply (the old ``_xfail_checks`` tag is gone); its mechanism is
``check_estimator(..., expected_failed_checks=...)``, and :func:`expected_failed_checks` gives that dict with the
reasons: for a learned checkpoint, the checks that force n_clusters to 1, 2 or 3.
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from interp._checks import InvalidInput, InvalidInputType
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, resolve
from interp.model.constructions import lloyd_transformer
from interp.tasks import init_centroids

INITS = {"k-means++": "kmeans++", "random": "random"}
_CHUNK = 1 << 22  # floats per distance block (n_chunk * k * d)


@functools.lru_cache(maxsize=8)
def _construction(d: int, k: int) -> KMeansTransformer:
    """The exact one-hot construction (one shared layer, float64, gamma = inf); cached per (d, k)."""
    return lloyd_transformer(d, k, n_layers=1, embedding="onehot", dtype=torch.float64)


@functools.lru_cache(maxsize=8)
def _checkpoint(path: str, mtime_ns: int, size: int) -> KMeansTransformer:
    """A loaded checkpoint, cached per (path, modification time, size)."""
    return load_model(path)


def _load(model: object) -> KMeansTransformer:
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidInputType(
            f"model must be 'lloyd', a shipped checkpoint name or a path, got {type(model).__name__}")
    path = resolve(model)
    stat = Path(path).stat()
    return _checkpoint(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


def _squared_distances(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """||x_i - c_j||^2 (n, k) from direct differences (no cancellation for data far from the origin)."""
    n, d = X.shape
    k = centers.shape[0]
    out = np.empty((n, k), dtype=np.float64)
    step = max(1, _CHUNK // max(1, k * d))
    for start in range(0, n, step):
        block = X[start : start + step, None, :] - centers[None, :, :]  # (m, k, d)
        out[start : start + step] = np.einsum("mkd,mkd->mk", block, block)
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


class TransformerKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """K-means clustering by a k-means transformer (exact construction or a learned checkpoint).

    Parameters
    ----------
    n_clusters : int, default 8
        Number of clusters. A learned checkpoint serves only its own k (10 for the shipped models).
    model : "lloyd", shipped checkpoint name or path, default "lloyd"
        ``"lloyd"``: the exact construction (= Lloyd's algorithm). Otherwise a learned model, loaded with
        :func:`interp.model.checkpoint.load_model` (safetensors, never unpickled).
    n_steps : int, default 20
        Transformer steps (layers / Lloyd iterations).
    init : "k-means++", "random" or array of shape (n_clusters, n_features), default "k-means++"
    n_init : int, default 1
        Runs from different initialisations; the lowest inertia wins.
    random_state : None, int or numpy RandomState
        Seeds the initialisation.
    """

    def __init__(self, n_clusters=8, *, model="lloyd", n_steps=20, init="k-means++", n_init=1, random_state=None):
        self.n_clusters = n_clusters
        self.model = model
        self.n_steps = n_steps
        self.init = init
        self.n_init = n_init
        self.random_state = random_state

    # ----- validation --------------------------------------------------------------------------------
    def _check_params(self) -> None:
        if not _is_int(self.n_clusters) or self.n_clusters < 1:
            raise InvalidInput(f"n_clusters must be an integer >= 1, got {self.n_clusters!r}")
        if not _is_int(self.n_steps) or self.n_steps < 1:
            raise InvalidInput(f"n_steps must be an integer >= 1, got {self.n_steps!r}")
        if not _is_int(self.n_init) or self.n_init < 1:
            raise InvalidInput(f"n_init must be an integer >= 1, got {self.n_init!r}")
        if isinstance(self.init, str):
            if self.init not in INITS:
                raise InvalidInput(f"init must be 'k-means++', 'random' or an array of shape (n_clusters, n_features), "
                                 f"got {self.init!r}")
        elif not hasattr(self.init, "__array__") and not isinstance(self.init, (list, tuple)):
            raise InvalidInputType(f"init must be 'k-means++', 'random' or an array of shape (n_clusters, n_features), "
                            f"got {type(self.init).__name__}")
        if not (isinstance(self.model, (str, os.PathLike))):
            raise InvalidInputType("model must be 'lloyd', a shipped checkpoint name or a path, "
                            f"got {type(self.model).__name__}")

    def _get_model(self, n_features: int) -> KMeansTransformer:
        """The transformer serving (n_features, n_clusters), or a clear ValueError when it cannot."""
        if self.model == "lloyd":
            return _construction(n_features, int(self.n_clusters))
        model = _load(self.model)
        config = model.config
        if self.n_clusters != config.k:
            raise InvalidInput(f"model {str(self.model)!r} serves only n_clusters={config.k}, got n_clusters="
                             f"{self.n_clusters}; use model='lloyd' for any number of clusters")
        if n_features > config.d:
            raise InvalidInput(f"model {str(self.model)!r} serves data of dimension at most d={config.d} (fewer are "
                             f"zero-padded), but X has {n_features} features; use model='lloyd' for any dimension")
        return model

    def _check_init_array(self, n_features: int) -> np.ndarray:
        init = check_array(self.init, dtype=np.float64, input_name="init")
        if init.shape != (self.n_clusters, n_features):
            raise InvalidInput("init array must have shape (n_clusters, n_features) = "
                             f"({self.n_clusters}, {n_features}), got {init.shape}")
        return init

    # ----- fitting -------------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Cluster X (n_samples, n_features); y is ignored. Returns self."""
        self._check_params()
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=1)
        n_samples, n_features = X.shape
        if n_samples < self.n_clusters:
            raise InvalidInput(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        model = self._get_model(n_features)
        array_init = None if isinstance(self.init, str) else self._check_init_array(n_features)
        n_init = self.n_init
        if array_init is not None and n_init != 1:
            warnings.warn(f"Explicit initial center position passed: performing only one init in "
                          f"{type(self).__name__} instead of n_init={n_init}.", RuntimeWarning, stacklevel=2)
            n_init = 1
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

        # the unit cube the models assume: shift by the per-feature minimum, divide by the largest span (one scale
        # for every feature keeps the k-means problem; all features constant: scale 1)
        low = X.min(axis=0)
        with np.errstate(over="ignore"):
            span = float((X.max(axis=0) - low).max())
        if not np.isfinite(span):
            raise InvalidInput("X spans more than the float64 range in some feature (max - min overflows); rescale X")
        span = span if span > 0 else 1.0
        cube = (X - low) / span  # (n, d) in [0, 1]

        config = model.config
        dtype = model.codes.dtype
        width = config.d  # zero-pad features up to the model's d (the construction is built for n_features)
        points = torch.zeros((1, n_samples, width), dtype=torch.float64)
        points[0, :, :n_features] = torch.from_numpy(cube)
        points = points.expand(n_init, -1, -1).contiguous()  # (r, n, D)
        if array_init is None:
            generator = torch.Generator().manual_seed(seed)
            start = init_centroids(points[..., :n_features], int(self.n_clusters), INITS[self.init], generator)
        else:
            start = torch.from_numpy((array_init - low) / span)[None]  # (1, k, d)
        init = torch.zeros((n_init, int(self.n_clusters), width), dtype=torch.float64)
        init[..., :n_features] = start
        with torch.no_grad():
            out = model(points.to(dtype), init.to(dtype), steps=int(self.n_steps))
        centers = out.centroids[..., :n_features].to(torch.float64).numpy() * span + low  # (r, k, d)
        if not np.all(np.isfinite(centers)):
            raise InvalidInput(f"model {str(self.model)!r} produced non-finite centroids on this data")

        # the lowest inertia wins; runs within rounding (1e-10 relative) of it count as tied and the first is taken,
        # so that translating or scaling X cannot swap two runs that found the same partition in another order
        inertias = np.array([_squared_distances(X, centers[run]).min(axis=1).sum() for run in range(n_init)])
        best = int(np.flatnonzero(inertias <= inertias.min() * (1 + 1e-10))[0])
        self.cluster_centers_ = np.ascontiguousarray(centers[best])
        distances = _squared_distances(X, self.cluster_centers_)
        self.labels_ = distances.argmin(axis=1).astype(np.int64)
        self.inertia_ = float(distances.min(axis=1).sum())
        self.n_iter_ = int(self.n_steps)
        self._n_features_out = self.cluster_centers_.shape[0]
        return self

    # ----- inference -----------------------------------------------------------------------------------
    def _validated(self, X) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, X, dtype=np.float64, reset=False)

    def predict(self, X):
        """Index of the nearest fitted centre (ties to the lowest index), shape (n_samples,)."""
        return _squared_distances(self._validated(X), self.cluster_centers_).argmin(axis=1).astype(np.int64)

    def transform(self, X):
        """Euclidean distances to the fitted centres, shape (n_samples, n_clusters)."""
        return np.sqrt(_squared_distances(self._validated(X), self.cluster_centers_))

    def score(self, X, y=None):
        """Minus the k-means objective of X at the fitted centres (higher is better)."""
        return -float(_squared_distances(self._validated(X), self.cluster_centers_).min(axis=1).sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # dense data only: the transformers take dense point tokens
        tags.input_tags.allow_nan = False  # NaN / inf are rejected with a clear error
        tags.transformer_tags.preserves_dtype = ["float64"]  # computed and returned in float64
        return tags


# scikit-learn checks that set n_clusters to 1, 2 or 3 (or need such a clustering to be good)
_FORCED_N_CLUSTERS = {
    "check_dont_overwrite_parameters": "sets n_clusters=1",
    "check_fit2d_1sample": "sets n_clusters=1",
    "check_fit2d_1feature": "sets n_clusters=1",
    "check_fit2d_predict1d": "sets n_clusters=1",
    "check_methods_subset_invariance": "sets n_clusters=1",
    "check_methods_sample_order_invariance": "sets n_clusters=2",
    "check_clustering": "sets n_clusters=3 (and scores the clustering of 3 blobs)",
}


def expected_failed_checks(estimator: TransformerKMeans) -> dict[str, str]:
    """The scikit-learn estimator checks that cannot apply to ``estimator``, with the reason (for
    ``check_estimator(..., expected_failed_checks=...)`` / ``parametrize_with_checks``).

    None for ``model="lloyd"``. A learned checkpoint serves only its own k, and these checks force
    ``n_clusters`` to 1, 2 or 3, so ``fit`` refuses (a clear ValueError naming n_clusters), by design.
    """
    if estimator.model == "lloyd":
        return {}
    reason = "a learned checkpoint serves only its own n_clusters (its k); this check {}"
    return {name: reason.format(what) for name, what in _FORCED_N_CLUSTERS.items()}
