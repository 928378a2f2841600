"""A TransformerLens user's habits on the k-means transformer (docs/hooks.md, "TransformerLens habits").

Each test uses the model as TransformerLens code would (``model.cfg``, ``run_with_cache``, the cache's ``(name, layer)``
shorthand, ``stack_activation``, ``accumulated_resid`` / ``decompose_resid``, ``hooks()``, ``run_with_hooks``
patching, ``incl_bwd``, ``attn.QK`` / ``attn.OV``); expected values come from Lloyd's algorithm, from the
mathematics of the k-means objective, or from the model's own attention computed token by token.
"""

import dataclasses
import math

import pytest
import torch
from conftest import make_tasks
from transformer_lens.ActivationCache import ActivationCache
from transformer_lens.FactoredMatrix import FactoredMatrix

from interp._checks import InvalidInput
from interp.algorithms import cluster_sums, kmeans_objective, lloyd, log_objective
from interp.model import InferenceSettings, KMeansTransformer, ModelConfig
from interp.model.cache import KMeansActivationCache, NotInThisModel, act_name
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer

B, N, D, K, T = 2, 40, 3, 4, 3
ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")


@pytest.fixture(scope="module")
def tasks():
    points, init = make_tasks(N, D, K, batch=B, seed=7)
    reference = lloyd(points, init, T)
    assert not reference.any_empty
    assert not torch.equal(reference.centroid_trajectory[:, T], reference.centroid_trajectory[:, T - 1])
    return points, init, reference


@pytest.fixture(scope="module")
def construction_run(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=T)
    out, cache = model.run_with_cache(points, init)
    return model, out, cache


def _learned(seed: int = 0, **kwargs) -> KMeansTransformer:
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(D, K, **kwargs)).double().eval()


# ----- model.cfg --------------------------------------------------------------------------------------------


def test_cfg_holds_what_transformerlens_reads():
    model = lloyd_transformer(D, K, n_layers=T)
    cfg = model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head) == (T, D + K, 1, D + K)
    assert cfg.attn_only is True and cfg.d_mlp is None and cfg.normalization_type is None
    assert cfg.device == "cpu" and cfg.dtype == torch.float64
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layers = 1
    ffn = KMeansTransformer(ModelConfig(d=D, k=K, ffn=True, ffn_hidden=5))
    assert ffn.cfg.attn_only is False and ffn.cfg.d_mlp == 5 and ffn.cfg.dtype == torch.float32
    # one shared layer: n_layers is the steps a call without `steps` runs (its recommended steps, if any)
    shared = lloyd_transformer(D, K, n_layers=1)
    assert shared.cfg.n_layers == 1
    shared.inference = InferenceSettings(steps=5)
    assert shared.cfg.n_layers == 5


def test_a_cache_counts_the_steps_it_ran(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=1)
    _, cache = model.run_with_cache(points, init, steps=5)
    assert cache.cfg.n_layers == 5 and model.cfg.n_layers == 1
    assert cache["centroids_resid_post", -1] is cache.cache_dict["blocks.4.hook_centroids_resid_post"]


# ----- the cache's shorthand ----------------------------------------------------------------------------------


def test_shorthand_names_read_this_models_hook_points(tasks, construction_run):
    _, _, reference = tasks
    _, _, cache = construction_run
    assert isinstance(cache, ActivationCache) and isinstance(cache, KMeansActivationCache)
    assert cache["points_resid_post", 2] is cache.cache_dict["blocks.2.hook_points_resid_post"]
    assert cache["pattern", 1, "attn_xc"] is cache.cache_dict["blocks.1.attn_xc.hook_pattern"]
    assert cache["resid_pre", 1, "centroids"] is cache.cache_dict["blocks.1.hook_centroids_resid_pre"]
    assert cache["points_embed"] is cache.cache_dict["hook_points_embed"]
    assert act_name("out", 0, "attn_cc") == "blocks.0.attn_cc.hook_out"
    # the values: after step l the centroid stream holds Lloyd's centres, attn_xc's pattern Lloyd's labels
    for step in range(T):
        torch.testing.assert_close(cache["centroids_resid_post", step][..., :D],
                                   reference.centroid_trajectory[:, step + 1], rtol=0, atol=1e-12)
        assert torch.equal(cache["attn", step, "attn_xc"].argmax(-1), reference.assignment_trajectory[:, step])
    torch.testing.assert_close(cache["centroids_resid_post", -1][..., :D], reference.centroids, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("key", "names"), [
    (("resid_post", 0), ["points_resid_post", "centroids_resid_post"]),
    (("pattern", 0), list(ATTENTIONS)),
    (("attn_out", 1), list(ATTENTIONS)),
    (("embed",), ["points_embed", "centroids_embed"]),
    (("q", 0, "attn_xc"), ["scores", "pattern", "out"]),
    (("mlp_out", 0), ["ffn_points", "ffn_centroids"]),
])
def test_transformerlens_names_that_are_ambiguous_here_name_their_equivalents(construction_run, key, names):
    _, _, cache = construction_run
    with pytest.raises(KeyError) as error:
        cache[key if len(key) > 1 else key[0]]
    assert isinstance(error.value, InvalidInput)
    assert all(name in str(error.value) for name in names), str(error.value)


def test_names_filter_as_in_transformerlens(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    _, cache = model.run_with_cache(points, init, names_filter=lambda name: name.endswith("hook_pattern"))
    assert set(cache.keys()) == {f"blocks.{step}.{name}.hook_pattern" for step in range(2) for name in ATTENTIONS}
    torch.testing.assert_close(cache["pattern", 0, "attn_xx"], torch.eye(N, dtype=torch.float64).expand(B, N, N),
                               rtol=0, atol=0)
    assert cache.cfg.n_layers == 2  # counted from the run, not from the names cached


# ----- stacks -----------------------------------------------------------------------------------------------


def test_stack_activation_stacks_the_cached_steps(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=1)
    _, cache = model.run_with_cache(points, init, steps=5)
    reference = lloyd(points, init, 5)
    stacked = cache.stack_activation("centroids_resid_post")  # (T, b, k, D)
    assert stacked.shape == (5, B, K, D + K)
    torch.testing.assert_close(stacked[..., :D], reference.centroid_trajectory[:, 1:].transpose(0, 1),
                               rtol=0, atol=1e-12)
    labels = cache.stack_activation("pattern", sublayer_type="attn_xc").argmax(-1)  # (T, b, n)
    assert torch.equal(labels, reference.assignment_trajectory.transpose(0, 1))
    assert cache.stack_activation("points_resid_pre", layer=2).shape == (2, B, N, D + K)


def test_accumulated_resid_is_the_stream_before_every_step_and_after_the_last(tasks, construction_run):
    _, _, reference = tasks
    _, _, cache = construction_run
    stack, labels = cache.accumulated_resid(stream="centroids", return_labels=True)  # (T + 1, b, k, D)
    assert labels == ["0_pre", "1_pre", "2_pre", "final_post"]
    torch.testing.assert_close(stack[..., :D], reference.centroid_trajectory.transpose(0, 1), rtol=0, atol=1e-12)
    first_two, labels = cache.accumulated_resid(layer=1, stream="points", return_labels=True)
    assert labels == ["0_pre", "1_pre"] and first_two.shape == (2, B, N, D + K)
    with pytest.raises(InvalidInput, match="stream"):
        cache.accumulated_resid()
    with pytest.raises(InvalidInput, match="decompose_resid"):
        cache.accumulated_resid(stream="points", incl_mid=True)


@pytest.mark.parametrize("stream", ["points", "centroids"])
def test_decompose_resid_sums_to_the_stream_after_the_last_step(construction_run, stream):
    _, _, cache = construction_run
    components, labels = cache.decompose_resid(stream=stream, return_labels=True)
    attentions = ("attn_xc", "attn_xx") if stream == "points" else ("attn_cx", "attn_cc")
    assert labels == ["embed"] + [f"{step}_{name}_out" for step in range(T) for name in attentions]
    assert components.dtype == torch.float64
    torch.testing.assert_close(components.sum(0), cache[f"{stream}_resid_post", T - 1], rtol=0, atol=1e-12)
    # up to a step: the stream entering it
    before, _ = cache.decompose_resid(layer=2, stream=stream, return_labels=True)
    torch.testing.assert_close(before.sum(0), cache[f"{stream}_resid_pre", 2], rtol=0, atol=1e-12)


def test_decompose_resid_with_ffns_and_reembedding(tasks):
    """With FFNs the FFN outputs are components too; a re-embedding model's stream entering step l is the
    re-embedding alone, so the decomposition starts there."""
    points, init, _ = tasks
    torch.manual_seed(3)
    model = KMeansTransformer(ModelConfig(d=D, k=K, n_layers=2, ffn=True)).double()
    _, cache = model.run_with_cache(points, init)
    components, labels = cache.decompose_resid(stream="centroids", return_labels=True)
    assert labels == ["embed", "0_attn_cx_out", "0_attn_cc_out", "0_ffn_centroids_out",
                      "1_attn_cx_out", "1_attn_cc_out", "1_ffn_centroids_out"]
    torch.testing.assert_close(components.sum(0), cache["centroids_resid_post", 1], rtol=0, atol=1e-12)
    attention_only, labels = cache.decompose_resid(stream="centroids", mode="attn", incl_embeds=False,
                                                   return_labels=True)
    assert labels == ["0_attn_cx_out", "0_attn_cc_out", "1_attn_cx_out", "1_attn_cc_out"]
    into_ffn, labels = cache.decompose_resid(layer=1, mlp_input=True, stream="points", return_labels=True)
    assert labels == ["embed", "0_attn_xc_out", "0_attn_xx_out", "0_ffn_points_out", "1_attn_xc_out", "1_attn_xx_out"]
    torch.testing.assert_close(into_ffn.sum(0) + cache["out", 1, "ffn_points"], cache["points_resid_post", 1],
                               rtol=0, atol=1e-12)

    learned = _learned()
    _, cache = learned.run_with_cache(points, init, steps=3)
    components, labels = cache.decompose_resid(stream="points", return_labels=True)
    assert labels == ["2_embed", "2_attn_xc_out", "2_attn_xx_out"]
    torch.testing.assert_close(components.sum(0), cache["points_resid_post", 2], rtol=0, atol=1e-12)
    torch.testing.assert_close(components[0], torch.cat([points, points.new_zeros(B, N, K)], -1), rtol=0, atol=0)


def test_transformerlens_methods_that_do_not_apply_say_what_to_use(construction_run):
    _, _, cache = construction_run
    calls = {
        "centroids_resid_post": lambda: cache.logit_lens(),
        "decompose_resid": lambda: cache.stack_head_results(),
        "attn_xc": lambda: cache.compute_head_results(),
        "hook_hidden": lambda: cache.stack_neuron_results(1),
        "ffn_points": lambda: cache.get_neuron_results(0, [0]),
        "decompose_resid(": lambda: cache.get_full_resid_decomposition(),
        "no state-space": lambda: cache.ssm_layers(),
        "logits": lambda: cache.logit_attrs(torch.zeros(1, B, K, D + K), 0),
    }
    for text, call in calls.items():
        with pytest.raises(NotInThisModel, match=text.replace("(", r"\(")):
            call()


def test_a_batch_slice_keeps_the_shorthand(construction_run):
    _, _, cache = construction_run
    first = cache.apply_slice_to_batch_dim(0)
    assert isinstance(first, KMeansActivationCache) and first.cfg.n_layers == T
    torch.testing.assert_close(first["centroids_resid_post", -1], cache["centroids_resid_post", -1][0],
                               rtol=0, atol=0)


# ----- hooks and patching ---------------------------------------------------------------------------------------


def test_hooks_context_manager_with_shorthand_names(tasks):
    points, init, reference = tasks
    model = lloyd_transformer(D, K, n_layers=T)
    seen = []
    with model.hooks(fwd_hooks=[(act_name("pattern", 1, "attn_xc"), lambda pattern, hook: seen.append(pattern))]):
        model(points, init)
    model(points, init)  # the hook is gone after the block
    assert len(seen) == 1
    assert torch.equal(seen[0].argmax(-1), reference.assignment_trajectory[:, 1])


def test_activation_patching_from_a_clean_cache(tasks):
    """Patch the centroid stream after step 0 of a corrupted run (other initial centroids) with the clean run's:
    the construction's later steps then are Lloyd's from the clean centres (the points' old codes are erased)."""
    points, init, reference = tasks
    model = lloyd_transformer(D, K, n_layers=T)
    _, clean = model.run_with_cache(points, init)
    corrupted_init = init.flip(1).contiguous() + 0.05
    corrupted = model(points, corrupted_init)
    assert not torch.allclose(corrupted.centroids, reference.centroids)

    def restore(activation, hook):
        return clean[hook.name]

    patched = model.run_with_hooks(points, corrupted_init, fwd_hooks=[(act_name("centroids_resid_post", 0), restore)])
    torch.testing.assert_close(patched.centroids, reference.centroids, rtol=0, atol=1e-12)


# ----- gradients ------------------------------------------------------------------------------------------------


def test_incl_bwd_gives_the_gradient_of_the_mean_log_objective(tasks):
    """The documented scalar, mean_b ln Phi_b(C): d/dc_j = 2 (n_j c_j - sum_{i in j} x_i) / (b Phi), on the data
    features of the last centroid stream (zero on the code features, which the output does not read); frozen
    construction weights and a caller under no_grad still get every gradient."""
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    with torch.no_grad():
        out, cache = model.run_with_cache(points, init, incl_bwd=True)
    centroids = out.centroids  # (b, k, d)
    sums, counts = cluster_sums(points, out.assignments, K)
    phi = kmeans_objective(points, centroids)  # (b,)
    expected = 2 * (counts[..., None] * centroids - sums) / (B * phi[:, None, None])  # (b, k, d)
    assert expected.abs().max() > 1e-3  # not at a fixed point: the test can tell a wrong gradient
    gradient = cache["blocks.1.hook_centroids_resid_post_grad"]  # (b, k, D)
    torch.testing.assert_close(gradient[..., :D], expected, rtol=0, atol=1e-12)
    assert torch.equal(gradient[..., D:], torch.zeros_like(gradient[..., D:]))
    forward = [name for name, value in cache.items() if not name.endswith("_grad") and value.is_floating_point()]
    assert forward and all(f"{name}_grad" in cache.cache_dict for name in forward)
    assert not any(point.bwd_hooks or point.fwd_hooks for point in model.hook_dict.values())


def test_incl_bwd_matches_autograd_on_a_hooked_intermediate(tasks):
    points, init, _ = tasks
    model = _learned()
    _, cache = model.run_with_cache(points, init, steps=2, incl_bwd=True)
    captured = {}

    def capture(activation, hook):  # as a TransformerLens user takes a gradient at one hook point
        captured[hook.name] = activation if activation.requires_grad else activation.detach().requires_grad_()
        return captured[hook.name]

    names = ["blocks.1.hook_centroids_resid_pre", "blocks.1.hook_points_resid_pre", "blocks.0.attn_xc.hook_pattern"]
    out = model.run_with_hooks(points, init, steps=2, fwd_hooks=[(name, capture) for name in names])
    scalar = log_objective(points, out.centroids).mean()
    gradients = torch.autograd.grad(scalar, [captured[name] for name in names])
    for name, gradient in zip(names, gradients):
        assert gradient.abs().max() > 0, name
        torch.testing.assert_close(cache[f"{name}_grad"], gradient, rtol=0, atol=1e-12, msg=name)


def test_incl_bwd_with_a_loss_of_the_output(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    out, cache = model.run_with_cache(points, init, incl_bwd=True, loss=lambda out: out.centroids.pow(2).sum())
    gradient = cache["centroids_resid_post_grad", -1]  # d/dc sum c^2 = 2 c
    torch.testing.assert_close(gradient[..., :D], 2 * out.centroids, rtol=0, atol=1e-12)
    with pytest.raises(InvalidInput, match="incl_bwd"):
        model.run_with_cache(points, init, loss=lambda out: out.centroids.sum())
    with pytest.raises(InvalidInput, match="loss"):
        model.run_with_cache(points, init, incl_bwd=True, loss=lambda out: out.centroids)


# ----- QK and OV ------------------------------------------------------------------------------------------------


def test_qk_is_the_bilinear_form_of_the_scores_in_transformerlens_orientation():
    """Row tokens x (query) and x' (key): the model's own euclidean scores satisfy
    s(x, x') - s(x, 0) - s(0, x') + s(0, 0) = 2 x QK x'^T / sqrt(D), as TransformerLens's x W_Q W_K^T x'^T."""
    model = _learned()
    width = model.cfg.d_model
    generator = torch.Generator().manual_seed(5)
    queries = torch.randn(6, width, generator=generator, dtype=torch.float64)  # (q, D)
    keys = torch.randn(5, width, generator=generator, dtype=torch.float64)  # (r, D)
    zero = torch.zeros(1, width, dtype=torch.float64)
    for name in ATTENTIONS:
        attention = getattr(model.blocks[0], name)
        QK = attention.QK
        assert isinstance(QK, FactoredMatrix) and QK.shape == (1, width, width)  # (n_heads, D, D)
        with torch.no_grad():
            scores = attention.scores(torch.cat([zero, queries])[None], torch.cat([zero, keys])[None],
                                      getattr(model.layers[0], name))[0]  # (1 + q, 1 + r)
        cross = scores[1:, 1:] - scores[1:, :1] - scores[:1, 1:] + scores[0, 0]  # (q, r)
        torch.testing.assert_close(cross, 2 * queries @ QK.AB[0].detach() @ keys.T / math.sqrt(width),
                                   rtol=0, atol=1e-12, msg=name)
        assert QK.AB.requires_grad  # the weights themselves, differentiable


def test_ov_maps_a_key_row_to_what_the_attention_adds():
    """One key z': the pattern is 1, so out(z') - out(0) = z' OV (a row vector, TransformerLens's x W_V W_O)."""
    model = _learned()
    width = model.cfg.d_model
    generator = torch.Generator().manual_seed(6)
    key = torch.randn(1, 1, width, generator=generator, dtype=torch.float64)  # (1, 1, D)
    queries = torch.randn(1, 3, width, generator=generator, dtype=torch.float64)  # (1, 3, D)
    for name in ATTENTIONS:
        attention = getattr(model.blocks[0], name)
        with torch.no_grad():
            out, _ = attention(queries, key, getattr(model.layers[0], name))  # (1, 3, D)
            at_zero, _ = attention(queries, torch.zeros_like(key), getattr(model.layers[0], name))
        OV = attention.OV
        assert OV.shape == (1, width, width)
        expected = (key[0] @ OV.AB[0].detach()).expand(3, width)  # (3, D)
        torch.testing.assert_close((out - at_zero)[0], expected, rtol=0, atol=1e-12, msg=name)


def test_circuit_spectra_of_the_construction():
    """attn_xc's QK is I_d on the data features and 0 on the codes: eigenvalues d ones and k zeros, singular values
    the same; attn_cc's OV is -I_d: singular values d ones."""
    model = lloyd_transformer(D, K, n_layers=1)
    QK = model.blocks[0].attn_xc.QK
    eigenvalues = QK.eigenvalues[0]  # (D,) complex
    assert torch.equal(eigenvalues.imag, torch.zeros(D + K, dtype=torch.float64))
    assert sorted(eigenvalues.real.tolist()) == [0.0] * K + [1.0] * D
    U, S, V = QK.svd()
    torch.testing.assert_close(S[0], torch.tensor([1.0] * D + [0.0] * K, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(U[0] @ torch.diag(S[0]) @ V[0].T, QK.AB[0], rtol=0, atol=1e-12)
    OV = model.blocks[0].attn_cc.OV
    torch.testing.assert_close(OV.S[0], torch.tensor([1.0] * D + [0.0] * K, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(OV.AB[0][:D, :D], -torch.eye(D, dtype=torch.float64), rtol=0, atol=0)


def test_qk_reads_the_weights_each_step_uses():
    """Per-layer weights: block l's QK is W_Q^T W_K of model.layers[l]; slot-tied weights: QK follows a change of
    the free parameters it is built from."""
    torch.manual_seed(1)
    model = KMeansTransformer(ModelConfig(d=D, k=K, n_layers=2, shared_weights=False)).double()
    for step in range(2):
        weights = model.layers[step].attn_cx
        torch.testing.assert_close(model.blocks[step].attn_cx.QK.AB[0], weights.W_Q.T @ weights.W_K,
                                   rtol=0, atol=1e-12)
    assert not torch.allclose(model.blocks[0].attn_cx.QK.AB, model.blocks[1].attn_cx.QK.AB)

    tied = _learned(slot_equivariant=True)
    weights = tied.layers[0].attn_xc
    before = tied.blocks[0].attn_xc.QK.AB[0].detach().clone()
    with torch.no_grad():
        weights.W_Q_code_diagonal.add_(1.0)  # W_Q's code block a I + b 11^T: a grows by 1
    after = tied.blocks[0].attn_xc.QK.AB[0].detach()
    # W_Q^T W_K changes by E^T W_K, E the identity on the k code features: the code rows of W_K
    torch.testing.assert_close(after - before, torch.cat([torch.zeros(D, D + K, dtype=torch.float64),
                                                          weights.W_K[D:].detach()]), rtol=0, atol=1e-12)


def test_a_shared_layer_run_longer_keeps_one_circuit_and_its_hook_points(tasks):
    points, init, _ = tasks
    model = lloyd_transformer(D, K, n_layers=1)
    before = set(model.hook_dict)
    seen = {}

    def record(activation, hook):
        step = int(hook.name.split(".")[1])
        seen[step] = model.blocks[step].attn_xc.QK.AB  # read inside the run, on a borrowed block
    model.run_with_hooks(points, init, steps=4, fwd_hooks=[(lambda name: name.endswith("attn_xc.hook_out"), record)])
    assert sorted(seen) == [0, 1, 2, 3]
    assert all(torch.equal(seen[step], model.blocks[0].attn_xc.QK.AB) for step in seen)
    assert set(model.hook_dict) == before
