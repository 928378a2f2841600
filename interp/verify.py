"""``interp verify``: the exact constructions against Lloyd layer by layer, and the authors' finite-gamma validation.

Two checks, both of which can fail (``interp verify`` then exits 1):

* every exact construction (paper 1, "Transformer Circuits Can Realize Clustering Algorithms", Theorem 2.1; paper 2,
  "Leaner Transformers Can Easily Learn to Cluster", Theorem 2.1 with the binary embedding; the dot-product + ReLU^2
  FFN construction) must reproduce batched float64 Lloyd to ``EXACT_TOLERANCE`` at every layer, with identical
  assignments. The finite-gamma row (gamma = 1e4) is an approximation and is shown, not checked;
* the authors' numerical validation (``numerical_validation.ipynb`` of rithram/kmeans-trf @ bc72e68: d = 2,
  n = 10000, k = 5, gamma = 1e4, 10 layers) must give the log objectives the notebook printed,
  ``AUTHORS_PRINTOUT``, to ``PRINTOUT_TOLERANCE`` at every layer.

``authors_validation_task`` rebuilds the notebook's data bit for bit. The notebook seeds torch with 5487 and uses
only torch's CPU generator, in this order:

1. the k true centres, one ``rand(k, d)`` call (float32);
2. for each centre in turn, ``n // k`` separate draws of ONE d-vector each (``MultivariateNormal(loc, 0.01 I)
   .sample()`` in a Python loop), i.e. x = loc + 0.1 * eps with eps a fresh standard-normal d-vector per point.
   Tensors with fewer than 16 elements take torch's scalar Box-Muller path, so this is NOT the stream of one
   ``randn(n, d)`` call (the vectorised 16-wide path): batching the draw gives similar but different data;
3. per-dimension min-max in float32, ``x - min`` then ``/ max`` of the shifted data;
4. one ``randperm(n)`` shuffle; the initial centres are the first k shuffled points.

The same stream is drawn here from a private ``torch.Generator`` (the global RNG is left untouched).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput
from interp.algorithms import lloyd, log_objective
from interp.model.constructions import lloyd_transformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks

FINITE_GAMMA_ROW = "onehot / linear, gamma=1e4"
CONSTRUCTIONS: dict[str, dict] = {
    "onehot / linear C-update (paper 1)": dict(embedding="onehot", centroid_update="linear"),
    "onehot / AHAT C-update (paper 2)": dict(embedding="onehot", centroid_update="hardmax"),
    "binary d+ceil(log2 k) (paper 2)": dict(embedding="binary"),
    "dot-product + ReLU^2 FFN (Thm 2.2)": dict(embedding="onehot", attention="dot"),
    "onehot, literal self-attention": dict(embedding="onehot", self_attention="literal"),
    FINITE_GAMMA_ROW: dict(embedding="onehot", gamma=1e4),
}
SIZES = [(500, 2, 5), (512, 8, 6), (512, 32, 10), (1000, 16, 25)]  # (n, d, k)
QUICK_SIZES = [(60, 2, 3), (80, 3, 4)]
EXACT_TOLERANCE = 1e-9  # float64; the exact constructions reach ~1e-15

# the authors' validation: data, model and the log objectives their notebook printed (initial, then per layer)
SEED = 5487
N_CLUSTERS = 5  # k
N_DIMS = 2  # d
POINTS_PER_CLUSTER = 2000  # n = k * 2000 = 10000
STD = 0.1  # covariance 0.01 * I
AUTHORS_GAMMA = 1e4
AUTHORS_PRINTOUT = (6.44, 5.78, 5.47, 4.96, 4.69, 4.61, 4.59, 4.59, 4.59, 4.59, 4.59)  # transformer, layers 0..10
PRINTOUT_TOLERANCE = 0.01  # the printout has two decimals


@dataclass(frozen=True)
class VerifyRow:
    """Per-layer max |transformer - Lloyd| over the tasks, and the fraction of equal assignments."""

    construction: str
    size: tuple[int, int, int]
    max_error_per_layer: list[float]
    assignment_agreement: float
    tasks_with_empty_cluster: int

    @property
    def exact(self) -> bool:
        """Whether this row is an exact construction (checked), not the finite-gamma approximation (shown)."""
        return self.construction != FINITE_GAMMA_ROW


@dataclass(frozen=True)
class VerifyOutcome:
    """What ``run_verify`` found: the printed report and the failed checks (empty when everything passed)."""

    report: str
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def authors_validation_task(dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Points (1, 10000, 2) and initial centroids (1, 5, 2) exactly as the authors' notebook draws them.

    Generated in float32 like the notebook, then cast to ``dtype``.
    """
    k, d, m = N_CLUSTERS, N_DIMS, POINTS_PER_CLUSTER
    gen = torch.Generator().manual_seed(SEED)
    centres = torch.rand((k, d), generator=gen)  # (k, d) float32, true centres ~ U[0,1]^d
    # one standard-normal d-vector per point, in the notebook's order (cluster by cluster)
    eps = torch.stack([torch.randn(d, generator=gen) for _ in range(k * m)])  # (n, d)
    std = torch.tensor(STD, dtype=torch.float32)  # = cholesky(0.01 I) diagonal in float32
    points = centres.repeat_interleave(m, dim=0) + std * eps  # (n, d), cluster j in rows j*m..(j+1)*m-1
    points = points - points.amin(dim=0)  # (n, d) per-dimension min-max, in the notebook's two steps
    points = points / points.amax(dim=0)
    points = points[torch.randperm(k * m, generator=gen)]  # (n, d) shuffled
    points = points.to(dtype)[None]  # (1, n, d)
    return points, points[:, :k].clone()  # initial centroids (1, k, d): first k shuffled points


def validation_table(gamma: float = AUTHORS_GAMMA, n_layers: int = 10,
                     dtype: torch.dtype = torch.float64) -> list[dict]:
    """Per layer t = 0..n_layers: {'layer': t, 'transformer': log objective, 'lloyd': log objective}.

    Transformer: ``lloyd_transformer`` with one-hot embedding, identity self-attentions (authors' ``osa``),
    normalised linear centre update (``ldp``) and softmax attention at inverse temperature ``gamma`` without
    1/sqrt(D), as the authors' ``CModel``. Lloyd: ``n_layers`` iterations from the same centroids. Layer 0 is
    the initial centroids.
    """
    points, init = authors_validation_task(dtype)  # (1, n, d), (1, k, d)
    model = lloyd_transformer(N_DIMS, N_CLUSTERS, n_layers, embedding="onehot", gamma=gamma, dtype=dtype)
    with torch.no_grad():
        trf = model(points, init).centroid_trajectory  # (1, T+1, k, d)
    ref = lloyd(points, init, n_layers).centroid_trajectory  # (1, T+1, k, d)
    return [
        {
            "layer": t,
            "transformer": log_objective(points, trf[:, t]).item(),
            "lloyd": log_objective(points, ref[:, t]).item(),
        }
        for t in range(n_layers + 1)
    ]


def verify_constructions(sizes=SIZES, n_layers: int = 10, n_tasks: int = 5, seed: int = 0) -> list[VerifyRow]:
    """Every construction in float64 against Lloyd with the constructions' empty-cluster rule ("nearest_code")."""
    rows = []
    for n, d, k in sizes:
        tasks = sample_tasks(TaskConfig(n=n, d=d, k=k), n_tasks, seed, dtype=torch.float64)
        init = init_centroids(tasks.points, k, "random", seed + 1)  # (b, k, d)
        for name, kwargs in CONSTRUCTIONS.items():
            model = lloyd_transformer(d, k, n_layers=n_layers, **kwargs)
            with torch.no_grad():
                out = model(tasks.points, init)
            reference = lloyd(tasks.points, init, n_layers, empty="nearest_code", codes=model.codes)
            error = (out.centroid_trajectory - reference.centroid_trajectory).abs()  # (b, T+1, k, d)
            # the labels the construction's streams carry (its decoded scratch slots) against Lloyd's
            agreement = (out.readout_trajectory == reference.assignment_trajectory).double().mean().item()
            rows.append(VerifyRow(
                construction=name, size=(n, d, k),
                max_error_per_layer=error.amax(dim=(0, 2, 3))[1:].tolist(),
                assignment_agreement=agreement,
                tasks_with_empty_cluster=int(reference.empty_clusters.any(dim=(1, 2)).sum()),
            ))
    return rows


def construction_failures(rows: list[VerifyRow], tolerance: float = EXACT_TOLERANCE) -> list[str]:
    """One message per exact row whose error exceeds ``tolerance`` at some layer (or is NaN), or whose
    assignments differ from Lloyd's anywhere; the finite-gamma row is not checked."""
    failures = []
    for row in rows:
        if not row.exact:
            continue
        n, d, k = row.size
        where = f"{row.construction} at n={n} d={d} k={k}"
        bad_layers = [t + 1 for t, e in enumerate(row.max_error_per_layer) if not e <= tolerance]  # NaN fails
        if bad_layers:
            worst = max(row.max_error_per_layer, key=lambda e: e if e == e else math.inf)
            failures.append(f"{where}: max error {worst:.1e} > {tolerance:g} at layer(s) "
                            f"{', '.join(map(str, bad_layers))}")
        if row.assignment_agreement != 1.0:
            failures.append(f"{where}: assignments agree with Lloyd's on {100 * row.assignment_agreement:.2f}% only")
    return failures


def printout_failures(validation: list[dict], gamma: float, tolerance: float = PRINTOUT_TOLERANCE) -> list[str]:
    """Layers whose transformer log objective differs from ``AUTHORS_PRINTOUT`` by more than ``tolerance``.

    The printout is for gamma = 1e4 and layers 0..10: other gammas are not compared, other depths on the layers
    the printout has."""
    if gamma != AUTHORS_GAMMA:
        return []
    bad = [(row["layer"], row["transformer"], AUTHORS_PRINTOUT[row["layer"]]) for row in validation
           if row["layer"] < len(AUTHORS_PRINTOUT)
           and not abs(row["transformer"] - AUTHORS_PRINTOUT[row["layer"]]) <= tolerance]
    return [f"authors' validation: layer {t} log objective {got:.4f}, printout {want:.2f} (tolerance {tolerance:g})"
            for t, got, want in bad]


def format_report(rows: list[VerifyRow], validation: list[dict], gamma: float, failures: list[str],
                  n_tasks: int) -> str:
    """The table of ``interp verify`` and its final line ``verify: PASS`` or ``verify: FAIL (<what failed>)``."""
    lines = [f"Exact constructions vs batched Lloyd (float64, same initial centroids, {n_tasks} tasks per size)",
             "max |centroids_transformer - centroids_Lloyd| after each layer; assignment agreement over all layers;",
             f"checked: error <= {EXACT_TOLERANCE:g} at every layer and 100% agreement (the gamma=1e4 row is shown, "
             "not checked)", ""]
    for size in dict.fromkeys(row.size for row in rows):
        n, d, k = size
        lines.append(f"n={n} d={d} k={k}")
        n_layers = len(rows[0].max_error_per_layer)
        header = f"  {'construction':<38}" + "".join(f"{'L' + str(t + 1):>9}" for t in range(n_layers))
        lines.append(header + "   agree  empty  check")
        for row in (r for r in rows if r.size == size):
            errors = "".join(f"{e:>9.1e}" for e in row.max_error_per_layer)
            verdict = ("ok" if not construction_failures([row]) else "FAIL") if row.exact else "-"
            lines.append(f"  {row.construction:<38}{errors}  {100 * row.assignment_agreement:5.1f}%  "
                         f"{row.tasks_with_empty_cluster:>5}  {verdict:>5}")
        lines.append("")
    lines.append(f"Authors' numerical validation (numerical_validation.ipynb): d=2, n=10000, k=5, std 0.1, "
                 f"gamma={gamma:g}, {len(validation) - 1} layers")
    lines.append("log objective per layer (layer 0 = initial centroids)")
    lines.append("  " + f"{'layer':<13}" + "".join(f"{row['layer']:>7}" for row in validation))
    lines.append("  " + f"{'transformer':<13}" + "".join(f"{row['transformer']:>7.2f}" for row in validation))
    lines.append("  " + f"{'Lloyd':<13}" + "".join(f"{row['lloyd']:>7.2f}" for row in validation))
    lines.append("  " + f"{'|difference|':<13}"
                 + "".join(f"{abs(row['transformer'] - row['lloyd']):>7.3f}" for row in validation))
    lines.append("  authors' printout (transformer): " + " ".join(f"{v:.2f}" for v in AUTHORS_PRINTOUT))
    if gamma == AUTHORS_GAMMA:
        lines.append(f"  checked: transformer within {PRINTOUT_TOLERANCE:g} of the printout at every layer it has")
    else:
        lines.append(f"  not checked against the printout: it is for gamma={AUTHORS_GAMMA:g}")
    lines.append("")
    for failure in failures:
        lines.append(f"FAILED: {failure}")
    if failures:
        shown = "; ".join(failures[:3]) + (f"; and {len(failures) - 3} more" if len(failures) > 3 else "")
        lines.append(f"verify: FAIL ({shown})")
    else:
        lines.append("verify: PASS")
    return "\n".join(lines)


def run_verify(n_layers: int = 10, n_tasks: int = 5, gamma: float = AUTHORS_GAMMA,
               quick: bool = False) -> VerifyOutcome:
    """Run both checks; the outcome holds the report (table + final PASS/FAIL line) and the failed checks."""
    if not (gamma > 0 and not math.isnan(gamma)):
        raise InvalidInput(f"gamma must be positive, got {gamma}")
    rows = verify_constructions(QUICK_SIZES if quick else SIZES, n_layers=n_layers, n_tasks=n_tasks)
    validation = validation_table(gamma=gamma, n_layers=n_layers)
    failures = construction_failures(rows) + printout_failures(validation, gamma)
    return VerifyOutcome(report=format_report(rows, validation, gamma, failures, n_tasks), failures=tuple(failures))
