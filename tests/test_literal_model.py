"""Every kernel, and the reference, against the literal model (``interp.model.literal``), at sizes that take each
kernel, and the rule that sends a hooked step to the reference.

The literal model computes each step as the papers write it (dense (b, q, r) patterns, squared differences summed
term by term) and imports nothing of the model's forward. Each case runs the model from the same weights, reads the
path each part took from ``dispatch.trace()``, and compares in float64: centroid trajectories to 1e-10, read-outs
identical, and, where the kernel trains, the gradient of every parameter and of the initial centroids to 1e-9.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

from interp.constructions import lloyd_transformer
from interp.model import AttentionConfig, KMeansTransformer, ModelConfig
from interp.model.config import learned_model_config
from interp.model.kernels import dispatch
from interp.model.kernels.fused import DENSE_MAX_PAIRS
from interp.model.literal import LiteralModel, codes
from interp.training.losses import smoothed_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = 1e-10
GRAD_TOL = 1e-9


def learned(d: int, k: int, embedding: str = "onehot", seed: int = 1, **options) -> KMeansTransformer:
    """The learnable one-layer model (re-embedding, shared weights) in float64, without dropout unless asked."""
    torch.manual_seed(seed)
    options.setdefault("dropout", 0.0)
    return KMeansTransformer(learned_model_config(d, k, embedding, **options)).double().eval()


def model_of(config: ModelConfig, seed: int = 3) -> KMeansTransformer:
    torch.manual_seed(seed)
    return KMeansTransformer(config).double().eval()


def unit_tasks(b: int, n: int, d: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Points uniform in the unit cube (b, n, d) and their first k as the initial centroids (b, k, d)."""
    points = torch.rand(b, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return points, points[:, :k].clone()


def kernels_run(paths) -> set[str]:
    return {path.kernel for path in paths}


def assert_equals_literal(model, points, init, out, steps: int, tol: float = TOL) -> None:
    expected = LiteralModel.from_model(model)(points, init, steps)
    torch.testing.assert_close(out.centroid_trajectory, expected.centroid_trajectory, rtol=0, atol=tol)
    assert torch.equal(out.readout_trajectory, expected.readout_trajectory)
    assert out.centroid_trajectory[:, -1].abs().max() > 0.05  # a real output


# ----- the reference ------------------------------------------------------------------------------------------
REFERENCE_CASES = {
    "learned-onehot": lambda: learned(4, 3),
    "learned-binary": lambda: learned(4, 5, "binary"),
    "learned-d-only": lambda: learned(3, 4, "none"),
    "learned-sparsemax": lambda: learned(4, 3, normaliser="sparsemax", gamma=4.0),
    "slot-tied": lambda: learned(4, 3, slot_equivariant=True),
    "ffn-norm-slot-per-layer": lambda: model_of(ModelConfig(d=3, k=4, n_layers=3, shared_weights=False, ffn=True,
                                                            norm_slot=True, input_range=(0.0, 1.0))),
    "unit-norm-dot-identity": lambda: model_of(ModelConfig(
        d=3, k=4, n_layers=3, attn_xc=AttentionConfig(output_norm="unit"), attn_xx=AttentionConfig(identity=True),
        attn_cc=AttentionConfig(score="dot", bias=False, scale_by_sqrt_dim=False), input_range=(0.0, 1.0))),
    "lloyd-onehot": lambda: lloyd_transformer(3, 4, n_layers=3),
    "lloyd-binary": lambda: lloyd_transformer(3, 5, n_layers=3, embedding="binary"),
    "lloyd-hardmax-update": lambda: lloyd_transformer(3, 4, n_layers=3, centroid_update="hardmax"),
    "lloyd-literal-self-attention": lambda: lloyd_transformer(3, 4, n_layers=3, self_attention="literal"),
    "lloyd-dot": lambda: lloyd_transformer(3, 4, n_layers=3, attention="dot"),
}


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
def test_reference_only_equals_the_literal_model(name):
    model = REFERENCE_CASES[name]()
    config = model.config
    points, init = unit_tasks(2, 40, config.d, config.k, seed=5)
    steps = 3
    with torch.no_grad(), dispatch.reference_only(), dispatch.trace() as paths:
        out = model(points, init, steps=steps)
    assert paths == [(step, "block", "reference") for step in range(steps)]
    assert_equals_literal(model, points, init, out, steps)


def test_the_literal_model_refuses_what_it_cannot_express():
    with pytest.raises(Exception, match="gumbel"):
        LiteralModel.from_model(learned(3, 4, normaliser="gumbel"))


def test_codes_are_the_papers():
    assert torch.equal(codes(3, "onehot"), torch.eye(3, dtype=torch.float64))
    assert codes(5, "binary").tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]]  # LSB first
    assert codes(4, "none").shape == (4, 0)


# ----- each kernel at a size that takes it -----------------------------------------------------------------------
def _tied(points, init):
    """Two identical initial centroids: every point nearest to them ties (AHAT averages the two codes). The tied
    binary cases run one step: after it the two centroids' equal means may round differently in a dense matrix
    product (one ulp on some CPUs), and the next step's tie is then broken by rounding."""
    init = init.clone()
    init[:, 1] = init[:, 0]
    return points, init


INFERENCE_CASES = {  # model, (b, n), kernels that must run, task transform, kernels switched off
    "folded-scores": (lambda: learned(4, 3), (2, 40), {"folded_scores", "in_place_sum"}, None, ()),
    "folded-scores-with-pattern": (lambda: learned(3, 4, "none"), (2, 40), {"folded_scores"}, None, ()),
    "fused-formed-pattern": (lambda: learned(4, 6), (2, 160), {"fused_softmax"}, None, ()),
    "fused-flash": (lambda: learned(4, 6), (1, 300), {"fused_softmax"}, None, ()),
    "fused-cross-attentions": (lambda: learned(3, 6), (1, 2800), {"fused_softmax"}, None, ()),
    "reused-points-attention": (lambda: learned(4, 3), (2, 64), {"reused_points_attention"}, None, ()),
    "hardmax-sets": (lambda: lloyd_transformer(8, 10, n_layers=4), (2, 512), {"hardmax_sets", "in_place_sum"},
                     None, ("labelled_stream",)),
    "hardmax-sets-tied": (lambda: lloyd_transformer(4, 6, n_layers=3, embedding="binary"), (2, 300),
                          {"hardmax_sets"}, _tied, ("labelled_stream",)),
    "labelled-stream": (lambda: lloyd_transformer(8, 10, n_layers=4), (2, 1024), {"labelled_stream"}, None, ()),
    "labelled-stream-tied": (lambda: lloyd_transformer(4, 6, n_layers=3, embedding="binary"), (2, 300),
                             {"labelled_stream"}, _tied, ()),
}


@pytest.mark.parametrize("name", list(INFERENCE_CASES))
def test_each_inference_kernel_equals_the_literal_model(name):
    build, (b, n), wanted, transform, switched_off = INFERENCE_CASES[name]
    model = build()
    config = model.config
    points, init = unit_tasks(b, n, config.d, config.k, seed=n)
    if transform is not None:
        points, init = transform(points, init)
    steps = 1 if transform is _tied else 4 if config.shared_weights else config.n_layers  # _tied: one step
    with torch.no_grad(), dispatch.without(*switched_off), dispatch.trace() as paths:
        out = model(points, init, steps=steps)
    assert wanted <= kernels_run(paths), kernels_run(paths)
    assert dispatch.REFERENCE not in {path.kernel for path in paths if path.part == "block"}
    assert_equals_literal(model, points, init, out, steps)


def test_the_fused_kernels_take_both_sizes():
    """The formed-pattern kernel up to DENSE_MAX_PAIRS pairs per task, the flash kernel above: the cases above."""
    assert 160 * 160 <= DENSE_MAX_PAIRS < 300 * 300
    assert 2800 * 6 >= dispatch.FUSED_MIN_PAIRS > 40 * 40


def _gradients(model, points, init, out) -> dict[str, torch.Tensor]:
    loss = smoothed_loss(points, out.centroid_trajectory[:, -1], 0.1)
    names, tensors = zip(*[(name, p) for name, p in model.named_parameters()], ("init", init))
    return dict(zip(names, torch.autograd.grad(loss, tensors)))


TRAINING_CASES = {  # model, (b, n, steps), training mode, kernels that must run
    "training-step": (lambda: learned(4, 6), (2, 128, 2), True, {"training_step"}),
    "training-step-d-only": (lambda: learned(3, 5, "none"), (2, 64, 2), True, {"training_step"}),
    "per-part-with-grad": (lambda: learned(4, 6), (2, 160, 2), False, {"fused_softmax", "folded_scores"}),
}


@pytest.mark.parametrize("name", list(TRAINING_CASES))
def test_each_training_kernel_and_its_gradients_equal_the_literal_model(name):
    build, (b, n, steps), training, wanted = TRAINING_CASES[name]
    model = build().train(training)
    points, init = unit_tasks(b, n, model.config.d, model.config.k, seed=n)
    init = init.requires_grad_()
    with dispatch.trace() as paths:
        out = model(points, init, steps=steps)
    assert wanted <= kernels_run(paths), kernels_run(paths)
    literal = LiteralModel.from_model(model)
    expected = literal(points, init, steps)
    torch.testing.assert_close(out.centroid_trajectory, expected.centroid_trajectory, rtol=0, atol=TOL)
    got, wanted_grads = _gradients(model, points, init, out), _gradients(literal, points, init, expected)
    assert got.keys() == wanted_grads.keys() and len(got) == 4 * 6 + 1
    for key in got:
        assert wanted_grads[key].abs().max() > 0, key
        torch.testing.assert_close(got[key], wanted_grads[key], rtol=0, atol=GRAD_TOL, msg=key)


def test_the_training_step_with_dropout_equals_the_literal_model_on_its_draws(monkeypatch):
    """Dropout on every attention (n = 128: attn_xx's dropped pairs drawn sparsely, the others dense keep masks):
    the kernel's draws, recorded, become the literal model's keep masks."""
    from interp.model.attention import Attention

    model = learned(4, 6, dropout=0.1).train()
    points, init = unit_tasks(2, 128, 4, 6, seed=3)
    init = init.requires_grad_()
    draws, real = [], Attention.draw_dropout

    def recorded(self, batch, n_queries, n_keys, like, generator, need_pattern=False):
        draw = real(self, batch, n_queries, n_keys, like, generator, need_pattern)
        draws.append((self, n_queries, n_keys, draw))
        return draw

    monkeypatch.setattr(Attention, "draw_dropout", recorded)
    with dispatch.trace() as paths:
        out = model(points, init, steps=2, generator=4)
    assert kernels_run(paths) == {"training_step"} and len(draws) == 2 * 4
    masks = {}
    for index, (attention, n_queries, n_keys, draw) in enumerate(draws):
        keep = 1.0 / (1.0 - attention.config.dropout)
        if isinstance(draw, tuple):  # dropped (task, query, key) pairs
            mask = torch.full((2, n_queries, n_keys), keep, dtype=torch.float64)
            mask[draw] = 0.0
        else:  # a dense keep mask, drawn (b, r, q) when there are fewer keys than queries
            mask = draw.transpose(1, 2) if attention.keys_major(n_queries, n_keys) else draw
        masks[(index // 4, ("attn_xc", "attn_xx", "attn_cx", "attn_cc")[index % 4])] = mask
    assert isinstance(draws[1][3], tuple) and not isinstance(draws[0][3], tuple)  # both kinds of draw
    literal = LiteralModel.from_model(model)
    expected = literal(points, init, 2, keep_masks=masks)
    torch.testing.assert_close(out.centroid_trajectory, expected.centroid_trajectory, rtol=0, atol=TOL)
    got, wanted = _gradients(model, points, init, out), _gradients(literal, points, init, expected)
    for key in got:
        torch.testing.assert_close(got[key], wanted[key], rtol=0, atol=GRAD_TOL, msg=key)
    undropped = literal(points, init, 2)
    assert (undropped.centroid_trajectory - expected.centroid_trajectory).abs().max() > 1e-6  # the masks mattered


# ----- the rule: a step with any forward or backward hook runs the reference ---------------------------------------
def test_only_the_hooked_step_runs_the_reference():
    model = learned(4, 6)
    points, init = unit_tasks(2, 160, 4, 6, seed=1)
    with torch.no_grad(), dispatch.trace() as paths:
        out = model.run_with_hooks(points, init, steps=4, fwd_hooks=[("blocks.2.hook_centroids_resid_pre",
                                                                     lambda tensor, hook: None)])
    assert [path for path in paths if path.part in ("block", "attn_xx")] == [
        (0, "attn_xx", "fused_softmax"), (1, "attn_xx", "reused_points_attention"), (2, "block", "reference"),
        (3, "attn_xx", "reused_points_attention")]
    assert_equals_literal(model, points, init, out, 4)


def test_a_hook_on_the_embedding_is_a_hook_on_step_0():
    model = lloyd_transformer(4, 5, n_layers=3)
    points, init = unit_tasks(2, 200, 4, 5, seed=2)
    for name in ("hook_anchor", "hook_points_embed", "hook_centroids_embed"):
        with torch.no_grad(), dispatch.trace() as paths:
            model.run_with_hooks(points, init, fwd_hooks=[(name, lambda tensor, hook: None)])
        assert [path for path in paths if path.part == "block"][0] == (0, "block", "reference"), name
        assert (1, "block", "reference") not in paths, name


def test_a_hook_registered_on_a_hook_point_directly_is_a_hook():
    """A PyTorch hook put on a hook point's module (not through TransformerLens) also sends its step to the
    reference, so it sees the step's pattern: for the Lloyd construction, the one-hot of Lloyd's assignment."""
    model = lloyd_transformer(4, 5, n_layers=3)
    points, init = unit_tasks(2, 200, 4, 5, seed=2)
    seen = []
    handle = model.blocks[1].attn_xc.hook_pattern.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        with torch.no_grad(), dispatch.trace() as paths:
            out = model(points, init)
    finally:
        handle.remove()
    assert [path for path in paths if path.part in ("block", "attn_xc")] == [
        (0, "block", "labelled_stream"), (1, "block", "reference"), (2, "attn_xc", "hardmax_sets")]
    assert len(seen) == 1 and seen[0].shape == (2, 200, 5)
    assert torch.equal(seen[0].argmax(dim=-1), out.assignment_trajectory[:, 1])
    assert bool((seen[0].amax(dim=-1) == 1).all())


def test_a_backward_hook_on_a_fused_attentions_pattern_fires():
    """A backward hook on attn_xx's pattern of a training step at n = 160 (where the fused kernel would never form
    the pattern): the step runs the reference, the hook sees the gradient of the (b, n, n) pattern."""
    model = learned(4, 6).train()
    points, init = unit_tasks(2, 160, 4, 6, seed=4)
    seen = []
    with model.hooks(bwd_hooks=[("blocks.0.attn_xx.hook_pattern", lambda grad, hook: seen.append(grad.shape))]):
        with dispatch.trace() as paths:
            out = model(points, init, steps=1)
        smoothed_loss(points, out.centroids, 0.1).backward()
    assert paths == [(0, "block", "reference")]
    assert seen == [(2, 160, 160)]


def test_hook_presence_has_one_test():
    """No module of interp/model reads a module's hooks except ``dispatch.hooked``."""
    root = pathlib.Path(__file__).resolve().parent.parent / "interp" / "model"
    reads = re.compile(r"\.(fwd_hooks|bwd_hooks|_forward_hooks|_backward_hooks|_forward_pre_hooks"
                       r"|_backward_pre_hooks)\b")
    found = [f"{path.relative_to(root)}:{number}" for path in sorted(root.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if reads.search(line)]
    source = (root / "kernels" / "dispatch.py").read_text().splitlines()
    hooked = next(number for number, line in enumerate(source, 1) if line.startswith("def hooked("))
    assert found and all(place.startswith("kernels/dispatch.py:") for place in found), found
    assert all(hooked < int(place.split(":")[1]) <= hooked + 6 for place in found), found


def test_without_and_trace():
    with pytest.raises(Exception, match="unknown kernel 'fused'"):
        with dispatch.without("fused"):
            pass
    with dispatch.without("fused_softmax"):
        assert not dispatch.allowed("fused_softmax") and dispatch.allowed("hardmax_sets")
        with dispatch.without("hardmax_sets"):
            assert not dispatch.allowed("fused_softmax") and not dispatch.allowed("hardmax_sets")
    assert dispatch.allowed("fused_softmax")
    model = learned(3, 4)
    points, init = unit_tasks(1, 20, 3, 4, seed=0)
    with dispatch.trace() as outer:
        with torch.no_grad():
            model(points, init, steps=1)
        with dispatch.trace() as inner:
            with torch.no_grad():
                model(points, init, steps=1)
    assert inner and outer == inner  # a nested trace takes its own block's paths, the outer one the rest
