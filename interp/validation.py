"""The authors' numerical validation, re-run in torch (SPEC §2.4, §6.2).

``authors_validation_task`` rebuilds the data of the authors' ``numerical_validation.ipynb``
(rithram/kmeans-trf @ bc72e68) bit for bit; ``validation_table`` gives the per-layer log objectives of
the exact k-means transformer at finite inverse temperature next to Lloyd's from the same start.

Random-number call order (SPEC §6.2: identical data needs it). The notebook seeds torch with 5487 and
uses only torch's CPU generator, in this order:

1. the k true centres, one ``rand(k, d)`` call (float32);
2. for each centre in turn, ``n // k`` separate draws of ONE d-vector each
   (``MultivariateNormal(loc, 0.01 I).sample()`` in a Python loop), i.e. x = loc + 0.1 * eps with
   eps a fresh standard-normal d-vector per point. Tensors with fewer than 16 elements take torch's
   scalar Box-Muller path, so this is NOT the same stream as one ``randn(n, d)`` call (which takes the
   vectorised 16-wide path): batching the draw gives similar but different data (SPEC §6.2);
3. per-dimension min-max in float32, ``x - min`` then ``/ max`` of the shifted data;
4. one ``randperm(n)`` shuffle; the initial centres are the first k shuffled points.

The same stream is drawn here from a private ``torch.Generator`` (the global RNG is left untouched).
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp.algorithms import lloyd, log_objective
from interp.model.constructions import lloyd_transformer

SEED = 5487
N_CLUSTERS = 5  # k
N_DIMS = 2  # d
POINTS_PER_CLUSTER = 2000  # n = k * 2000 = 10000
STD = 0.1  # covariance 0.01 * I


def authors_validation_task(dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Points (1, 10000, 2) and initial centroids (1, 5, 2) exactly as the notebook draws them (SPEC §2.4).

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


def validation_table(gamma: float = 1e4, n_layers: int = 10, dtype: torch.dtype = torch.float64) -> list[dict]:
    """Per layer t = 0..n_layers: {'layer': t, 'transformer': log objective, 'lloyd': log objective}.

    Transformer: ``lloyd_transformer`` with one-hot embedding, identity self-attentions (authors' ``osa``),
    normalised linear centre update (``ldp``) and softmax attention at inverse temperature ``gamma``
    without 1/sqrt(D), as the authors' ``CModel`` (SPEC §2.3, §2.4). Lloyd: ``n_layers`` iterations from
    the same centroids. Layer 0 is the initial centroids. SPEC §6.2 targets at gamma = 1e4 (two decimals):
    transformer 6.44 5.78 5.47 4.96 4.69 4.61 4.59 x5; Lloyd 6.44 5.78 5.47 4.97 4.70 4.61 4.59 x5.
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
