"""The slot-specific part on one crowded pair (``interp.instruments.symmetry.crowded_pair``), its figure and its report
section: the pair is the closest same-component pair by brute force; an exactly slot-equivariant step (the one-hot
Lloyd construction, a model without codes) has no slot-specific part and the swap changes nothing; on main-onehot the
moves are those of plain forwards and the swap hands each centroid the other's slot-specific part."""

import itertools
import math

import pytest
import torch

from interp import KMeansTransformer
from interp.constructions import lloyd_transformer
from interp.instruments.symmetry import component_means, component_of, crowded_pair
from interp.model.checkpoint import load_model
from interp.model.config import learned_model_config
from interp.report.explanation import ExplanationSettings, pair_of_report
from interp.report.page import Report
from interp.report.plots import MAX_WIDTH, crowded_pair_figure
from interp.report.sections import crowded_pair_section, crowded_pair_sentences
from interp.tasks import TaskConfig, init_centroids, sample_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tasks(n: int, d: int, k: int, batch: int, seed: int, dtype=torch.float64):
    drawn = sample_tasks(TaskConfig(n=n, d=d, k=k), batch, seed, dtype=dtype)
    return drawn.points, init_centroids(drawn.points, k, "random", seed + 1), drawn.labels


def brute_force_pair(points, init, labels):
    """(distance, task, i, j) of the closest two centroids that share their nearest component mean, by loops."""
    means = component_means(points, labels, int(labels.max()) + 1)
    components = component_of(init, means)
    best = (math.inf, None, None, None)
    for task in range(init.shape[0]):
        for i, j in itertools.combinations(range(init.shape[1]), 2):
            if components[task, i] == components[task, j]:
                best = min(best, (float((init[task, i].double() - init[task, j].double()).norm()), task, i, j))
    return best


def check_plane(pair):
    """The 2-D coordinates are the full-space ones projected on the orthonormal basis through the pair's midpoint."""
    assert torch.allclose(pair.basis @ pair.basis.T, torch.eye(2, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(pair.origin, pair.centroids.mean(0))
    assert torch.allclose(pair.centroids_2d, (pair.centroids - pair.origin) @ pair.basis.T)
    assert torch.allclose(pair.points_2d, (pair.points - pair.origin) @ pair.basis.T)
    assert torch.allclose(pair.moves_2d, pair.moves @ pair.basis.T)
    assert float((pair.component_mean - pair.origin) @ pair.basis[0]) >= 0  # axis 1 towards the component's mean


def test_construction_has_no_slot_specific_part_and_the_swap_changes_nothing():
    points, init, labels = tasks(n=60, d=3, k=4, batch=3, seed=5)
    model = lloyd_transformer(3, 4, 1, embedding="onehot")  # exactly slot-equivariant, float64
    pair = crowded_pair(model, points, init, labels, n_permutations=24)  # 4! = 24: every slot order
    assert pair is not None and pair.exhaustive and pair.n_permutations == 24
    distance, task, i, j = brute_force_pair(points, init, labels)
    assert (pair.task, pair.slots) == (task, (i, j)) and pair.distance == pytest.approx(distance)
    assert float((pair.swapped_moves - pair.moves).abs().max()) < 1e-12 and pair.swap_change < 1e-12
    assert float(pair.specific.abs().max()) < 1e-12 and float(pair.swapped_specific.abs().max()) < 1e-12
    assert pair.at_rounding_level and float(pair.monte_carlo_error.max()) == 0.0
    assert torch.isnan(pair.swap_cosine).all() and math.isnan(pair.taken_over)  # no direction to compare
    assert pair.plane_share == pytest.approx(1.0)  # two distinct moves span the plane
    check_plane(pair)


def test_model_without_codes_has_no_slot_specific_part():
    points, init, labels = tasks(n=128, d=32, k=10, batch=4, seed=3, dtype=torch.float32)
    pair = crowded_pair(load_model("main-none"), points, init, labels, n_permutations=16)
    assert pair is not None and pair.at_rounding_level
    assert pair.swap_change < 1e-5 and float(pair.specific_fraction.max()) < 1e-5  # float32 rounding
    # the pair's two centroids start in one component: the component mean nearest to both
    means = component_means(points, labels, 10)
    assert component_of(pair.centroids[None], means[pair.task:pair.task + 1]).tolist() == [[pair.component] * 2]


def test_no_shared_component_gives_no_pair():
    points, init, labels = tasks(n=60, d=3, k=4, batch=2, seed=5)
    means = component_means(points, labels, 4)
    one_each = means.to(points.dtype)  # (b, 4, d): one centroid at every component's mean
    assert crowded_pair(lloyd_transformer(3, 4, 1, embedding="onehot"), points, one_each, labels) is None
    assert "no crowded pair" in crowded_pair_sentences(None, 2)


@pytest.fixture(scope="module")
def onehot_pair(one_torch_thread):
    model = load_model("main-onehot")
    points, init, labels = tasks(n=512, d=32, k=10, batch=8, seed=0, dtype=torch.float32)
    return model, points, init, labels, crowded_pair(model, points, init, labels, n_permutations=128, generator=1)


def test_learned_pair_shares_a_component_and_the_swap_exchanges_the_slots_parts(onehot_pair):
    model, points, init, labels, pair = onehot_pair
    distance, task, i, j = brute_force_pair(points, init, labels)
    assert (pair.task, pair.slots) == (task, (i, j))
    # both centroids are points of the component they are said to start in
    own = points[task][labels[task] == pair.component].double()
    assert all(bool((own - centroid).norm(dim=-1).min() < 1e-6) for centroid in pair.centroids)
    # the moves are those of plain forwards: given order, and the two slots swapped (output mapped back)
    order = torch.arange(10)
    order[i], order[j] = j, i
    with torch.no_grad():
        given = model(points[task:task + 1], init[task:task + 1], steps=1).centroids[0].double()
        swapped = model(points[task:task + 1], init[task:task + 1, order], steps=1).centroids[0].double()
    start = init[task].double()
    assert torch.allclose(pair.moves, given[[i, j]] - start[[i, j]], atol=1e-5)
    assert torch.allclose(pair.swapped_moves, swapped[[j, i]] - start[[i, j]], atol=1e-5)  # A ran in slot j
    # the slot-specific part is a large share of both moves, and the swap hands each centroid the other's
    assert not pair.at_rounding_level and float(pair.specific_fraction.min()) > 0.3
    assert float(pair.swap_cosine.min()) > 0.5 and pair.taken_over > 0.5
    assert pair.swap_change > 0.1
    assert float(pair.monte_carlo_error.max()) < 0.2 * float(pair.moves.norm(dim=-1).min())
    check_plane(pair)
    assert 0.5 < pair.plane_share <= 1.0


def test_figure_shows_both_orders_with_slot_legends_and_true_moves(onehot_pair):
    *_, pair = onehot_pair
    i, j = pair.slots
    figure = crowded_pair_figure(pair, "main-onehot")
    assert figure.layout.width <= MAX_WIDTH and "crowded pair" in figure.layout.title.text
    assert "main-onehot" in figure.layout.title.text
    assert figure.layout.xaxis.title.text and figure.layout.yaxis.title.text
    legend = [trace.name for trace in figure.data if trace.showlegend is not False]
    assert len(legend) == len(set(legend))  # every entry once
    assert {f"slot {i}", f"slot {j}"} <= set(legend)
    assert any(name.startswith("symmetric part") for name in legend)
    assert any(name.startswith(f"points slot {i} takes") for name in [trace.name for trace in figure.data])
    panels = {"x": (pair.moves_2d, (i, j)), "x2": (pair.swapped_moves_2d, (j, i))}
    for axis, (moves, slot_of) in panels.items():
        for centroid in (0, 1):  # the arrow of the slot holding each centroid: from it, along its move
            arrow = next(trace for trace in figure.data if trace.xaxis == axis and trace.name == f"slot "
                         f"{slot_of[centroid]}" and trace.mode == "lines+markers")
            start = pair.centroids_2d[centroid]
            assert arrow.x[0] == pytest.approx(float(start[0])) and arrow.y[0] == pytest.approx(float(start[1]))
            assert arrow.x[1] == pytest.approx(float(start[0] + moves[centroid, 0]))
            assert arrow.y[1] == pytest.approx(float(start[1] + moves[centroid, 1]))
        shown = sum(len(trace.x) for trace in figure.data if trace.xaxis == axis and trace.name.startswith("points"))
        assert shown == len(pair.points)  # every point of the component, coloured by one of the two slots


def test_report_section_states_the_measured_numbers():
    settings = ExplanationSettings(tasks=4, n=128, pair_permutations=16, seed=5)
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(4, 3, "onehot")).eval()  # random weights: reads its slot codes
    report = Report("t")
    pair = crowded_pair_section(report, model, settings)
    text = "".join(report.parts)
    assert "<h2>The slot-specific part on one crowded pair</h2>" in text
    assert pair is not None and pair.exhaustive  # 3! = 6 <= 16 orders
    again, _ = pair_of_report(model, settings)  # seeded: the same pair
    assert torch.equal(again.moves, pair.moves)
    assert f"slots {pair.slots[0]} and {pair.slots[1]}" in text
    assert f"{float(pair.specific_fraction[0]):.2f} of the move of A" in text
    assert f"cosine {float(pair.swap_cosine[0]):.2f} (A)" in text
    assert text.count('class="plotly-graph-div"') == 1
    no_codes = KMeansTransformer(learned_model_config(4, 3, "none")).eval()
    report = Report("t")
    crowded_pair_section(report, no_codes, settings, "it has no slot codes")
    text = "".join(report.parts)
    assert "No slot-specific part:</b> it has no slot codes. Measured" in text and "rounding level" in text
