"""``InContextKMeans``: a scikit-learn clusterer whose iterations are run by a k-means transformer (k-means computed
in context; the model it runs is :class:`interp.model.KMeansTransformer`).

    InContextKMeans(n_clusters=8, *, model="lloyd", steps=20, init="k-means++", n_init=1, random_state=None,
                    slot_order=None, lloyd_steps=None, device="cpu")

``TransformerKMeans`` is its old name: it still works, and warns (``FutureWarning``) when constructed.

``model="lloyd"`` is the exact construction (paper 1, Thm 2.1; one-hot, gamma = inf, float64): one shared layer run
``steps`` times, i.e. ``steps`` Lloyd iterations, for any d and n_clusters. A shipped name
(``"best"``, ``"main-onehot"``, ``"main-binary"``, ``"main-none"``, ``"main-equivariant"``) or a checkpoint path is a
learned model: it serves the numbers of clusters it was trained for (``model.served_k``: its own k, or a range for a
model trained on many, docs/learned_model.md, "One model for every k and d") and data with at most
``model.config.d`` features (narrower data zero-padded or tiled, as its checkpoint recommends), and runs re-embedded
steps as it was evaluated (paper 2, App. C; docs/evaluation.md), in the slot order its checkpoint recommends unless
``slot_order`` says otherwise (``"best"``: a fresh random order at every step, seeded from ``random_state``;
docs/learned_model.md, "Slot order"). ``"lloyd"`` stays the default: it serves any d and k, where a learned model
serves d <= 32 and its k (10 for the papers' models).

``lloyd_steps``: Lloyd iterations after the model's ``steps`` (``interp.hybrid.hybrid``:
c <- Lloyd^L(F_theta^T(X, c0))), 0 to ``MAX_STEPS``; None: what the checkpoint recommends (its ``inference``
metadata, docs/learned_model.md, "Hybrid inference"), 0 for ``model="lloyd"`` (whose steps are Lloyd's already).

Data are mapped to the unit cube the models assume (docs/learned_model.md) by ``(X - X.min(0)) / scale`` with ONE scale
for all features, the largest per-feature span of the training data (1 if every feature is constant): every
feature then lies in [0, 1] and the widest fills it. A common scale is a similarity transform, so the k-means
problem is unchanged ("any k-means instance maps to [0,1]^d by translation and scaling without changing the
problem", paper 2, App. D) and ``model="lloyd"`` equals ``sklearn.cluster.KMeans`` on X from the same start as long
as no cluster empties (the construction then puts an empty centre at the mean of all points, where scikit-learn
relocates far points; README "Decisions").
(Per-feature min-max, as the training tasks were scaled, would re-weight the features and cluster a different
problem.) So a learned model only ever sees data inside the unit cube it was trained on, whatever the scale or
offset of X (called directly on data outside [-0.5, 1.5]^d, or on tasks spanning less than half of [0, 1], a learned
model warns ``OutOfTrainingRange``). The
fitted centres are mapped back, and ``predict``, ``transform`` and ``score`` work in the original space, like
:class:`sklearn.cluster.KMeans`:

* ``cluster_centers_`` (n_clusters, n_features): the model's centres after ``steps`` steps, original space;
* ``labels_``: nearest centre of each training point (ties to the lowest index), consistent with the centres;
* ``inertia_``: sum of squared distances of the training points to their nearest centre;
* ``n_iter_`` = ``steps`` + the Lloyd steps after them (scikit-learn's name of the fitted attribute; every step is
  run, no early stopping);
* ``lloyd_inertia_`` and ``inertia_ratio_``: a learned model checks its answer (below, "Learned models check
  themselves");
* ``transform(X)``: Euclidean distances to the centres; ``score(X)`` = minus the inertia of X.

``init``: ``"k-means++"`` / ``"random"`` (:func:`interp.tasks.init_centroids`, seeded from ``random_state``) or
an (n_clusters, n_features) array in the original space. ``n_init`` runs keep the lowest inertia, compared in the
unit cube (the first run within 1e-10 relative of it); with an array init only one run is made (warning), as
scikit-learn does.

Memory. The construction holds 12 (d + k) x (d + k) float64 weight matrices, 96 (d + k)^2 bytes: 38 GB at d = 20,000.
``fit`` estimates what each path holds from (n_samples, n_features, n_clusters, n_init, steps) (:func:`memory_needs`)
and checks it against the available memory (``interp._checks.available_memory``) before allocating anything large:

* ``model="lloyd"`` builds the construction only while its weights take at most CONSTRUCTION_WEIGHT_MULTIPLE = 1
  times the bytes of X, or 64 MiB (CONSTRUCTION_WEIGHT_FLOOR) whatever X, and its whole need fits; otherwise it runs
  the same iterations without the weights (:func:`_iterations`, one run at a time): the nearest centres by an exact
  averaging hardmax (a tied point split evenly, as the construction's attention does), the centres as the members'
  means, an empty centre at the mean of all points (the construction's one-hot rule). Same start, same result (to
  rounding, ~1e-15; tests/test_hostile_numbers.py compares the two where both run). Wide data (d >> n) take this
  path: n = 10, d = 20,000 fits in 0.03 s and about 8 MB.
* a learned checkpoint has the width of its config (d <= 32 for the shipped ones), so its weights are small; its
  streams grow with n_init x n_samples and are checked the same way.
* what fits on no path is refused (``InsufficientMemory``, an ``InvalidInput``) naming the sizes and the memory
  needed. No path allocates more than 1 x the input without a check: every path's need is checked before it runs,
  and the construction's weights are kept to at most 1 x the input (or 64 MiB).

Scales. Labels, ``predict``, ``transform`` and ``score`` compute each point's differences to the centres scaled by a
power of two (exact) so that the largest is in [0.5, 1): the nearest centre is right whenever the centres are, from
X * 1e-300 to X * 1e300 (the plain sum of squares overflows to inf beyond about 1e154 and underflows to 0 below
about 1e-154, which made every label 0). Where the true inertia lies outside float64 (X * 1e160: about 1e322)
``inertia_`` and ``score`` report its overflow, inf (or 0 below the smallest float64), and warn (``RuntimeWarning``
giving its power of ten); labels and centres are unaffected.

Learned models and spread. A learned model warns (``OutOfTrainingRange``) when the middle 90 % of X (the 5-95 %
range), in the unit cube, spans less than SMALL_SPREAD x 0.743 = 0.37 in every feature: a few far points (an
outlier) squeeze the rest into a corner of the cube, a spread the models do not handle (docs/learned_model.md,
"Scales"). ``model="lloyd"`` is scale invariant and never warns.

Learned models check themselves. Where ``fit`` runs a learned model it also runs Lloyd's algorithm (the weightless
``_iterations``, float64 on the CPU) from the same start(s) for the same ``steps``, and reports ``lloyd_inertia_``
and ``inertia_ratio_`` = learned / Lloyd inertia; with ``n_init`` > 1 the best learned run is compared with the best
Lloyd run from the same starts. Above LEARNED_MARGIN = 2 it warns ``LearnedWorseThanLloyd`` naming the ratio and
``model="lloyd"``: on 256 tasks of the training distribution that happens in 0.3 % of the fits of the shipped models
(none for ``best``), on scikit-learn's iris, wine and breast cancer, ten blobs, n = k points and duplicated points
in 99 % (not on digits reduced to 32 features, where the models end 1.3 to 2.1 times Lloyd's, as on some of their own
tasks); the check costs 9 to 17 % of the rest of the fit at n = 512, d = 32
(``python -m analyses.studies.learned_vs_lloyd.measure``; docs/learned_model.md, "What the learned models are for").

Fewer clusters than asked. Where the fitted labels use fewer than ``n_clusters`` centres, ``fit`` warns
``ConvergenceWarning`` as :class:`sklearn.cluster.KMeans` does, for every model: scikit-learn's words ("Number of
distinct clusters (m) found smaller than n_clusters (k). Possibly due to duplicate points in X.") where X has fewer
than k distinct points, and otherwise that some centres are the nearest centre of no point.

Bounds. ``steps`` is at most ``interp._checks.MAX_STEPS`` (10,000), ``n_init`` at most MAX_N_INIT (1,000), and
``random_state`` is None, an int in [0, 2**32 - 1] or a ``numpy.random.RandomState``; anything else is refused in
``fit`` before any work (``InvalidInput`` / ``InvalidInputType`` naming the argument).

The default ``n_clusters=8`` is scikit-learn's; ``fit`` refuses fewer samples than clusters with a clear
``ValueError`` (as KMeans). The construction passes every scikit-learn estimator check. scikit-learn 1.9 has no
estimator tag for checks that cannot apply (the old ``_xfail_checks`` tag is gone); its mechanism is
``check_estimator(..., expected_failed_checks=...)``, and :func:`expected_failed_checks` gives that dict with the
reasons: for a learned checkpoint, the checks that force n_clusters to 1, 2 or 3.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from interp._checks import (
    MAX_STEPS,
    InsufficientMemory,
    InvalidInput,
    InvalidInputType,
    MemoryNeed,
    available_memory,
    check_count,
    check_device,
    check_steps,
)
from interp._renamed import renamed_class
from interp.algorithms import lloyd, squared_distances
from interp.hybrid import hybrid
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, resolve
from interp.model.config import SLOT_ORDERS
from interp.model.constructions import lloyd_transformer
from interp.model.transformer import SMALL_SPREAD, OutOfTrainingRange
from interp.primitives import ahat
from interp.tasks import init_centroids

INITS = {"k-means++": "kmeans++", "random": "random"}
_CHUNK = 1 << 22  # floats per distance block (n_chunk * k * d)
FLOAT64, FLOAT32, INT64 = 8, 4, 8  # bytes

# The construction keeps 12 (d + k) x (d + k) float64 matrices (Q, K, V of four attentions). It is built only while
# they take at most CONSTRUCTION_WEIGHT_MULTIPLE times the bytes of X, or CONSTRUCTION_WEIGHT_FLOOR whatever X;
# otherwise the same iterations run without the weights (``_iterations``).
CONSTRUCTION_MATRICES = 12
CONSTRUCTION_WEIGHT_MULTIPLE = 1
CONSTRUCTION_WEIGHT_FLOOR = 64 * 2**20
CACHED_CONSTRUCTION_BYTES = 16 * 2**20  # larger constructions are built for one fit and not kept
# Working memory per path, in buffers of the sizes named (measured peaks: construction build 21 D^2 float64; its
# forward 2.2 (r, n, D) float64; a learned forward 18 (r, n, D) float32; label trajectories 2.4 (r, T, n) int64)
BUILD_MATRICES = 24  # (D, D) float64 held while the construction's weights are set
STREAM_BUFFERS = 4  # (n_init, n, D) float64 of a construction's forward
LEARNED_STREAM_BUFFERS = 24  # (n_init, n, D) float32 of a learned forward
TRAJECTORY_BUFFERS = 3  # (n_init, steps, n) int64 labels: per step, stacked, counted
ITERATION_BUFFERS = 4  # (n, k) float64 of one weightless step: distances, AHAT weights and its temporaries
KMEANS_PP_BUFFERS = 2  # (n_init, n, d) float64 of the k-means++ draw: differences and their squares
DISTANCE_BUFFERS = 3  # (n, k) float64 at the end: scaled distances, minima, labels
# The widest feature's 5-95 % range of a training task is at least this (the smallest of 320 tasks of
# TaskConfig(n=512, d=32, k=10), seed 20261130: 0.743). A learned model warns when X's middle 90 %, mapped to the
# unit cube, spans less than SMALL_SPREAD of it in every feature: a few far points squeeze the rest.
TRAINING_MIDDLE_SPREAD = 0.743
MIDDLE_PERCENTILES = (5.0, 95.0)
# Squared distances in [SAFE_LOW, SAFE_HIGH] are kept as summed; a row with one outside is rescaled (exactly)
SAFE_LOW, SAFE_HIGH = 2.0**-960, 2.0**960
# A learned model's answer is checked against Lloyd's from the same start(s) and steps: it warns
# (``LearnedWorseThanLloyd``) when its inertia exceeds LEARNED_MARGIN times Lloyd's. The margin is measured
# (``python -m analyses.learned_vs_lloyd``, analyses/results/learned_vs_lloyd.json; docs/learned_model.md, "What the
# learned models are for"): on 256 tasks of the training distribution the shipped models end at most 1.75 (best) to
# 2.44 (main-none) times Lloyd's inertia; on wine, breast cancer, ten blobs, n = k points and duplicated points at
# least 4.3 times (infinitely where Lloyd's is 0), on iris 1.6 to 6.2 times. An inertia of at most LEARNED_SLACK per
# point in the unit cube (a distance of 1e-5, far above a float32 model's rounding) counts as 0.
LEARNED_MARGIN = 2.0
LEARNED_SLACK = 1e-10
# Runs from different starts: scikit-learn's KMeans makes 1 or 10; each run holds its own streams, so more than this
# is a typo, not a study.
MAX_N_INIT = 1_000
RANDOM_STATE_LIMIT = 2**32  # numpy's RandomState takes seeds in [0, 2**32)


class LearnedWorseThanLloyd(UserWarning):
    """A learned model's clustering ended worse than Lloyd's algorithm from the same start(s) and number of steps
    by more than ``LEARNED_MARGIN`` (the data are unlike the tasks it was trained on): ``model="lloyd"`` does better
    here."""


def _construction_bytes(d: int, k: int) -> int:
    """Bytes of the construction's weights: 12 (d + k)^2 float64."""
    return CONSTRUCTION_MATRICES * (d + k) ** 2 * FLOAT64


def _build_construction(d: int, k: int) -> KMeansTransformer:
    """The exact one-hot construction (one shared layer, float64, gamma = inf)."""
    return lloyd_transformer(d, k, n_layers=1, embedding="onehot", dtype=torch.float64)


@functools.lru_cache(maxsize=8)
def _cached_construction(d: int, k: int, device: str = "cpu") -> KMeansTransformer:
    return _build_construction(d, k).to(device)


def _construction(d: int, k: int, device: torch.device | str = "cpu") -> KMeansTransformer:
    """The construction for (d, k) on ``device`` (built on the CPU, then moved); cached per (d, k, device) when its
    weights take at most CACHED_CONSTRUCTION_BYTES."""
    if _construction_bytes(d, k) <= CACHED_CONSTRUCTION_BYTES:
        return _cached_construction(d, k, str(device))
    return _build_construction(d, k).to(device)


def _iterations(points: torch.Tensor, centroids: torch.Tensor, steps: int) -> torch.Tensor:
    """The construction's ``steps`` steps without its weights: a_i = AHAT_j(-||x_i - c_j||^2) (a tied point split
    evenly over its nearest centres), then c_j = sum_i a_ij x_i / sum_i a_ij, or the mean of all points where
    sum_i a_ij = 0 (the one-hot codes' empty-cluster rule). points (n, d), centroids (k, d) -> (k, d), float64."""
    mean = points.mean(dim=0, keepdim=True)  # (1, d)
    for _ in range(steps):
        weights = ahat(squared_distances(points[None], centroids[None])[0].neg_(), dim=1)  # (n, k)
        counts = weights.sum(dim=0)[:, None]  # (k, 1)
        sums = weights.T @ points  # (k, d)
        centroids = torch.where(counts > 0, sums / torch.where(counts > 0, counts, 1.0), mean)  # (k, d)
    return centroids


def memory_needs(path: str, n_samples: int, n_features: int, n_clusters: int, n_init: int, steps: int,
                 init: str | None = "k-means++", width: int | None = None) -> list[MemoryNeed]:
    """What ``fit`` holds at its peak on ``path``: ``"construction"`` (the (d + k)^2 weights and the streams),
    ``"iterations"`` (its steps without weights, one run at a time) or ``"learned"`` (a checkpoint of feature width
    ``width`` and model width D = ``width`` + n_clusters). The unit-cube copy of X is held throughout; the peak
    adds the largest of the initialisation, the run and the final distances."""
    n, d, k, r = n_samples, n_features, n_clusters, n_init
    data = [MemoryNeed("the data mapped to the unit cube", {"n_samples": n, "n_features": d}, FLOAT64 * n * d)]
    start = {"k-means++": KMEANS_PP_BUFFERS * FLOAT64 * r * n * d, "random": 2 * FLOAT64 * r * n}.get(init, 0)
    initialising = [MemoryNeed(f"the {init or 'given'} initialisation of the runs",
                               {"n_init": r, "n_samples": n, "n_features": d}, start)]
    labels = MemoryNeed("the assignments of every step", {"n_init": r, "steps": steps, "n_samples": n},
                        TRAJECTORY_BUFFERS * INT64 * r * steps * n)
    if path == "construction":
        D = d + k
        running = [MemoryNeed(f"the construction's weights while they are built (width D = d + k = {D})",
                              {"n_features": d, "n_clusters": k}, BUILD_MATRICES * FLOAT64 * D * D),
                   MemoryNeed("the runs' point and centroid streams", {"n_init": r, "n_samples": n, "n_features": d,
                              "n_clusters": k}, FLOAT64 * r * n * d + STREAM_BUFFERS * FLOAT64 * r * n * D),
                   MemoryNeed("the centroid trajectories", {"n_init": r, "steps": steps, "n_clusters": k,
                              "n_features": d}, FLOAT64 * r * (steps + 1) * k * d),
                   labels]
    elif path == "iterations":
        running = [MemoryNeed("the distances and hardmax weights of one step", {"n_samples": n, "n_clusters": k},
                              ITERATION_BUFFERS * FLOAT64 * n * k),
                   MemoryNeed("the squared points of one step", {"n_samples": n, "n_features": d}, FLOAT64 * n * d),
                   MemoryNeed("the centroids of the runs", {"n_init": r, "n_clusters": k, "n_features": d},
                              FLOAT64 * (r + 3) * k * d)]
    else:
        width = d if width is None else width
        D = width + k
        running = [MemoryNeed("the runs' padded points and their float32 copy, and the sorted copy for the "
                              "middle-spread check", {"n_init": r, "n_samples": n, "n_features": width},
                              (FLOAT64 + FLOAT32) * r * n * width + FLOAT64 * n * d),
                   MemoryNeed("the learned model's streams", {"n_init": r, "n_samples": n, "n_clusters": k},
                              LEARNED_STREAM_BUFFERS * FLOAT32 * r * n * D),
                   MemoryNeed("the centroid trajectories", {"n_init": r, "steps": steps, "n_clusters": k},
                              FLOAT32 * r * (steps + 1) * k * width),
                   labels]
    final = [MemoryNeed("the distances of the points to the centres, in blocks",
                        {"n_samples": n, "n_clusters": k, "n_features": d},
                        2 * FLOAT64 * min(_CHUNK, n * k * d) + DISTANCE_BUFFERS * FLOAT64 * n * k)]
    return data + max(initialising, running, final, key=lambda needs: sum(need.nbytes for need in needs))


@functools.lru_cache(maxsize=8)
def _checkpoint(path: str, mtime_ns: int, size: int, device: str = "cpu") -> KMeansTransformer:
    """A loaded checkpoint on ``device``, cached per (path, modification time, size, device)."""
    return load_model(path, device=device)


def _load(model: object, device: torch.device | str = "cpu") -> KMeansTransformer:
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidInputType(
            f"model must be 'lloyd', a shipped checkpoint name or a path, got {type(model).__name__}")
    path = resolve(model)
    stat = Path(path).stat()
    return _checkpoint(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size, str(device))


def _scaled_squared_distances(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S (n, k) and e (n,) int64 with ||x_i - c_j||^2 = S_ij 4^e_i, S finite for data of any scale, so that the
    nearest centre is right at X * 1e300 or 1e-300 too. Rows whose plain sums of squares all lie in
    [SAFE_LOW, SAFE_HIGH] keep them (e = 0: no term overflows, and what underflows is below their rounding); the
    others are recomputed with the differences scaled by 2^-e_i (exact) so that the largest lies in [0.5, 1).
    Differences are direct (no cancellation far from the origin), in blocks of _CHUNK floats."""
    n, d = X.shape
    k = centers.shape[0]
    scaled = np.empty((n, k), dtype=np.float64)
    exponents = np.zeros(n, dtype=np.int64)
    step = max(1, _CHUNK // max(1, k * d))
    for start in range(0, n, step):
        rows = slice(start, start + step)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            block = X[rows, None, :] - centers[None, :, :]  # (m, k, d)
            plain = np.einsum("mkd,mkd->mk", block, block)  # (m, k)
        scaled[rows] = plain
        extreme = np.flatnonzero(~((plain >= SAFE_LOW) & (plain <= SAFE_HIGH)).all(axis=1))  # rows of the block
        if extreme.size:
            scaled[start + extreme], exponents[start + extreme] = _rescaled(X[start + extreme], centers)
    return scaled, exponents


def _rescaled(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_scaled_squared_distances`` of rows X (m, d) by exact power-of-two scaling: (m, k) and (m,)."""
    with np.errstate(over="ignore", invalid="ignore"):
        block = X[:, None, :] - centers[None, :, :]  # (m, k, d)
    shift = np.zeros(len(X), dtype=np.int64)  # (m,)
    wide = ~np.isfinite(block).all(axis=(1, 2))  # a difference beyond float64: quarter first (exact)
    if wide.any():
        block[wide] = X[wide, None, :] * 0.25 - centers[None, :, :] * 0.25
        shift[wide] = 2
    largest = np.maximum(block.max(axis=(1, 2)), -block.min(axis=(1, 2)))  # (m,)
    _, exponent = np.frexp(largest)  # largest = mantissa 2^exponent, mantissa in [0.5, 1); 0 for 0
    np.ldexp(block, -exponent[:, None, None], out=block)
    with np.errstate(under="ignore"):
        return np.einsum("mkd,mkd->mk", block, block), exponent + shift


def _nearest(X: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index of the nearest centre (n,) int64 (ties to the lowest), its scaled squared distance (n,) and the
    exponent (n,) of ``_scaled_squared_distances``."""
    scaled, exponents = _scaled_squared_distances(X, centers)
    labels = scaled.argmin(axis=1)
    return labels.astype(np.int64), scaled[np.arange(len(labels)), labels], exponents


def _has_distinct_rows(X: np.ndarray, count: int) -> bool:
    """Whether X (n, d) has at least ``count`` distinct rows (-0.0 equal to 0.0), read in blocks of _CHUNK floats
    and stopping once found: O(n d) time, memory of one block."""
    seen: set[bytes] = set()
    step = max(1, _CHUNK // max(1, X.shape[1]))
    for start in range(0, len(X), step):
        block = np.unique(X[start:start + step] + 0.0, axis=0)  # + 0.0 turns -0.0 into 0.0
        seen.update(row.tobytes() for row in block[:count])  # count of them settle it
        if len(seen) >= count:
            return True
    return False


def _cube_inertias(cube: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """The inertia (r,) of the points ``cube`` (n, d), in the unit cube, at each run's centres ``runs`` (r, k, d)."""
    inertias = np.zeros(len(runs))
    for run, centres in enumerate(runs):
        _, minimum, exponents = _nearest(cube, centres)
        with np.errstate(over="ignore"):
            inertias[run] = np.ldexp(minimum, 2 * exponents).sum()
    return inertias


def _inertia(minimum: np.ndarray, exponents: np.ndarray, what: str) -> float:
    """sum_i minimum_i 4^e_i (the sum of squared distances to the nearest centre). Beyond float64 it is inf (or 0
    below its smallest number), the correctly rounded value's overflow, and a RuntimeWarning gives its size."""
    with np.errstate(over="ignore", under="ignore"):
        total = float(np.ldexp(minimum, 2 * exponents).sum())
    positive = minimum > 0
    if (np.isinf(total) or total < np.finfo(np.float64).tiny) and positive.any():
        top = int((2 * exponents[positive]).max())
        with np.errstate(under="ignore"):
            log10 = math.log10(float(np.ldexp(minimum[positive], 2 * exponents[positive] - top).sum())) \
                + top * math.log10(2)
        reported = "inf" if np.isinf(total) else f"{total:.3g}"
        warnings.warn(f"{what} is about 1e{log10:.1f}, outside the float64 range, and is reported as {reported}; "
                      "labels and centres are unaffected (rescale X for a representable inertia)", RuntimeWarning,
                      stacklevel=3)
    return total


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_random_state(value: object) -> None:
    """Refuse, naming ``random_state``, anything but None, an int in [0, 2**32 - 1] (bools refused) or a
    ``numpy.random.RandomState``: what :func:`sklearn.utils.check_random_state` takes, less bools."""
    expected = "random_state must be None, an int in [0, 2**32 - 1] or a numpy.random.RandomState, got "
    if value is None or isinstance(value, np.random.RandomState):
        return
    if not _is_int(value):
        raise InvalidInputType(f"{expected}{type(value).__name__} {value!r}")
    if not 0 <= int(value) < RANDOM_STATE_LIMIT:
        raise InvalidInput(f"{expected}{int(value)}")


class InContextKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """K-means clustering by a k-means transformer (exact construction or a learned checkpoint).

    Parameters
    ----------
    n_clusters : int, default 8
        Number of clusters. A learned checkpoint serves the k it was trained for (``model.served_k``).
    model : "lloyd", shipped checkpoint name or path, default "lloyd"
        ``"lloyd"``: the exact construction (= Lloyd's algorithm). Otherwise a learned model, loaded with
        :func:`interp.model.checkpoint.load_model` (safetensors, never unpickled).
    steps : int, default 20
        Transformer steps (layers / Lloyd iterations), 1 to ``interp._checks.MAX_STEPS`` (10,000).
    init : "k-means++", "random" or array of shape (n_clusters, n_features), default "k-means++"
    n_init : int, default 1
        Runs from different initialisations, 1 to MAX_N_INIT (1,000); the lowest inertia wins.
    random_state : None, int in [0, 2**32 - 1] or numpy RandomState
        Seeds the initialisation (and the slot orders of ``slot_order="shuffle"``). Anything else is refused naming
        ``random_state``.
    n_steps : int, deprecated
        The old name of ``steps`` (a ``FutureWarning``; to be removed).
    slot_order : None, "fixed" or "shuffle", default None
        The centroids' slot order at each step of a learned model (:meth:`interp.model.KMeansTransformer.forward`);
        None: the one its checkpoint recommends ("shuffle" for ``model="best"``, "fixed" for the others). The
        construction (``model="lloyd"``) is equivariant to it.
    lloyd_steps : None or int, default None
        Lloyd iterations run after the model's ``steps`` (:func:`interp.hybrid.hybrid`), 0 to
        ``interp._checks.MAX_STEPS``; None: the number the checkpoint recommends (metadata ``inference``), 0 for
        ``model="lloyd"``.
    device : str or torch.device, default "cpu"
        Where the model runs ("cpu", "cuda", "cuda:1", "mps"; checked in ``fit``: a device this machine lacks is
        refused). The data are mapped to the unit cube and initialised on the CPU (the same starts on every
        device), moved there, and the centres come back to the CPU; ``predict``, ``transform`` and ``score`` run
        in NumPy.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The centres after ``steps`` steps (of the best run), in the original space.
    labels_ : ndarray of shape (n_samples,)
        Nearest centre of each training point (ties to the lowest index).
    inertia_ : float
        Sum of squared distances of the training points to their nearest centre.
    lloyd_inertia_ : float
        Lloyd's inertia from the same start(s) after the same ``steps``: for a learned model, the exact Lloyd
        iterations (``_iterations``, float64 on the CPU) run from each of the learned runs' starts, the lowest
        (with ``n_init`` > 1 the best learned run is compared with the best Lloyd run from the same starts); for
        ``model="lloyd"``, ``inertia_`` itself.
    inertia_ratio_ : float
        ``inertia_ / lloyd_inertia_``, computed in the unit cube (the same ratio, free of overflow at any scale of
        X); ``inf`` where Lloyd's inertia is 0 and the model's is not (an inertia of at most LEARNED_SLACK = 1e-10
        per point in the unit cube counts as 0). Above LEARNED_MARGIN a learned model warns
        ``LearnedWorseThanLloyd`` naming the ratio and ``model="lloyd"``; 1 for ``model="lloyd"``.
    n_iter_ : int
        ``steps`` plus the Lloyd steps after them (every step is run; no early stopping).
    """

    def __init__(self, n_clusters=8, *, model="lloyd", steps=20, init="k-means++", n_init=1, random_state=None,
                 slot_order=None, lloyd_steps=None, n_steps="deprecated", device="cpu"):
        self.n_clusters = n_clusters
        self.model = model
        self.steps = steps
        self.n_steps = n_steps
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.slot_order = slot_order
        self.lloyd_steps = lloyd_steps
        self.device = device

    # ----- validation --------------------------------------------------------------------------------
    def _check_params(self) -> None:
        if not _is_int(self.n_clusters) or self.n_clusters < 1:
            raise InvalidInput(f"n_clusters must be an integer >= 1, got {self.n_clusters!r}")
        if not (isinstance(self.n_steps, str) and self.n_steps == "deprecated"):
            warnings.warn("InContextKMeans(n_steps=...) is renamed steps=...; n_steps= will be removed",
                          FutureWarning, stacklevel=3)
            if self.steps != 20:
                raise InvalidInput("give steps= only: n_steps= is its old name")
            self._steps = self.n_steps
        else:
            self._steps = self.steps
        name = "steps" if self.n_steps == "deprecated" else "n_steps"
        if not _is_int(self._steps) or self._steps < 1:
            raise InvalidInput(f"{name} must be an integer >= 1, got {self._steps!r}")
        check_steps(int(self._steps), name)  # at most MAX_STEPS: refused before any work
        if not _is_int(self.n_init) or self.n_init < 1:
            raise InvalidInput(f"n_init must be an integer >= 1, got {self.n_init!r}")
        check_count(int(self.n_init), "n_init", MAX_N_INIT)
        _check_random_state(self.random_state)
        if isinstance(self.init, str):
            if self.init not in INITS:
                raise InvalidInput(f"init must be 'k-means++', 'random' or an array of shape (n_clusters, n_features), "
                                 f"got {self.init!r}")
        elif not hasattr(self.init, "__array__") and not isinstance(self.init, (list, tuple)):
            raise InvalidInputType(f"init must be 'k-means++', 'random' or an array of shape (n_clusters, n_features), "
                            f"got {type(self.init).__name__}")
        if self.slot_order is not None and (not isinstance(self.slot_order, str)
                                            or self.slot_order not in SLOT_ORDERS):
            raise InvalidInput(f"slot_order must be None, 'fixed' or 'shuffle', got {self.slot_order!r}")
        if self.lloyd_steps is not None and (not _is_int(self.lloyd_steps)
                                             or not 0 <= self.lloyd_steps <= MAX_STEPS):
            raise InvalidInput(f"lloyd_steps must be None or an integer from 0 to {MAX_STEPS:,}, got "
                               f"{self.lloyd_steps!r}")
        if not (isinstance(self.model, (str, os.PathLike))):
            raise InvalidInputType("model must be 'lloyd', a shipped checkpoint name or a path, "
                            f"got {type(self.model).__name__}")
        self._device = check_device(self.device, "device")

    def _get_model(self, n_features: int) -> KMeansTransformer:
        """The learned transformer serving (n_features, n_clusters), or a clear ValueError when it cannot."""
        model = _load(self.model, self._device)
        config = model.config
        least, most = model.served_k
        if not least <= self.n_clusters <= most:
            served = f"only n_clusters={most}" if least == most else f"n_clusters from {least} to {most}"
            raise InvalidInput(f"model {str(self.model)!r} serves {served}, got n_clusters={self.n_clusters}; use "
                               "model='lloyd' for any number of clusters")
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

    def _path(self, X: np.ndarray, n_init: int, model: KMeansTransformer | None) -> str:
        """``"construction"``, ``"iterations"`` or ``"learned"``: for ``model="lloyd"`` the construction while its
        weights are small (module docstring) and it fits in memory, else its iterations without the weights; raise
        ``InsufficientMemory`` (an ``InvalidInput`` naming the sizes) when the path left does not fit."""
        n_samples, n_features = X.shape
        sizes = (n_samples, n_features, int(self.n_clusters), n_init, int(self._steps) + self._lloyd,
                 self.init if isinstance(self.init, str) else None)
        available = available_memory()

        def fits(needs: list[MemoryNeed]) -> bool:
            return available is None or sum(need.nbytes for need in needs) <= available

        if model is not None:
            paths = ["learned"]
        else:
            allowed = max(CONSTRUCTION_WEIGHT_MULTIPLE * X.nbytes, CONSTRUCTION_WEIGHT_FLOOR)
            small = _construction_bytes(n_features, int(self.n_clusters)) <= allowed
            paths = ["construction", "iterations"] if small else ["iterations"]
        for path in paths:
            needs = memory_needs(path, *sizes, width=None if model is None else model.config.d)
            if fits(needs):
                return path
        raise InsufficientMemory(f"{type(self).__name__}.fit", needs, available)

    # ----- fitting -------------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Cluster X (n_samples, n_features); y is ignored. Returns self."""
        self._check_params()
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=1)
        n_samples, n_features = X.shape
        k = int(self.n_clusters)
        if n_samples < k:
            raise InvalidInput(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}")
        model = None if self.model == "lloyd" else self._get_model(n_features)
        learned = model is not None
        # the Lloyd steps after the model's (interp.hybrid): the checkpoint's recommendation unless given
        self._lloyd = (model.inference.lloyd_steps if learned else 0) if self.lloyd_steps is None \
            else int(self.lloyd_steps)
        array_init = None if isinstance(self.init, str) else self._check_init_array(n_features)
        n_init = self.n_init
        if array_init is not None and n_init != 1:
            warnings.warn(f"Explicit initial center position passed: performing only one init in "
                          f"{type(self).__name__} instead of n_init={n_init}.", RuntimeWarning, stacklevel=2)
            n_init = 1
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        path = self._path(X, n_init, model)  # the memory is checked before anything large is allocated

        # the unit cube the models assume: shift by the per-feature minimum, divide by the largest span (one scale
        # for every feature keeps the k-means problem; all features constant: scale 1)
        low = X.min(axis=0)
        with np.errstate(over="ignore"):
            span = float((X.max(axis=0) - low).max())
        if not np.isfinite(span):
            raise InvalidInput("X spans more than the float64 range in some feature (max - min overflows); rescale X")
        span = span if span > 0 else 1.0
        cube = (X - low) / span  # (n, d) in [0, 1]
        cube_points = torch.from_numpy(cube)  # (n, d), shares cube's memory
        if array_init is None:
            generator = torch.Generator().manual_seed(seed)
            runs = cube_points[None].expand(n_init, -1, -1)  # (r, n, d), a view
            start = init_centroids(runs, k, INITS[self.init], generator)  # (r, k, d)
        else:
            start = torch.from_numpy((array_init - low) / span)[None]  # (1, k, d)

        if path == "iterations":
            with torch.no_grad():
                on_device = cube_points.to(self._device)  # (n, d)
                found = torch.stack([_iterations(on_device, start[run].to(self._device), int(self._steps))
                                     for run in range(n_init)])  # (r, k, d)
                if self._lloyd:  # Lloyd's steps after the construction's, one run at a time as above
                    found = torch.cat([lloyd(on_device[None], found[run : run + 1], self._lloyd).centroids
                                       for run in range(n_init)])  # (r, k, d)
        else:
            if model is None:
                model = _construction(n_features, k, self._device)
            else:
                self._warn_if_squeezed(cube)
            # the model's steps, then Lloyd's (interp.hybrid: features are zero-padded up to the model's d, the
            # construction is built for d; Lloyd's steps run on the n_features coordinates in float64)
            points = cube_points[None].expand(n_init, -1, -1).contiguous()  # (r, n, d)
            slot_orders = torch.Generator().manual_seed(seed + 1)  # a CPU stream: the same orders on every device
            with torch.no_grad():
                found = hybrid(model, points.to(self._device), start.to(self._device), steps=int(self._steps),
                               lloyd_steps=self._lloyd, slot_order=self.slot_order,
                               generator=slot_orders).centroids  # (r, k, d)
        found = found.to("cpu", torch.float64).numpy()  # (r, k, d) in the unit cube
        centers = found * span + low  # (r, k, d)
        if not np.all(np.isfinite(centers)):
            raise InvalidInput(f"model {str(self.model)!r} produced non-finite centroids on this data")

        # the lowest inertia (in the unit cube: no overflow at any scale of X) wins; runs within rounding (1e-10
        # relative) of it count as tied and the first is taken, so that translating or scaling X cannot swap two runs
        # that found the same partition in another order
        inertias = _cube_inertias(cube, found) if n_init > 1 or learned else np.zeros(1)  # (r,)
        best = int(np.flatnonzero(inertias <= inertias.min() * (1 + 1e-10))[0])
        self.cluster_centers_ = np.ascontiguousarray(centers[best])
        labels, minimum, exponents = _nearest(X, self.cluster_centers_)
        self.labels_ = labels
        self.inertia_ = _inertia(minimum, exponents, "inertia_")
        self.n_iter_ = int(self._steps) + self._lloyd
        self._n_features_out = self.cluster_centers_.shape[0]
        if learned:
            self._check_against_lloyd(X, cube, start, float(inertias[best]), low, span)
        else:  # the model is Lloyd
            self.lloyd_inertia_, self.inertia_ratio_ = self.inertia_, 1.0
        distinct = len(np.unique(labels))
        if distinct < k:  # scikit-learn's KMeans warns so, from its labels; its words where X has duplicates
            found_fewer = f"Number of distinct clusters ({distinct}) found smaller than n_clusters ({k})"
            unused = f"{k - distinct} centre is" if k - distinct == 1 else f"{k - distinct} centres are"
            warnings.warn(f"{found_fewer}. Possibly due to duplicate points in X." if not _has_distinct_rows(X, k)
                          else f"{found_fewer}, though X has at least {k} distinct points: {unused} the nearest "
                          "centre of no point", ConvergenceWarning, stacklevel=2)
        return self

    def _check_against_lloyd(self, X: np.ndarray, cube: np.ndarray, start: torch.Tensor, learned: float,
                             low: np.ndarray, span: float) -> None:
        """Run Lloyd (``_iterations``, float64 on the CPU) from the learned runs' starts ``start`` (r, k, d) for
        as many steps (the model's and the Lloyd steps after them), set ``lloyd_inertia_`` (its best run's,
        original space) and ``inertia_ratio_`` (``learned``, the chosen learned run's inertia in the unit cube,
        over the best Lloyd run's; inf where Lloyd's is 0 and the model's is not, 1 where both are, an inertia
        of at most LEARNED_SLACK x n_samples counting as 0), and warn (``LearnedWorseThanLloyd``) when the ratio
        exceeds LEARNED_MARGIN."""
        points = torch.from_numpy(cube)  # (n, d)
        with torch.no_grad():
            reference = torch.stack([_iterations(points, run, int(self._steps) + self._lloyd)
                                     for run in start.to("cpu", torch.float64)])
        lloyd = reference.numpy()  # (r, k, d) in the unit cube
        inertias = _cube_inertias(cube, lloyd)  # (r,)
        best = int(np.flatnonzero(inertias <= inertias.min() * (1 + 1e-10))[0])
        reference = float(inertias[best])
        _, minimum, exponents = _nearest(X, lloyd[best] * span + low)
        self.lloyd_inertia_ = _inertia(minimum, exponents, "lloyd_inertia_")
        floor = LEARNED_SLACK * len(cube)  # an inertia at or below it is 0 up to rounding
        self.inertia_ratio_ = learned / reference if reference > floor else (math.inf if learned > floor else 1.0)
        if self.inertia_ratio_ > LEARNED_MARGIN:
            runs = "the same start" if len(start) == 1 else f"the same {len(start)} starts (best run of each)"
            warnings.warn(
                f"model {str(self.model)!r} ended at {self.inertia_ratio_:.3g} times the inertia of Lloyd's algorithm "
                f"from {runs} after {int(self._steps) + self._lloyd} steps (inertia {self.inertia_:.6g} against "
                f"{self.lloyd_inertia_:.6g}; warning above {LEARNED_MARGIN:g} times): the data are unlike the "
                "Gaussian-mixture tasks it was trained on (k = 10, d <= 32, in the unit cube); use model='lloyd'",
                LearnedWorseThanLloyd, stacklevel=3)

    def _warn_if_squeezed(self, cube: np.ndarray) -> None:
        """Warn (``OutOfTrainingRange``) when the middle 90 % of the data, in the unit cube, spans less than
        SMALL_SPREAD x TRAINING_MIDDLE_SPREAD in every feature: far points squeeze the rest into a corner."""
        low, high = np.percentile(cube, MIDDLE_PERCENTILES, axis=0)  # (d,) each
        middle = float((high - low).max())
        limit = SMALL_SPREAD * TRAINING_MIDDLE_SPREAD
        if middle < limit:
            warnings.warn(
                f"the middle 90% of X spans {middle:.3g} of its range in its widest feature (training tasks: at least "
                f"{TRAINING_MIDDLE_SPREAD:g}): a few far points squeeze the rest of the data below the spread model "
                f"{str(self.model)!r} handles (warning below {limit:.3g}); expect poor centroids (remove the outliers, "
                "or use model='lloyd')", OutOfTrainingRange, stacklevel=3)

    # ----- inference -----------------------------------------------------------------------------------
    def _validated(self, X) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, X, dtype=np.float64, reset=False)

    def predict(self, X):
        """Index of the nearest fitted centre (ties to the lowest index), shape (n_samples,)."""
        return _nearest(self._validated(X), self.cluster_centers_)[0]

    def transform(self, X):
        """Euclidean distances to the fitted centres, shape (n_samples, n_clusters)."""
        scaled, exponents = _scaled_squared_distances(self._validated(X), self.cluster_centers_)
        with np.errstate(over="ignore"):
            return np.ldexp(np.sqrt(scaled), exponents[:, None])

    def score(self, X, y=None):
        """Minus the k-means objective of X at the fitted centres (higher is better)."""
        _, minimum, exponents = _nearest(self._validated(X), self.cluster_centers_)
        return -_inertia(minimum, exponents, "the inertia of X")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # dense data only: the transformers take dense point tokens
        tags.input_tags.allow_nan = False  # NaN / inf are rejected with a clear error
        tags.transformer_tags.preserves_dtype = ["float64"]  # computed and returned in float64
        return tags


# the old name of InContextKMeans: constructing it warns (FutureWarning); to be removed
TransformerKMeans = renamed_class(InContextKMeans, "TransformerKMeans")


# scikit-learn checks that set n_clusters to 1, 2 or 3 (or need such a clustering to be good)
_FORCED_N_CLUSTERS = {  # check -> the n_clusters it sets, and what it does
    "check_dont_overwrite_parameters": (1, "sets n_clusters=1"),
    "check_fit2d_1sample": (1, "sets n_clusters=1"),
    "check_fit2d_1feature": (1, "sets n_clusters=1"),
    "check_fit2d_predict1d": (1, "sets n_clusters=1"),
    "check_methods_subset_invariance": (1, "sets n_clusters=1"),
    "check_methods_sample_order_invariance": (2, "sets n_clusters=2"),
    "check_clustering": (3, "sets n_clusters=3 (and scores the clustering of 3 blobs)"),
}


def expected_failed_checks(estimator: InContextKMeans) -> dict[str, str]:
    """The scikit-learn estimator checks that cannot apply to ``estimator``, with the reason (for
    ``check_estimator(..., expected_failed_checks=...)`` / ``parametrize_with_checks``).

    None for ``model="lloyd"``. A learned checkpoint serves the numbers of clusters it was trained for
    (``model.served_k``), and these checks force ``n_clusters`` to 1, 2 or 3: those outside that range are refused by
    ``fit`` (a clear ValueError naming n_clusters), by design.
    """
    if estimator.model == "lloyd":
        return {}
    least, most = _load(estimator.model).served_k
    reason = f"a learned checkpoint serves n_clusters from {least} to {most} only; this check {{}}"
    return {name: reason.format(what) for name, (forced, what) in _FORCED_N_CLUSTERS.items()
            if not least <= forced <= most}
