"""The slot-specific-part study (analyses/studies/slots/measure.py): its instruments where the answer is known by
mathematics (an
exactly slot-equivariant model has no slot-specific part and a slot swap changes nothing; hand-built crowding
quartiles, swap fractions, cosines and rankings), the slot-blind intervention, the committed JSON against its
predictions and the RESULTS.md section, and the command line's refusals."""

import copy
import json
import math
from dataclasses import asdict, replace

import pytest
import torch
from conftest import make_tasks

from analyses.framework.preregistration import Prediction, verdict
from analyses.studies.slots import measure as slots
from interp import KMeansTransformer
from interp import _arguments as arguments
from interp.constructions import lloyd_transformer
from interp.instruments.symmetry import model_step, slot_blind, symmetric_split
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
    blind = slot_blind(model)
    assert float((model_step(blind)(points, centroids) - direct).abs().max()) == 0.0


def test_main_none_has_no_slot_specific_part():
    from interp.model.checkpoint import load_model

    model = load_model("main-none").eval()
    points, centroids = make_tasks(n=128, d=32, k=10, batch=2, seed=3, dtype=torch.float32)
    split = symmetric_split(model, points, centroids, n_permutations=4)
    assert float(split.specific.abs().max()) < 1e-5  # float32 rounding
    with pytest.raises(slots.InvalidInput, match="no code features"):
        slot_blind(model)


def test_slot_blind_keys_are_equal_across_slots_and_the_rest_is_untouched():
    model = random_model()
    points, centroids = make_tasks(n=30, d=4, k=5, batch=2, seed=1)
    centroids[:, 1] = centroids[:, 0]  # two centroids at one position, in different slots
    name = "blocks.0.attn_xc.hook_scores"
    _, intact = model.run_with_cache(points, centroids, steps=1, names_filter=[name])
    blind = slot_blind(model, "attn_xc", "W_K")
    _, cache = blind.run_with_cache(points, centroids, steps=1, names_filter=[name])
    assert float((intact[name][..., 0] - intact[name][..., 1]).abs().max()) > 1e-3
    assert float((cache[name][..., 0] - cache[name][..., 1]).abs().max()) < 1e-12
    for attention in ("attn_xx", "attn_cx", "attn_cc"):
        for matrix in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"):
            assert torch.equal(getattr(getattr(blind.layers[0], attention), matrix),
                               getattr(getattr(model.layers[0], attention), matrix))
    assert torch.equal(blind.layers[0].attn_xc.W_Q, model.layers[0].attn_xc.W_Q)
    with pytest.raises(slots.InvalidInput, match="matrix"):
        slot_blind(model, "attn_xc", "W_X")


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
    # H2's control goes through the same code: on the learned model it gives H2's recorded figure exactly
    recorded = record["tests"]["H2"]["measured"]["mean"]
    control = slots.h2_control(load_model("main-onehot").eval(), settings, recorded)
    assert control["model_recomputed"] == recorded
    assert [seed["seed"] for seed in control["seeds"]] == list(slots.CONTROL_SEEDS)
    assert control["seed"] == slots.CONTROL_SEEDS[0] and control["mean"] == control["seeds"][0]["mean"]
    assert control["tasks"] == record["tests"]["H2"]["measured"]["tasks"]
    with pytest.raises(slots.InvalidInput, match="not the recorded"):
        slots.h2_control(load_model("main-onehot").eval(), settings, recorded + 0.01)


def test_random_weights_are_seeded_keep_the_architecture_and_leave_the_global_rng_alone():
    from interp.model.checkpoint import load_model

    learned = load_model("main-binary").eval()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first, second, other = (slots.random_weights(learned, seed) for seed in (0, 0, 1))
    assert torch.equal(torch.get_rng_state(), state)
    assert first.config == learned.config and not first.training
    assert first.config == replace(learned_model_config(32, 10, "binary"), **{
        name: replace(getattr(learned_model_config(32, 10, "binary"), name), gumbel_tau=0.0)
        for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc")})
    weights = [dict(model.named_parameters()) for model in (learned, first, second, other)]
    assert all(torch.equal(weights[1][name], weights[2][name]) for name in weights[1])
    assert not torch.equal(weights[1]["layers.0.attn_xc.W_K"], weights[3]["layers.0.attn_xc.W_K"])
    assert not torch.equal(weights[0]["layers.0.attn_xc.W_K"], weights[1]["layers.0.attn_xc.W_K"])


def test_a_position_swap_is_the_slot_swap_read_by_position():
    """Swapping two centroids' positions with their slots kept is the same input as swapping their slots with the
    positions kept; read slot by slot, the share of each other's slot-specific part taken over is 1 - H2's share."""
    model = random_model(d=4, k=5, seed=3)
    points, centroids = make_tasks(n=40, d=4, k=5, batch=3, seed=2)
    split = symmetric_split(model, points, centroids, n_permutations=None)
    step = model_step(model)
    direct = step(points, centroids)
    first, second = torch.tensor([0, 1, 4]), torch.tensor([3, 2, 1])
    moved = slots.swap_slots(centroids, first, second)  # slot first[t] now holds B's position, second[t] A's
    raw = step(points, moved)  # indexed by slot
    psi = slots.swap_fraction(direct, slots.swap_slots(raw, first, second), first, second, reference=split.specific)
    rows = torch.arange(3)
    s_a, s_b = split.specific[rows, first], split.specific[rows, second]
    # the slot-specific parts of the two slots after the move, against the symmetric part of the centroid now there
    after_first = raw[rows, first] - moved[rows, first] - split.symmetric[rows, second]
    after_second = raw[rows, second] - moved[rows, second] - split.symmetric[rows, first]
    gap = s_b - s_a
    by_position = (((after_first - s_a) * gap).sum(-1) - ((after_second - s_b) * gap).sum(-1)) \
        / (2 * (gap * gap).sum(-1))
    assert by_position.tolist() == pytest.approx((1 - psi).tolist(), abs=1e-9)
    assert float(psi.min()) > 0.5  # the random model's parts go with the slots


# ----- the committed results ----------------------------------------------------------------------------------------


def committed() -> dict:
    assert slots.DEFAULT_OUT.is_file(), "analyses/results/slots.json is committed: python -m analyses.slots writes it"
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


def test_h2_control_is_rendered_next_to_the_measure_and_bounds_the_reading():
    data = committed()
    text = slots.results_section(data)
    for name, record in data["models"].items():
        h2 = record["tests"]["H2"]
        control = h2["control_random_weights"]
        assert f"{h2['measured']['mean']:.3f} (se {h2['measured']['se']:.3f}) **{h2['verdict']}**; random weights " \
               f"{control['mean']:.3f} (se {control['se']:.3f})" in text  # the table cell
        assert f"{name} {control['mean']:.3f} (se {control['se']:.3f})" in text  # the bullet
        assert f"{name} {control['difference_from_model']['mean']:+.3f}" in text
        assert " / ".join(f"{seed['mean']:.3f}" for seed in control["seeds"]) in text
        assert f"torch.manual_seed({control['seed']})" in text
    explains = next(line for line in text.splitlines() if line.startswith("* **What this explains**"))
    assert slots._control_meets_prediction(data)  # random weights meet H2's prediction in the committed run ...
    assert "not that the learned roles are specific (H2)" in explains  # ... so the clause claims no more
    assert "the slots, not the positions, set which centroid" not in text
    # without a control, or with one that random weights fail, the reading says so
    bare = copy.deepcopy(data)
    for record in bare["models"].values():
        del record["tests"]["H2"]["control_random_weights"]
    bare_text = slots.results_section(bare)
    assert "no random-weight control recorded" in bare_text and "random weights 0." not in bare_text
    low = copy.deepcopy(data)
    for record in low["models"].values():
        control = record["tests"]["H2"]["control_random_weights"]
        control.update(mean=0.1, difference_from_model={"mean": -0.7, "se": 0.03, "tasks": control["tasks"]})
    low_text = slots.results_section(low)
    assert "more so than in a model of the same architecture with random weights" in low_text
    assert "Random weights alone do not meet the prediction" in low_text


def test_controls_only_merges_the_control_and_changes_nothing_else(tmp_path, monkeypatch):
    from interp.model.checkpoint import load_model

    monkeypatch.setattr(slots, "CONTROL_SEEDS", (5,))
    settings = replace(slots.QUICK, tasks=4, permutations=2, trajectory_tasks=2, trajectory_permutations=2, steps=2,
                       average_permutations=2)
    record = slots.measure_model("main-binary", load_model("main-binary").eval(), settings, slots.load_predictions())
    before = {"settings": asdict(settings), "models": {"main-binary": record}}
    out = tmp_path / "slots.json"
    out.write_text(json.dumps(before))
    assert arguments.run(slots.main, slots.PROG, ["--controls-only", "--out", str(out)]) == 0
    after = json.loads(out.read_text())
    control = after["models"]["main-binary"]["tests"]["H2"].pop("control_random_weights")
    assert after == json.loads(json.dumps(before))
    assert control["seed"] == 5 and control["model_recomputed"] == record["tests"]["H2"]["measured"]["mean"]
    assert control["command"] == f"python -m analyses.slots --controls-only --out {out}"


def test_controls_only_refuses_what_it_cannot_merge(tmp_path, capsys):
    def error(argv: list[str]) -> str:
        assert arguments.run(slots.main, slots.PROG, argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].startswith(slots.PROG)
        return lines[-1]

    assert "does not exist" in error(["--controls-only", "--out", str(tmp_path / "missing.json")])
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not a results file" in error(["--controls-only", "--out", str(broken)])
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"settings": asdict(slots.QUICK),
                               "models": {"main-onehot": {"tests": {"H2": {"measured": {"mean": 0.5}}}}}}))
    assert "no record of main-binary" in error(["--controls-only", "--out", str(one), "--models", "main-binary"])


# ----- the command line ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "2"], "--tasks"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(slots.EXPLORATION_SEED)], "designed on"),
    (["--from-json"], "add --results-md"),
    (["--threads", "0"], "--threads"),
    (["--controls-only", "--from-json", "--results-md"], "give one of them"),
    (["--controls-only", "--tasks", "8"], "drop --quick"),
    (["--controls-only", "--seed", "5"], "drop --quick"),
    (["--controls-only", "--quick"], "drop --quick"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        raise SystemExit(arguments.run(slots.main, slots.PROG, argv))
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert message in error[-1] and error[-1].startswith(slots.PROG)
