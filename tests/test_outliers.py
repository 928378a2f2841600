"""Instruments for heavy-tailed tasks (interp.instruments.outliers) on tasks whose answers are known by construction."""

from __future__ import annotations

import pytest
import torch

from interp._checks import InvalidInput
from interp.algorithms import lloyd
from interp.instruments.outliers import (
    attend_to_self,
    bulk_centre,
    bulk_starts,
    cell_offsets,
    far_from_bulk,
    mixed_run,
    radial_distances,
)
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config


def _bulk_and_one_outlier() -> torch.Tensor:
    """One task (1, 11, 2): ten points on the x axis at 0.0, 0.1, ..., 0.9 and one point at (100, 0)."""
    bulk = torch.stack([torch.arange(10, dtype=torch.float64) / 10, torch.zeros(10, dtype=torch.float64)], 1)
    return torch.cat([bulk, torch.tensor([[100.0, 0.0]], dtype=torch.float64)])[None]


def test_radial_distances_and_far_points_by_construction():
    points = _bulk_and_one_outlier()
    torch.testing.assert_close(bulk_centre(points), torch.tensor([[[0.5, 0.0]]], dtype=torch.float64))  # 6th of 11
    distances = radial_distances(points)[0]
    torch.testing.assert_close(distances[:10], (torch.arange(10, dtype=torch.float64) / 10 - 0.5).abs())
    assert float(distances[10]) == pytest.approx(99.5)
    # radii sorted: 0, .1, .1, .2, .2, .3, .3, .4, .4, .5, 99.5; the 0.9 quantile lies at position 9: 0.5
    assert far_from_bulk(points, points, 0.9)[0].tolist() == [False] * 10 + [True]
    centroids = torch.tensor([[[0.5, 0.45], [0.5, 0.55], [3.0, 0.0]]], dtype=torch.float64)
    assert far_from_bulk(centroids, points, 0.9)[0].tolist() == [False, True, True]  # 0.45 <= 0.5 < 0.55
    with pytest.raises(InvalidInput, match="quantile"):
        far_from_bulk(points, points, 1.5)


def test_bulk_starts_draw_distinct_bulk_points_and_are_seeded():
    points = _bulk_and_one_outlier().repeat(4, 1, 1)
    starts = bulk_starts(points, 5, 0.9, generator=3)
    assert starts.shape == (4, 5, 2)
    assert not bool((starts[..., 0] > 1).any())  # never the outlier
    for task in range(4):
        assert len({tuple(row.tolist()) for row in starts[task]}) == 5  # five distinct points
    assert torch.equal(starts, bulk_starts(points, 5, 0.9, generator=3))
    assert not torch.equal(starts, bulk_starts(points, 5, 0.9, generator=4))
    assert torch.equal(bulk_starts(points, 10, 0.9, generator=0).sort(1).values[0, :, 0],
                       torch.arange(10, dtype=torch.float64) / 10)  # all ten bulk points
    with pytest.raises(InvalidInput, match="fewer than k=11"):
        bulk_starts(points, 11, 0.9)


def test_mixed_run_all_lloyd_all_step_and_one_slot():
    generator = torch.Generator().manual_seed(0)
    points = torch.rand(3, 30, 2, generator=generator, dtype=torch.float64)
    init = points[:, :4].clone()

    def halve(p, c):
        return 0.5 * c

    everything = torch.ones(3, 4, dtype=torch.bool)
    torch.testing.assert_close(mixed_run(halve, points, init, everything, 3),
                               lloyd(points, init, 3).centroid_trajectory, rtol=0, atol=1e-14)
    nothing = mixed_run(halve, points, init, ~everything, 3)
    torch.testing.assert_close(nothing[:, -1], init / 8, rtol=0, atol=0)
    first = torch.zeros(3, 4, dtype=torch.bool)
    first[:, 0] = True
    one = mixed_run(halve, points, init, first, 2)
    step1 = lloyd(points, init, 1).centroids
    torch.testing.assert_close(one[:, 1, 0], step1[:, 0], rtol=0, atol=1e-14)
    torch.testing.assert_close(one[:, 1, 1:], init[:, 1:] / 2, rtol=0, atol=0)
    torch.testing.assert_close(one[:, 2, 0], lloyd(points, one[:, 1], 1).centroids[:, 0], rtol=0, atol=1e-14)
    with pytest.raises(InvalidInput, match="selected"):
        mixed_run(halve, points, init, torch.ones(3, 5, dtype=torch.bool), 1)


def test_cell_offsets_zero_at_the_cell_means_and_the_shift_otherwise():
    cluster_a = torch.tensor([[0.0, 0.0], [0.2, 0.0], [0.1, 0.3]], dtype=torch.float64)
    cluster_b = torch.tensor([[5.0, 5.0], [5.4, 5.0]], dtype=torch.float64)
    points = torch.cat([cluster_a, cluster_b])[None]  # (1, 5, 2)
    means = torch.stack([cluster_a.mean(0), cluster_b.mean(0), torch.tensor([50.0, 50.0], dtype=torch.float64)])[None]
    cells = cell_offsets(points, means)  # the third centroid is far from every point: an empty cell
    assert cells.labels[0].tolist() == [0, 0, 0, 1, 1] and cells.sizes[0].tolist() == [3, 2, 0]
    torch.testing.assert_close(cells.offsets, torch.zeros(1, 3, 2, dtype=torch.float64), rtol=0, atol=1e-14)
    shift = torch.tensor([0.05, -0.1], dtype=torch.float64)
    moved = cell_offsets(points, means + shift)
    torch.testing.assert_close(moved.offsets[0, :2], shift.expand(2, 2), rtol=0, atol=1e-14)
    assert float(moved.offsets[0, 2].abs().max()) == 0.0  # an empty cell has no offset


def test_attend_to_self_replaces_exactly_the_marked_rows():
    torch.manual_seed(1)
    d, k, n = 3, 4, 12
    model = KMeansTransformer(learned_model_config(d, k)).double().eval()
    generator = torch.Generator().manual_seed(2)
    points = torch.rand(2, n, d, generator=generator, dtype=torch.float64)
    init = points[:, :k].clone()
    rows = torch.zeros(2, n, dtype=torch.bool)
    rows[0, 3] = rows[1, 0] = rows[1, 7] = True
    name = "blocks.0.attn_xx.hook_pattern"
    seen = {}

    def record(pattern, hook):
        seen["pattern"] = pattern.clone()

    _, cache = model.run_with_cache(points, init, steps=1, names_filter=[name])
    before = cache[name]
    out = model.run_with_hooks(points, init, steps=1, fwd_hooks=attend_to_self(model, "attn_xx", rows)
                               + [(name, record)])
    after = seen["pattern"]
    torch.testing.assert_close(after[~rows], before[~rows], rtol=0, atol=0)
    torch.testing.assert_close(after[rows], torch.eye(n, dtype=torch.float64)[[3, 0, 7]], rtol=0, atol=0)
    assert float((out.centroids - model(points, init, steps=1).centroids).detach().abs().max()) > 1e-6  # it acts
    with pytest.raises(InvalidInput, match="self-attention"):
        attend_to_self(model, "attn_xc", rows)
    with pytest.raises(InvalidInput, match="rows has shape"):
        model.run_with_hooks(points, init, steps=1, fwd_hooks=attend_to_self(model, "attn_xx", rows[:, :5]))
