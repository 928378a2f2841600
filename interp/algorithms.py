"""Reference clustering algorithms, batched in torch, with the models' call shape.

Lloyd as in paper 2 ("Leaner Transformers Can Easily Learn to Cluster", Eq. 1 and Alg. 2), with scikit-learn's
semantics. Nothing here imports the model: these are the independent references the transformers are checked against.

``lloyd(points, centroids, steps)`` mirrors ``model(points, centroids)``: points (b, n, d), centroids
(b, k, d), returns a :class:`~interp.result.ClusteringOutput`.

Empty clusters follow an explicit rule, ``empty=``:

* ``"sklearn"`` (default): scikit-learn's relocation -- the points farthest from their (old) centres are
  moved into the empty clusters, farthest first to the lowest empty index; a point's old cluster loses it.
* ``"keep"``: an empty cluster keeps its previous centre.
* ``"nearest_code"``: the rule the exact transformers follow. With centroid codes ``codes`` (k, m) -- the
  scratch part of the centroid embedding (one-hot I_k or binary B_k^T) -- an empty cluster j takes the mean
  of all points whose cluster code is nearest to code j among the non-empty clusters. With one-hot codes
  every other code is at distance 2, so the centre becomes the mean of all points.
* ``"random_point"``: the authors' rule (their evaluation code), a uniformly random data point (seeded).

Ties in the assignment go to the lowest centroid index (torch.argmin), as in scikit-learn.

Translation. Distances are computed as ||x||^2 - 2 x.c + ||c||^2, which cancels catastrophically far from the origin.
Every translation-invariant algorithm here (all but ``spherical_kmeans``) therefore runs on the task translated by
its anchor a = ``interp.primitives.task_anchor(points)`` (an exact subtraction; a = 0 for tasks near the origin, such
as [0, 1]^d) and adds a back to the centroids, as scikit-learn centres its data; ``kmeans_objective`` too. Tasks
whose spread would overflow the squared distances are refused (``InvalidInput`` naming points or centroids).
``squared_distances`` and ``assign`` are the raw formulas: pass them centred coordinates (``centre_tasks``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from interp._checks import (
    InvalidInput,
    InvalidInputType,
    check_choice,
    check_generator,
    check_points_centroids,
    check_steps,
)
from interp._renamed import renamed_keyword
from interp.primitives import centre_tasks, first_argmin, random_device, uniform
from interp.result import ClusteringOutput

EMPTY_RULES = ("sklearn", "keep", "nearest_code", "random_point")


PRECISE_DTYPES = (torch.float32, torch.float64)


def check_precise(points: Tensor) -> None:
    """Refuse half-precision tasks: in float16 or bfloat16 (8 significant bits) the expansion of the squared
    distances cancels, and Lloyd's iterations drift from the exact ones with nothing to show it (20 iterations on 16
    tasks of TaskConfig(n=512, d=32, k=10) in bfloat16 end up to 0.74 from the float64 centroids and label 12 % of
    the points differently); convert instead (``points.double()``)."""
    if points.dtype not in PRECISE_DTYPES:
        raise InvalidInputType(f"points dtype {points.dtype} is too coarse for exact Lloyd iterations (float16 and "
                               "bfloat16 lose the squared distances' differences); convert the points and centroids "
                               "with .float() or .double()")


def squared_distances(points: Tensor, centroids: Tensor) -> Tensor:
    """||x_i - c_j||^2 as (b, n, k), from the expansion ||x||^2 - 2 x.c + ||c||^2, clamped at 0.

    Accurate to about eps * (||x||^2 + ||c||^2): pass centred coordinates (``interp.primitives.centre_tasks``)."""
    cross = torch.bmm(points, centroids.transpose(1, 2))  # (b, n, k)
    sq = (points * points).sum(-1)[..., None] - 2 * cross + (centroids * centroids).sum(-1)[:, None, :]
    return sq.clamp_min_(0)


def kmeans_objective(points: Tensor, centroids: Tensor) -> Tensor:
    """Phi(C) = sum_i min_j ||x_i - c_j||^2 per task, shape (b,) (paper 2 Eq. 1; a sum, not a mean), computed on
    the task translated by its anchor (translation invariant; accurate far from the origin)."""
    points, centroids = check_points_centroids(points, centroids, k_at_most_n=False)
    centred_points, centred_centroids, _ = centre_tasks(points, centroids)  # (b, n, d), (b, k, d)
    return squared_distances(centred_points, centred_centroids).amin(dim=2).sum(dim=1)


def log_objective(points: Tensor, centroids: Tensor) -> Tensor:
    """Natural log of the k-means objective per task, (b,) (the papers' metric)."""
    return torch.log(kmeans_objective(points, centroids))


def assign(points: Tensor, centroids: Tensor) -> Tensor:
    """Nearest-centroid labels (b, n) int64, ties to the lowest index.

    Ranks ||c_j||^2 - 2 x.c_j (||x||^2 is the same for every j), laid out (b, k, n) to vectorise."""
    gap = (centroids * centroids).sum(-1)[..., None] - 2 * centroids @ points.transpose(1, 2)  # (b, k, n)
    return first_argmin(gap, dim=1)


def cluster_sums(points: Tensor, labels: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Per-cluster coordinate sums (b, k, d) and member counts (b, k) for labels (b, n)."""
    batch, _, d = points.shape
    sums = torch.zeros((batch, k, d), dtype=points.dtype, device=points.device)
    sums.scatter_add_(1, labels[..., None].expand(-1, -1, d), points)
    counts = torch.zeros((batch, k), dtype=points.dtype, device=points.device)
    counts.scatter_add_(1, labels, torch.ones_like(labels, dtype=points.dtype))
    return sums, counts


def _relocate_sklearn(points: Tensor, labels: Tensor, old: Tensor, sums: Tensor, counts: Tensor) -> None:
    """In place: move the farthest points into empty clusters (scikit-learn's `_relocate_empty_clusters`)."""
    empty_tasks = (counts == 0).any(dim=1).nonzero().flatten().tolist()
    for task in empty_tasks:
        empty_ids = (counts[task] == 0).nonzero().flatten()
        dist = ((points[task] - old[task][labels[task]]) ** 2).sum(-1)  # (n,)
        if float(dist.max()) == 0.0:
            continue  # all points sit on their centres: nothing to relocate (as scikit-learn)
        far = torch.argsort(dist, descending=True, stable=True)[: len(empty_ids)]
        for cluster, point in zip(empty_ids.tolist(), far.tolist()):
            source = int(labels[task, point])
            sums[task, source] -= points[task, point]
            counts[task, source] -= 1
            sums[task, cluster] = points[task, point]
            counts[task, cluster] = 1


def _nearest_code_fill(sums: Tensor, counts: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
    """Sums/counts where each empty cluster pools the non-empty clusters with the nearest code."""
    code_dist = ((codes[:, None, :] - codes[None, :, :]) ** 2).sum(-1).to(sums.dtype)  # (k, k)
    occupied = counts > 0  # (b, k)
    masked = torch.where(occupied[:, None, :], code_dist[None], torch.full_like(code_dist[None], float("inf")))
    nearest = masked == masked.amin(dim=2, keepdim=True)  # (b, k, k): pool[j, l]
    pool = (nearest & occupied[:, None, :]).to(sums.dtype)
    pooled_sums = torch.bmm(pool, sums)  # (b, k, d)
    pooled_counts = torch.bmm(pool, counts[..., None])[..., 0]  # (b, k)
    empty = ~occupied
    return (
        torch.where(empty[..., None], pooled_sums, sums),
        torch.where(empty, pooled_counts, counts),
    )


def lloyd_step(
    points: Tensor,
    centroids: Tensor,
    empty: str = "sklearn",
    codes: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Lloyd iteration: labels a_i = argmin_j ||x_i - c_j||^2, then c_j = mean{x_i : a_i = j}.

    Returns new centroids (b, k, d), labels (b, n) and the empty mask (b, k) of this assignment.
    """
    k = centroids.shape[1]
    labels = assign(points, centroids)  # (b, n)
    sums, counts = cluster_sums(points, labels, k)  # (b, k, d), (b, k)
    empty_mask = counts == 0  # (b, k)
    new = sums / counts.clamp_min(1)[..., None]
    if bool(empty_mask.any()):
        if empty == "keep":
            new = torch.where(empty_mask[..., None], centroids, new)
        elif empty == "nearest_code":
            if codes is None:
                raise InvalidInput("empty='nearest_code' needs codes, the (k, m) centroid codes of the embedding")
            pooled_sums, pooled_counts = _nearest_code_fill(sums, counts, codes.to(points))
            new = pooled_sums / pooled_counts.clamp_min(1)[..., None]
        elif empty == "sklearn":
            sums, counts = sums.clone(), counts.clone()
            _relocate_sklearn(points, labels, centroids, sums, counts)
            new = torch.where(counts[..., None] > 0, sums / counts.clamp_min(1)[..., None], centroids)
        else:  # random_point
            n = points.shape[1]
            pick = torch.randint(n, empty_mask.shape, generator=generator,
                                 device=random_device(generator, points.device)).to(points.device)  # (b, k)
            random_points = torch.gather(points, 1, pick[..., None].expand(-1, -1, points.shape[2]))
            new = torch.where(empty_mask[..., None], random_points, new)
    return new, labels, empty_mask


@renamed_keyword("n_iter", "steps")
def lloyd(
    points: Tensor,
    centroids: Tensor,
    steps: int = 10,
    *,
    empty: str = "sklearn",
    codes: Tensor | None = None,
    generator: torch.Generator | int | None = None,
) -> ClusteringOutput:
    """Run ``steps`` batched Lloyd iterations from ``centroids`` (paper 2 Alg. 2); inputs are not mutated.

    The iterations run on the task translated by its anchor a (module docstring, "Translation"); the returned
    centroids are translated back (``centroid_trajectory[:, 0]`` is ``centroids`` itself)."""
    points, centroids = check_points_centroids(points, centroids)
    check_precise(points)
    check_steps(steps)
    check_choice(empty, "empty", EMPTY_RULES)
    gen = check_generator(generator)
    centred_points, current, anchor = centre_tasks(points, centroids)  # (b, n, d), (b, k, d), (b, 1, d)
    trajectory, labels_per_step, empty_per_step = [centroids], [], []
    for _ in range(steps):
        current, labels, empty_mask = lloyd_step(centred_points, current, empty=empty, codes=codes, generator=gen)
        trajectory.append(current + anchor)
        labels_per_step.append(labels)
        empty_per_step.append(empty_mask)
    return ClusteringOutput(
        centroids=trajectory[-1],
        assignments=assign(centred_points, current),  # (b, n): the final E-step
        centroid_trajectory=torch.stack(trajectory, dim=1),
        assignment_trajectory=torch.stack(labels_per_step, dim=1),
        empty_clusters=torch.stack(empty_per_step, dim=1),
    )


def lloyd_until_converged(points: Tensor, centroids: Tensor, max_steps: int = 300,
                          empty: str = "sklearn") -> tuple[Tensor, Tensor]:
    """Lloyd's iterations until no task's assignment changes, at most ``max_steps`` (scikit-learn's ``max_iter``).

    A task whose labels a_i are those of its previous iteration is at a fixed point (its centres are its cells'
    means, and stay so); scikit-learn calls this strict convergence (it also stops earlier when the centres move less
    than its ``tol``). Every task steps until all have converged, which leaves the converged ones unchanged. No
    trajectories are kept. Returns the centroids (b, k, d) and, per task, the iterations run until its labels
    stopped changing (b,) int64 (``max_steps`` for a task that did not converge)."""
    points, centroids = check_points_centroids(points, centroids)
    check_precise(points)
    check_steps(max_steps, "max_steps")
    check_choice(empty, "empty", EMPTY_RULES)
    centred_points, current, anchor = centre_tasks(points, centroids)  # (b, n, d), (b, k, d), (b, 1, d)
    iterations = torch.full((points.shape[0],), max_steps, dtype=torch.int64, device=points.device)  # (b,)
    previous = None
    for step in range(max_steps):
        current, labels, _ = lloyd_step(centred_points, current, empty=empty)
        if previous is not None:
            stable = (labels == previous).all(dim=1) & (iterations == max_steps)  # (b,) newly converged
            iterations[stable] = step + 1
            if bool((iterations < max_steps).all()):
                break
        previous = labels
    return current + anchor, iterations


def kmeans_plusplus(points: Tensor, k: int, generator: torch.Generator | int | None = None,
                    local_trials: int | None = None) -> Tensor:
    """k-means++ starts (Arthur & Vassilvitskii 2007), batched, with scikit-learn's greedy local trials.

    The first centre is a uniform point; each next one: draw ``local_trials`` candidates i.i.d. with probability
    proportional to D(x)^2 (the squared distance to the nearest chosen centre) and keep the candidate that makes
    sum_x min(D(x)^2, ||x - candidate||^2) smallest. ``local_trials`` None is scikit-learn's 2 + floor(ln k); 1 is
    plain k-means++ (the distribution of ``interp.tasks.init_centroids(..., "kmeans++")``). Where every point
    coincides with a chosen centre the draw is uniform. points (b, n, d) float32/64 on the CPU, centred per task
    (``centre_tasks``) for the distances; returns (b, k, d), rows of ``points``. ``generator``: a torch.Generator or an
    int seed (None: torch's global RNG)."""
    points, _ = check_points_centroids(points, points[:, :1])
    check_precise(points)
    batch, n, d = points.shape
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise InvalidInput(f"k must be an int from 1 to n={n}, got {k!r}")
    trials = 2 + int(math.log(k)) if local_trials is None else local_trials
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise InvalidInput(f"local_trials must be None or an int >= 1, got {local_trials!r}")
    gen = check_generator(generator)
    centred, _, _ = centre_tasks(points, points[:, :1])  # (b, n, d)
    rows = torch.arange(batch)
    first = torch.randint(n, (batch,), generator=gen)  # (b,)
    chosen = [first]
    closest = ((centred - centred[rows, first][:, None, :]) ** 2).sum(-1).double()  # (b, n) D(x)^2
    for _ in range(1, k):
        weights = torch.where(closest.sum(1, keepdim=True) > 0, closest, torch.ones_like(closest))  # (b, n)
        candidates = torch.multinomial(weights, trials, replacement=True, generator=gen)  # (b, L)
        candidate_points = torch.gather(centred, 1, candidates[..., None].expand(-1, -1, d))  # (b, L, d)
        to_candidates = ((centred[:, None, :, :] - candidate_points[:, :, None, :]) ** 2).sum(-1).double()  # (b,L,n)
        with_candidate = torch.minimum(closest[:, None, :], to_candidates)  # (b, L, n)
        best = with_candidate.sum(-1).argmin(dim=1)  # (b,) the first of equal potentials
        chosen.append(candidates[rows, best])
        closest = with_candidate[rows, best]  # (b, n)
    index = torch.stack(chosen, dim=1)  # (b, k)
    return torch.gather(points, 1, index[..., None].expand(-1, -1, d))


# ----- variants: the same call shape as lloyd ------------------------------------------------------------------
def _run(points: Tensor, centroids: Tensor, steps: int, step, centre: bool = True, nearest=assign) -> ClusteringOutput:
    """Apply ``step(points, centroids) -> (new centroids, labels, empty mask)`` steps times, keeping trajectories;
    with ``centre`` (translation-invariant steps) on the task translated by its anchor, translated back.
    ``nearest(points, centroids) -> (b, n)`` is the variant's assignment rule, applied to the final centroids."""
    points, centroids = check_points_centroids(points, centroids)
    check_precise(points)
    check_steps(steps)
    if centre:
        working_points, current, anchor = centre_tasks(points, centroids)  # (b, n, d), (b, k, d), (b, 1, d)
    else:
        working_points, current, anchor = points, centroids, None
    trajectory, labels_per_step, empty_per_step = [centroids], [], []
    for _ in range(steps):
        current, labels, empty = step(working_points, current)
        trajectory.append(current if anchor is None else current + anchor)
        labels_per_step.append(labels)
        empty_per_step.append(empty)
    return ClusteringOutput(centroids=trajectory[-1], assignments=nearest(working_points, current),
                            centroid_trajectory=torch.stack(trajectory, dim=1),
                            assignment_trajectory=torch.stack(labels_per_step, dim=1),
                            empty_clusters=torch.stack(empty_per_step, dim=1))


def _iterate(points: Tensor, centroids: Tensor, steps: int, update) -> ClusteringOutput:  # translation invariant
    """Nearest assignment, then ``update(points, centroids, labels, members (b, k, n)) -> new centroids``."""

    def step(points, current):
        labels = assign(points, current)  # (b, n)
        members = torch.nn.functional.one_hot(labels, current.shape[1]).transpose(1, 2).bool()  # (b, k, n)
        return update(points, current, labels, members), labels, ~members.any(dim=2)

    return _run(points, centroids, steps, step)


@renamed_keyword("n_iter", "steps")
def soft_kmeans(points: Tensor, centroids: Tensor, steps: int = 10, *, beta: float = 10.0) -> ClusteringOutput:
    """MacKay's soft k-means: r_ij = softmax_j(-beta ||x_i - c_j||^2), c_j = sum_i r_ij x_i / sum_i r_ij.
    ``assignment_trajectory`` holds arg-max_j r_ij; ``empty_clusters`` flags clusters no point prefers."""
    if not beta > 0:
        raise InvalidInput(f"beta must be positive, got {beta!r}")

    def step(points, current):
        responsibilities = torch.softmax(-beta * squared_distances(points, current), dim=-1)  # (b, n, k)
        new = (responsibilities.transpose(1, 2) @ points) / responsibilities.sum(1)[..., None]  # (b, k, d)
        labels = responsibilities.argmax(-1)
        return new, labels, torch.nn.functional.one_hot(labels, current.shape[1]).sum(1) == 0

    return _run(points, centroids, steps, step)


@renamed_keyword("n_iter", "steps")
def spherical_kmeans(points: Tensor, centroids: Tensor, steps: int = 10) -> ClusteringOutput:
    """Dhillon & Modha on unit-norm data: a_i = argmax_j x_i.c_j, c_j = sum_{a_i=j} x_i / ||sum||.
    An empty cluster takes the normalised sum of all points (the transformer's rule: uniform linear attention)."""

    def step(points, current):
        labels = largest_cosine(points, current)  # (b, n)
        sums, counts = cluster_sums(points, labels, current.shape[1])
        sums = torch.where(counts[..., None] > 0, sums, points.sum(1, keepdim=True).expand_as(sums))
        return sums / sums.norm(dim=-1, keepdim=True), labels, counts == 0

    # cosines are not translation invariant
    return _run(points, centroids, steps, step, centre=False, nearest=largest_cosine)


def largest_cosine(points: Tensor, centroids: Tensor) -> Tensor:
    """Spherical k-means' assignment a_i = argmax_j x_i.c_j (unit-norm data and centres), (b, n), ties to the lowest
    index."""
    return first_argmin(-(centroids @ points.transpose(1, 2)), dim=1)


TRIM_RULES = ("quantile", "global", "normmax")


def normmax_limit_reference(z: Tensor) -> Tensor:
    """The alpha -> inf limit of alpha-normmax for one score vector z (N,): argmax over the simplex of
    <z, p> - max_i p_i, which is uniform on the top-m entries, m maximising (z_(1) + ... + z_(m) - 1) / m.

    Derivation. Fix t = max_i p_i in [1/N, 1]. Under 0 <= p_i <= t and sum p = 1, <z, p> is largest when the
    mass fills the largest scores to t in order: p = t on the top m = floor(1/t), the rest 1 - m t on the next.
    On each interval t in (1/(m+1), 1/m] the objective t (z_(1) + ... + z_(m)) + (1 - m t) z_(m+1) - t is
    linear in t, so its maximum sits at an end point t = 1/m: p uniform on the top m, objective
    (z_(1) + ... + z_(m) - 1) / m. The maximum over the simplex is the best of these N candidates.

    Here every candidate p_m is built and the objective <z, p_m> - max_i p_m,i evaluated directly, in float64.
    Ties: the smallest maximising m, and among equal scores the lower index first (a stable sort).
    Returns the weights (N,) in z's dtype.
    """
    scores = z.to(torch.float64)  # (N,)
    size = scores.shape[0]
    order = torch.argsort(scores, descending=True, stable=True)  # (N,)
    ranked = scores[order]  # (N,) z_(1) >= ... >= z_(N)
    top = torch.arange(1, size + 1, dtype=torch.float64, device=scores.device)  # (N,) m = 1..N
    columns = torch.arange(size, device=scores.device)  # (N,)
    candidates = (columns[None, :] < top[:, None]).to(torch.float64) / top[:, None]  # (N, N): row m-1 = p_m
    objective = candidates @ ranked - candidates.amax(dim=1)  # (N,) <z, p_m> - max_i p_m,i
    best = int(torch.argmax(objective))  # first maximiser: the smallest m
    weights = torch.zeros_like(scores)
    weights[order[: best + 1]] = 1.0 / (best + 1)
    return weights.to(z.dtype)


def _normmax_trimmed_means(points: Tensor, centroids: Tensor, members: Tensor, gamma: float) -> Tensor:
    """Per task and cluster: z_i = -gamma ||c_j - x_i||^2 over the members (all points if there are none), the
    centre becomes sum_i w_i x_i with w = ``normmax_limit_reference(z)``. Returns (b, k, d)."""
    new = torch.empty_like(centroids)  # (b, k, d)
    for task in range(points.shape[0]):
        for cluster in range(centroids.shape[1]):
            chosen = members[task, cluster]  # (n,)
            if not bool(chosen.any()):
                chosen = torch.ones_like(chosen)
            candidates = points[task][chosen].to(torch.float64)  # (m, d)
            centre = centroids[task, cluster].to(torch.float64)  # (d,)
            z = -gamma * ((candidates - centre) ** 2).sum(dim=1)  # (m,)
            new[task, cluster] = (normmax_limit_reference(z) @ candidates).to(points.dtype)
    return new


@renamed_keyword("n_iter", "steps")
def trimmed_kmeans(points: Tensor, centroids: Tensor, steps: int = 10, *, rule: str = "quantile",
                   quantile: float = 0.95, trim: float = 0.05, gamma: float = 10.0) -> ClusteringOutput:
    """Trimmed k-means, three trimming rules after the nearest-centre assignment:

    * ``quantile`` (the authors' utils.py): per cluster, the mean of the members whose squared distance is at
      most the cluster's ``quantile`` (0.95) of squared distances;
    * ``global`` (Cuesta-Albertos, Gordaliza & Matran 1997): keep the ceil((1 - trim) n) points closest to their
      nearest centre overall, then the means of the kept members;
    * ``normmax`` (the normmax transformer's alpha -> inf rule): per cluster, z_i = -gamma ||c_j - x_i||^2 over the
      members (all points if there are none), the mean of the top m members, m = argmax_m (sum_top_m z - 1) / m
      (``normmax_limit_reference``, written from the mathematics, independent of the model's code).

    An empty cluster keeps its centre (``quantile``, ``global``).
    """
    check_choice(rule, "rule", TRIM_RULES)
    if not 0 < quantile <= 1:
        raise InvalidInput(f"quantile must be in (0, 1], got {quantile!r}")
    if not 0 <= trim < 1:
        raise InvalidInput(f"trim must be in [0, 1), got {trim!r}")
    if not gamma > 0:
        raise InvalidInput(f"gamma must be positive, got {gamma!r}")

    def update(points, current, labels, members):
        if rule == "normmax":
            return _normmax_trimmed_means(points, current, members, gamma)
        sqd = squared_distances(points, current).transpose(1, 2)  # (b, k, n)
        if rule == "quantile":
            masked = torch.where(members, sqd, torch.full_like(sqd, float("nan")))
            threshold = torch.nanquantile(masked, quantile, dim=2, keepdim=True)  # (b, k, 1)
            kept = members & (sqd <= threshold)
        else:  # global
            nearest = sqd.amin(dim=1)  # (b, n)
            keep_count = math.ceil((1 - trim) * points.shape[1])
            order = torch.argsort(nearest, dim=1, stable=True)[:, :keep_count]
            inlier = torch.zeros_like(nearest, dtype=torch.bool).scatter(1, order, True)  # (b, n)
            kept = members & inlier[:, None, :]
        weights = kept.to(points.dtype)
        count = weights.sum(2, keepdim=True)
        means = (weights @ points) / count.clamp_min(1)
        return torch.where(count > 0, means, current)

    return _iterate(points, centroids, steps, update)


@renamed_keyword("n_iter", "steps")
def robust_kmeans(points: Tensor, centroids: Tensor, steps: int = 10, *, gamma: float = 0.01) -> ClusteringOutput:
    """The authors' robust k-means (their utils.py): after the nearest assignment, c_j = sum_i w_i x_i with
    w = sparsemax over the members of (-gamma ||x_i - c_j||^2 / sqrt(d)) (all points if there are none)."""
    from entmax import sparsemax

    if not gamma > 0:
        raise InvalidInput(f"gamma must be positive, got {gamma!r}")

    def update(points, current, labels, members):
        sqd = squared_distances(points, current).transpose(1, 2)  # (b, k, n)
        candidates = torch.where(members.any(dim=2, keepdim=True), members, torch.ones_like(members))
        logits = torch.where(candidates, -gamma * sqd / math.sqrt(points.shape[2]), torch.full_like(sqd, -1e30))
        return sparsemax(logits, dim=2) @ points

    return _iterate(points, centroids, steps, update)


def gumbel_max(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Index of max_i (logits_i + G_i) along the last axis, G_i = -log(-log U_i), U_i ~ U[0, 1) i.i.d.

    P(index = i) = softmax(logits)_i (the Gumbel-max trick). The uniforms are one ``torch.rand(logits.shape)``
    call from ``generator`` (torch's global RNG if None), in ``logits``' dtype. U = 0 gives G = -inf, so that
    entry is never picked over a finite one. Returns int64 of shape ``logits.shape[:-1]``.
    """
    draws = uniform(logits.shape, generator, logits.dtype, logits.device)  # [0, 1)
    gumbel = -torch.log(-torch.log(draws))  # Gumbel(0, 1)
    return (logits + gumbel).argmax(dim=-1)


@renamed_keyword("n_iter", "steps")
def randomized_kmedoids(points: Tensor, centroids: Tensor, steps: int = 10, *,
                        generator: torch.Generator | int | None = None) -> ClusteringOutput:
    """Randomized k-medoids: after the nearest assignment every centre becomes a member drawn uniformly at random
    (any point if the cluster is empty), by Gumbel-max over logits 0 on the candidates and -inf elsewhere.

    One (b, k, n) uniform tensor is drawn per step from ``generator`` (an int seeds a fresh one), which is the
    stream the k-medoids transformer's attention 3 draws its Gumbel noise from. Sampling is random, so an exact
    comparison of two samplers needs the same random numbers: with one stream both arg-maxes are the same
    deterministic function of the uniforms (the members' shared logit cancels), with different streams only the
    distributions could be compared.
    """
    generator = check_generator(generator, device=points.device)

    def update(points, current, labels, members):
        candidates = members | ~members.any(dim=2, keepdim=True)  # (b, k, n): all points for an empty cluster
        logits = torch.zeros(candidates.shape, dtype=points.dtype, device=points.device)  # (b, k, n)
        logits = logits.masked_fill(~candidates, float("-inf"))
        pick = gumbel_max(logits, generator)  # (b, k)
        return torch.gather(points, 1, pick[..., None].expand(-1, -1, points.shape[2]))  # (b, k, d)

    return _iterate(points, centroids, steps, update)
