"""The slot-specific-part study (analyses/slots.py): its instruments where the answer is known by mathematics (an
exactly slot-equivariant model has no slot-specific part and a slot swap changes nothing; hand-built crowding
quartiles, swap fractions, cosines and rankings), the slot-blind intervention, the committed JSON against its
predictions and the RESULTS.md section, and the command line's refusals."""

import json
import math
from dataclasses import replace

import pytest
import torch
from conftest import make_tasks

from analyses import slots
from analyses.failures import Prediction, verdict
from interp import KMeansTransformer
from interp import _arguments as arguments
from interp.constructions import lloyd_transformer
from interp.instruments.symmetry import model_step, symmetric_split
from interp.model.config import learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_model(d: int = 4, k: int = 5, seed: int = 0) -> KMeansTransformer:
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(d, k, embedding="onehot")).double().eval()


# ----- an exactly slot-equivariant model ----------------------------------------------------------------------------


def test_equivariant_construction_has_no_slot_specific_part_and_a_swap_changes_nothing():
    points, centroids = make_tasks(n=60, d=3, k=4, batch=3, seed=5)
    model = lloyd_transformer(3, 4, 1, embedding="onehot")
    split = symmetric_split(model, points, centroids, n_permutations=None)  # all 24 orders
    assert float(split.specific.abs().max()) < 1e-12
    step = model_step(model)
    direct = step(points, centroids)
    first, second = torch.tensor([0, 1, 2]), torch.tensor([3, 2, 0])
    swapped = slots.swap_slots(step(points, slots.swap_slots(centroids, first, second)), first, second)
    assert float((swapped - direct).abs().max()) < 1e-12  # the run on the swapped slots, mapped back, is the same
    assert float(slots.swap_fraction(direct, swapped, first, second).abs().max()) < 1e-12
    assert float(slots.relative_change(direct, swapped, direct - centroids, first, second).max()) < 1e-12
    # the construction's attn_xc keys read no code: making them slot-blind changes nothing
    blind = slots.slot_blind(model)
    assert float((model_step(blind)(points, centroids) - direct).abs().max()) == 0.0


def test_main_none_has_no_slot_specific_part():
    from interp.model.checkpoint import load_model

    model = load_model("main-none").eval()
    points, centroids = make_tasks(n=128, d=32, k=10, batch=2, seed=3, dtype=torch.float32)
    split = symmetric_split(model, points, centroids, n_permutations=4)
    assert float(split.specific.abs().max()) < 1e-5  # float32 rounding
    with pytest.raises(slots.InvalidInput, match="no code features"):
        slots.slot_blind(model)


def test_slot_blind_keys_are_equal_across_slots_and_the_rest_is_untouched():
    model = random_model()
    points, centroids = make_tasks(n=30, d=4, k=5, batch=2, seed=1)
    centroids[:, 1] = centroids[:, 0]  # two centroids at one position, in different slots
    name = "blocks.0.attn_xc.hook_scores"
    _, intact = model.run_with_cache(points, centroids, steps=1, names_filter=[name])
    blind = slots.slot_blind(model, "attn_xc", "W_K")
    _, cache = blind.run_with_cache(points, centroids, steps=1, names_filter=[name])
    assert float((intact[name][..., 0] - intact[name][..., 1]).abs().max()) > 1e-3
    assert float((cache[name][..., 0] - cache[name][..., 1]).abs().max()) < 1e-12
    for attention in ("attn_xx", "attn_cx", "attn_cc"):
        for matrix in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"):
            assert torch.equal(getattr(getattr(blind.layers[0], attention), matrix),
                               getattr(getattr(model.layers[0], attention), matrix))
    assert torch.equal(blind.layers[0].attn_xc.W_Q, model.layers[0].attn_xc.W_Q)
    with pytest.raises(slots.InvalidInput, match="matrix"):
        slots.slot_blind(model, "attn_xc", "W_X")


# ----- hand-built instruments ---------------------------------------------------------------------------------------


def test_crowding_quartiles_on_a_hand_built_line():
    positions = torch.tensor([0.0, 0.1, 1.0, 1.3, 3.0, 3.5, 7.0, 8.0])  # nearest distances .1 .1 .3 .3 .5 .5 1 1
    centroids = torch.stack([positions, torch.zeros(8)], -1)[None].double()  # (1, 8, 2)
    specific = torch.zeros(1, 8, 2, dtype=torch.float64)
    specific[0, :, 0] = torch.arange(8.0)  # norms 0..7
    update = 2 * specific + torch.tensor([0.0, 1.0], dtype=torch.float64)  # norms sqrt(4 j^2 + 1)
    crowded = torch.tensor([[True, True, True, False, False, False, False, False]])
    rows = slots.crowding_table(specific, update, specific, centroids, crowded)
    assert [row["count"] for row in rows] == [2, 2, 2, 2]
    assert [row["nn_distance"] for row in rows] == pytest.approx([0.1, 0.3, 0.5, 1.0])
    assert [row["specific"] for row in rows] == pytest.approx([0.5, 2.5, 4.5, 6.5])
    norms = [math.sqrt(4 * j * j + 1) for j in range(8)]
    assert [row["update"] for row in rows] == pytest.approx([(norms[i] + norms[i + 1]) / 2 for i in (0, 2, 4, 6)])
    assert [row["shares_component"] for row in rows] == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_components_covered_and_shared():
    means = torch.tensor([[[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]], dtype=torch.float64)
    centroids = torch.tensor([[[0.5, 0.0], [-0.5, 0.0], [9.0, 1.0]]], dtype=torch.float64)
    assert slots.covered(centroids, means).tolist() == [2.0]
    assert slots.shares_component(centroids, means).tolist() == [[True, True, False]]
    assert slots.crowded_pairs(centroids, means) == [(0, 0, 1)]


def test_swap_fraction_along_axis_and_consecutive_cosines():
    before = torch.randn(2, 3, 4, dtype=torch.float64)
    first, second = torch.tensor([0, 2]), torch.tensor([1, 0])
    traded = slots.swap_slots(before, first, second)  # the two outputs exchanged
    assert slots.swap_fraction(before, traded, first, second).tolist() == pytest.approx([1.0, 1.0])
    assert slots.swap_fraction(before, before, first, second).tolist() == pytest.approx([0.0, 0.0])
    centroids = torch.zeros(1, 2, 3, dtype=torch.float64)
    centroids[0, 1, 0] = 1.0  # the pair's axis is the first coordinate
    specific = torch.tensor([[[3.0, 4.0, 0.0], [0.0, 0.0, 5.0]]], dtype=torch.float64)
    assert slots.along_axis_fraction(specific, centroids, torch.tensor([0]), torch.tensor([1])).tolist() == \
        pytest.approx([9.0 / 50.0])
    parts = torch.randn(1, 2, 3, 2, dtype=torch.float64).expand(5, 2, 3, 2)
    assert slots.consecutive_cosines(parts).tolist() == pytest.approx([1.0, 1.0])
    alternating = parts * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)[:, None, None, None]
    assert slots.consecutive_cosines(alternating).tolist() == pytest.approx([-1.0, -1.0])


def test_ranking_and_statistics():
    wins = [(0, 0, slot, True) for slot in (1, 2, 3)] + [(1, 1, 2, True), (1, 2, 3, True), (1, 3, 1, False)]
    ranking = slots.fit_ranking(wins, 4)
    assert ranking[0] == 0 and ranking[-1] == 3
    assert slots.ranking_accuracy(wins, ranking, 3).tolist()[:2] == [1.0, 1.0]
    assert math.isnan(slots.ranking_accuracy(wins, ranking, 3).tolist()[2])  # a task without pairs
    stats = slots.mean_se(torch.tensor([1.0, 2.0, 3.0, math.nan]))
    assert (stats["mean"], stats["tasks"]) == (2.0, 3) and stats["se"] == pytest.approx(1 / math.sqrt(3))
    ratio = slots.ratio_se(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0]))
    assert ratio["mean"] == pytest.approx(0.5) and ratio["se"] == pytest.approx(0.0)


def test_one_centroid_per_component():
    points, _, labels = slots.draw(3, 7)
    starts = slots.one_per_component(points, labels, slots.K, 8)
    for task in range(3):
        for component in range(slots.K):
            rows = (points[task] == starts[task, component]).all(-1)
            assert bool(rows.any()) and bool((labels[task][rows] == component).all())


def test_measure_model_at_tiny_size_gives_every_verdict():
    from interp.model.checkpoint import load_model

    settings = replace(slots.QUICK, tasks=4, permutations=2, trajectory_tasks=2, trajectory_permutations=2, steps=2,
                       average_permutations=2)
    record = slots.measure_model("main-onehot", load_model("main-onehot").eval(), settings, slots.load_predictions())
    assert set(record["tests"]) == set(slots.HYPOTHESES)
    assert all(test["verdict"] in ("confirmed", "refuted", "pending") for test in record["tests"].values())
    assert [row["quartile"] for row in record["crowding"]] == [1, 2, 3, 4]


# ----- the committed results ----------------------------------------------------------------------------------------


def committed() -> dict:
    if not slots.DEFAULT_OUT.is_file():
        pytest.skip("analyses/results/slots.json is not there")
    return json.loads(slots.DEFAULT_OUT.read_text())


def test_results_follow_the_committed_predictions_and_the_verdict_rule():
    data = committed()
    predictions = slots.load_predictions()["predictions"]
    assert data["prediction_commit"]["commit"] and not data["prediction_commit"]["modified_since"]
    for record in data["models"].values():
        for key, test in record["tests"].items():
            entry = predictions[key]
            assert (test["prediction"]["value"], test["prediction"]["tolerance"], test["prediction"]["kind"]) == \
                (entry["value"], entry["tolerance"], entry["kind"])
            prediction = Prediction(**test["prediction"])
            assert test["verdict"] == verdict(prediction, test["measured"]["mean"])


def test_results_md_section_is_rendered_from_the_json():
    data = committed()
    text = slots.results_section(data)
    results = slots.HERE / "RESULTS.md"
    assert f"<!-- study:slots -->\n{text.rstrip()}\n<!-- /study:slots -->" in results.read_text()
    for name, record in data["models"].items():
        for key, test in record["tests"].items():
            cell = f"{test['measured']['mean']:.3f} (se {test['measured']['se']:.3f}) **{test['verdict']}**"
            assert cell in text, (name, key)
        for key in ("model", "one_random_order_per_step", "lloyd"):
            assert f"{record['objective'][key]['mean']:.3f}" in text
    assert "refuted" not in text or "**refuted**" in text


# ----- the command line ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "2"], "--tasks"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(slots.EXPLORATION_SEED)], "designed on"),
    (["--from-json"], "add --results-md"),
    (["--threads", "0"], "--threads"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        raise SystemExit(arguments.run(slots.main, slots.PROG, argv))
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert message in error[-1] and error[-1].startswith(slots.PROG)
