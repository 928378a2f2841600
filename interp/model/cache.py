"""TransformerLens's ``ActivationCache`` for the k-means transformer: shorthand names, stacks over the cached steps,
residual-stream decompositions and gradients (docs/hooks.md, "TransformerLens habits").

A block has two residual streams, points X (b, n, D) and centroids C (b, k, D), and four attentions (paper 2, Eq. 4):

    X_{l+1} = X_l + attn_xc(X_l, C_l) + attn_xx(X_l, X_l)          [+ ffn_points(.)]
    C_{l+1} = C_l + attn_cx(C_l, X_{l+1}) + attn_cc(C_l, C_l)      [+ ffn_centroids(.)]

so TransformerLens's names ``resid_post``, ``pattern``, ``attn_out`` are ambiguous here: ``act_name`` maps this
model's own shorthand to its hook names, and names an ambiguous TransformerLens name's equivalents.

``KMeansActivationCache`` is what ``KMeansTransformer.run_with_cache`` returns; ``run_with_cache(incl_bwd=True)``
caches every hook's gradient of one scalar (``run_with_cache``): by default the mean over tasks of ln Phi, the
k-means objective of the output centroids (paper 2, Eq. 1; ``interp.algorithms.log_objective``).
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor
from transformer_lens.ActivationCache import ActivationCache
from transformer_lens.utilities import Slice

from interp._checks import InvalidInput, InvalidInputType, check_choice
from interp.algorithms import log_objective
from interp.model.block import ATTENTIONS

STREAMS = ("points", "centroids")
STREAM_ATTENTIONS = {"points": ("attn_xc", "attn_xx"), "centroids": ("attn_cx", "attn_cc")}  # what adds to each
FFNS = ("ffn_points", "ffn_centroids")
_TOP = {"anchor": "hook_anchor", "points_embed": "hook_points_embed", "centroids_embed": "hook_centroids_embed"}
_BLOCK = ("slot_order", "points_resid_pre", "centroids_resid_pre", "points_resid_post", "centroids_resid_post")
# TransformerLens's names (and aliases) of an attention's hooks -> this model's hook_{scores, pattern, out}
_ATTENTION_HOOKS = {"scores": "scores", "attn_scores": "scores", "attn_logits": "scores", "pattern": "pattern",
                    "attn": "pattern", "out": "out", "attn_out": "out"}
_FFN_HOOKS = {"hidden": "hidden", "post": "hidden", "mlp_post": "hidden", "out": "out", "mlp_out": "out"}
_UNHOOKED_ATTENTION = ("q", "k", "v", "z", "rot_q", "rot_k", "result", "q_input", "k_input", "v_input", "attn_in")
_UNHOOKED_FFN = ("pre", "mlp_pre", "mid", "mlp_mid", "pre_linear")
# run_with_cache's own keywords (HookedRootModule.run_with_cache), the rest go to forward
_CACHE_OPTIONS = {"names_filter": None, "device": None, "remove_batch_dim": False, "incl_bwd": False,
                  "reset_hooks_end": True, "clear_contexts": False, "pos_slice": None}
_BLOCK_NAME = re.compile(r"blocks\.(\d+)\.")


class UnknownActivation(InvalidInput, KeyError):
    """A cache key or ``act_name`` shorthand that names no hook point of this model, or several (a TransformerLens
    name that is ambiguous here); the message names this model's equivalents. A ``KeyError`` as TransformerLens
    raises, and an ``InvalidInput``."""

    __str__ = BaseException.__str__  # the message as written, not KeyError's repr of it


class NotInThisModel(NotImplementedError):
    """A TransformerLens cache method for a part this model does not have (logits, several heads, neurons of an
    MLP, SSM layers); the message names what to use instead."""


def act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """The hook name of a shorthand, as TransformerLens's ``utils.get_act_name`` for this model's hook points.

    ``act_name("points_resid_post", 2)`` is ``blocks.2.hook_points_resid_post``; ``act_name("pattern", 1,
    "attn_xc")`` is ``blocks.1.attn_xc.hook_pattern`` (also "attn", "scores", "attn_scores", "out", "attn_out" with
    one of attn_xc, attn_xx, attn_cx, attn_cc); ``act_name("hidden", 0, "ffn_points")`` and ``("out", 0,
    "ffn_centroids")`` the FFNs'; ``("resid_pre" | "resid_post", l, "points" | "centroids")`` a stream;
    "points_embed", "centroids_embed", "anchor" (or ``("embed", None, "points")``) the embeddings and the anchor. A
    name ending in ``_grad`` names that hook's gradient (``run_with_cache(incl_bwd=True)``); a full hook name is
    returned as it is. A TransformerLens name that is ambiguous or absent here raises ``UnknownActivation`` naming
    the equivalents. ``layer`` is a step, 0 or more (a cache also reads negative steps from its end)."""
    if not isinstance(name, str):
        raise InvalidInputType(f"name must be a str, got {type(name).__name__}")
    if layer is None and layer_type is None and ("." in name or name.startswith("hook_")):
        return name
    if name.endswith("_grad"):
        return act_name(name[: -len("_grad")], layer, layer_type) + "_grad"
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
        raise UnknownActivation(f"layer must be a step, an int >= 0, got {layer!r}")
    if name in _TOP or name == "embed":
        if name == "embed":
            if layer_type not in STREAMS:
                raise UnknownActivation("this model has two embeddings: 'points_embed' (hook_points_embed) and "
                                        "'centroids_embed' (hook_centroids_embed); or ('embed', None, 'points')")
            name = f"{layer_type}_embed"
        if layer is not None:
            raise UnknownActivation(f"{name!r} is computed once per call, not per step: use {name!r} alone "
                                    f"({_TOP[name]}); a re-embedded step's stream is (f'{{stream}}_resid_pre', l)")
        return _TOP[name]
    if name == "pos_embed":
        raise UnknownActivation("this model has no positional embedding: its tokens carry no positions (the model is "
                                "equivariant to the order of the points)")
    if name in ("scale", "normalized"):
        raise UnknownActivation("this model has no layer norm, so no hook_scale or hook_normalized")
    if layer is None:
        if layer_type is None and name in _ATTENTION_HOOKS:
            layer_type = "attn_xc"
        raise UnknownActivation(f"{name!r} is per step: give the step, e.g. ({name!r}, 0"
                                f"{', ' + repr(layer_type) if layer_type else ''})")
    block = f"blocks.{layer}"
    if name in _BLOCK and layer_type is None:
        return f"{block}.hook_{name}"
    if name in ("resid_pre", "resid_post"):
        if layer_type in STREAMS:
            return f"{block}.hook_{layer_type}_{name}"
        raise UnknownActivation(f"this model has two residual streams: ('points_{name}', {layer}) "
                                f"({block}.hook_points_{name}) and ('centroids_{name}', {layer}) "
                                f"({block}.hook_centroids_{name})")
    if name == "resid_mid":
        raise UnknownActivation("no hook point sits between a step's attentions and its FFN (resid_mid): "
                                f"decompose_resid(layer={layer}, mlp_input=True, stream=...) sums to that stream")
    if layer_type in ATTENTIONS:
        if name in _ATTENTION_HOOKS:
            return f"{block}.{layer_type}.hook_{_ATTENTION_HOOKS[name]}"
        raise UnknownActivation(f"{name!r} is not hooked: an attention here hooks its scores, pattern and out "
                                f"({block}.{layer_type}.hook_scores / hook_pattern / hook_out); q = W_Q z + b_Q "
                                f"from the stream and model.blocks[{layer}].{layer_type}.weights")
    if layer_type in FFNS:
        if name in _FFN_HOOKS:
            return f"{block}.{layer_type}.hook_{_FFN_HOOKS[name]}"
        raise UnknownActivation(f"{name!r} is not hooked: an FFN here hooks its hidden units and out "
                                f"({block}.{layer_type}.hook_hidden / hook_out)")
    if name in _ATTENTION_HOOKS or name in _UNHOOKED_ATTENTION:
        also = " (or an FFN's: ffn_points, ffn_centroids)" if name == "out" else ""
        raise UnknownActivation(f"each block has four attentions: name one, e.g. ({name!r}, {layer}, 'attn_xc') for "
                                f"{block}.attn_xc.hook_{_ATTENTION_HOOKS.get(name, 'pattern')}; the attentions are "
                                f"{', '.join(ATTENTIONS)}{also}; each hooks its scores, pattern and out")
    if name in _FFN_HOOKS or name in _UNHOOKED_FFN:
        raise UnknownActivation(f"a block has two FFNs (when it has any): name one, e.g. ({name!r}, {layer}, "
                                f"'ffn_points') or ({name!r}, {layer}, 'ffn_centroids'); each hooks hidden and out")
    raise UnknownActivation(
        f"no hook point {name!r} (step {layer}{', ' + repr(layer_type) if layer_type else ''}): the shorthands are "
        f"{', '.join(_TOP)}, per step {', '.join(_BLOCK)}, ('resid_pre' | 'resid_post', l, 'points' | 'centroids'), "
        f"(scores | pattern | out, l, attention) and (hidden | out, l, ffn_points | ffn_centroids)")


def cached_steps(names) -> int:
    """The steps a cache's names reach: 1 + the largest l of a ``blocks.{l}.`` name (0 without one)."""
    steps = [int(match.group(1)) for name in names if (match := _BLOCK_NAME.match(name))]
    return max(steps) + 1 if steps else 0


class KMeansActivationCache(ActivationCache):
    """TransformerLens's ``ActivationCache`` for a run of ``KMeansTransformer`` (module docstring).

    ``cache[name]``, ``cache_dict``, ``keys()`` and ``names_filter`` are TransformerLens's. A key (name, layer[,
    layer_type]) is ``act_name``'s shorthand, a negative layer counted from the last cached step; ``cfg`` is the
    model's ``cfg`` with ``n_layers`` = the steps of this run (``steps``), which ``stack_activation``,
    ``accumulated_resid`` and ``decompose_resid`` stack over. ``reembed``: whether the run re-embedded the streams
    before every step (the model's ``config.reembed`` unless the call said otherwise). TransformerLens's methods for
    parts this model has not (logits, heads, neurons, SSM layers) raise ``NotInThisModel`` naming what to use."""

    def __init__(self, cache_dict: dict[str, Tensor], model: Any, has_batch_dim: bool = True,
                 steps: int | None = None, reembed: bool | None = None):
        super().__init__(cache_dict, model, has_batch_dim)
        self.steps = cached_steps(cache_dict) if steps is None else steps
        self.reembed = bool(model.config.reembed if reembed is None else reembed)
        self.cfg = replace(model.cfg, n_layers=self.steps)

    # ----- names ----------------------------------------------------------------------------------------------
    def __getitem__(self, key) -> Tensor:
        """A cached activation by hook name or by ``act_name`` shorthand, ``cache["points_resid_post", 2]``,
        ``cache["pattern", 1, "attn_xc"]``, ``cache["centroids_resid_post", -1]`` (the last cached step)."""
        if isinstance(key, str):
            return self.cache_dict[key] if key in self.cache_dict else self._lookup(act_name(key), key)
        if not isinstance(key, tuple) or not 1 <= len(key) <= 3:
            raise UnknownActivation(f"a cache key is a hook name or (name, layer[, layer_type]), got {key!r}")
        name, layer, layer_type = (*key, None, None)[:3]
        if isinstance(layer, int) and not isinstance(layer, bool) and layer < 0:
            layer += self.steps
        return self._lookup(act_name(name, layer, layer_type), key)

    def _lookup(self, name: str, key: object) -> Tensor:
        if name not in self.cache_dict:
            grad = "; gradients are cached by run_with_cache(incl_bwd=True)" if name.endswith("_grad") else ""
            raise KeyError(f"{name} (from {key!r}) is not in this cache, which holds steps 0 to {self.steps - 1}; "
                           f"a names_filter may have left it out{grad}")
        return self.cache_dict[name]

    def apply_slice_to_batch_dim(self, batch_slice) -> KMeansActivationCache:
        """As ``ActivationCache.apply_slice_to_batch_dim``, keeping this cache's steps and shorthand."""
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return KMeansActivationCache(sliced.cache_dict, self.model, sliced.has_batch_dim, self.steps, self.reembed)

    # ----- stacks ---------------------------------------------------------------------------------------------
    def _layer(self, layer: int | None, name: str = "layer") -> int:
        """TransformerLens's ``layer`` argument: None or -1 mean all ``steps``; else an int in [0, steps]."""
        if layer is None or layer == -1:
            return self.steps
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.steps:
            raise InvalidInput(f"{name} must be None, -1 or a step in [0, {self.steps}], got {layer!r}")
        return layer

    @staticmethod
    def _stream(stream: object) -> str:
        if stream is None:
            raise InvalidInput("stream must be 'points' or 'centroids': this model has two residual streams")
        return check_choice(stream, "stream", STREAMS)

    def stack_activation(self, activation_name: str, layer: int = -1, sublayer_type: str | None = None) -> Tensor:
        """(steps, ...): the activation at every step below ``layer`` (all cached steps by default), stacked on a new
        first axis, e.g. ``stack_activation("centroids_resid_post")`` (T, b, k, D) or ``stack_activation("pattern",
        sublayer_type="attn_xc")`` (T, b, n, k). ``activation_name`` is a shorthand (``act_name``) or a name within
        a block ("attn_xc.hook_pattern")."""
        steps = self._layer(layer)
        if steps == 0:
            raise InvalidInput("layer=0 stacks no step: give a layer in [1, steps] (or -1 for all)")
        within_block = isinstance(activation_name, str) and ("." in activation_name
                                                              or activation_name.startswith("hook_"))
        names = [f"blocks.{step}.{activation_name}" if within_block else act_name(activation_name, step, sublayer_type)
                 for step in range(steps)]
        return torch.stack([self._lookup(name, activation_name) for name in names], dim=0)

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice=None, mlp_input: bool = False, return_labels: bool = False, *,
                          stream: str | None = None):
        """(L + 1, b, tokens, D): the ``stream`` ("points" or "centroids") entering each step l <= L ("{l}_pre",
        ``hook_{stream}_resid_pre``) and, for L = steps (the default), after the last ("final_post"); with
        ``return_labels`` also the labels. The centroid stream's ``[..., :d]`` are the centroids step l received
        (plus ``hook_anchor`` for a model that centres its tasks). ``pos_slice`` slices the token axis. This model
        has no layer norm: ``apply_ln`` leaves the stack as it is (as TransformerLens does without one); no hook
        sits between a step's attentions and its FFN, so ``incl_mid`` and ``mlp_input`` are refused."""
        stream = self._stream(stream)
        if incl_mid or mlp_input:
            raise InvalidInput("no hook point sits between a step's attentions and its FFN (resid_mid): "
                               "decompose_resid(layer=l, mlp_input=True, stream=...) sums to that stream")
        last = self._layer(layer)
        components, labels = [], []
        for step in range(last + 1):
            if step == self.steps:
                components.append(self[f"{stream}_resid_post", self.steps - 1])
                labels.append("final_post")
            else:
                components.append(self[f"{stream}_resid_pre", step])
                labels.append(f"{step}_pre")
        stack = _stack(components, pos_slice)  # (L + 1, b, tokens, D)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice=None, incl_embeds: bool = True, return_labels: bool = False,
                        *, stream: str | None = None):
        """(components, b, tokens, D): what was added to the ``stream`` ("points" or "centroids") entering step L
        (after the last step for L = steps, the default), whose sum is that stream; with ``return_labels`` also
        the labels.

        The components are the embedding ("embed", ``hook_{stream}_embed``), then per step l < L each attention
        that adds to the stream ("{l}_attn_xc_out", "{l}_attn_xx_out" for points; "{l}_attn_cx_out",
        "{l}_attn_cc_out" for centroids: ``hook_out``) and its FFN ("{l}_ffn_points_out"). A run that re-embeds
        before every step starts the stream afresh at each step, so its decomposition starts at the last
        re-embedding, "{s}_embed" (``blocks.{s}.hook_{stream}_resid_pre``, s = min(L, steps - 1)). ``mlp_input``:
        the stream entering step L's FFN (step L's attentions added). ``mode`` "attn" keeps the attentions, "mlp"
        (or "ffn") the FFNs; ``incl_embeds=False`` drops the embedding. ``pos_slice`` slices the token axis; no layer
        norm, so ``apply_ln`` changes nothing. The sum is the cached stream up to rounding unless a hook patched
        the run."""
        stream = self._stream(stream)
        check_choice(mode, "mode", ("all", "attn", "mlp", "ffn"))
        last = self._layer(layer)
        if mlp_input and last == self.steps:
            raise InvalidInput(f"mlp_input=True decomposes the stream entering step layer's FFN: layer must be a step "
                               f"below {self.steps}")
        with_attentions, with_ffn = mode in ("all", "attn"), mode != "attn" and self.model.config.ffn
        start = min(last, self.steps - 1) if self.reembed else 0  # the last (re-)embedding at or before step L
        components, labels = [], []
        if incl_embeds:
            components.append(self[f"{stream}_embed"] if start == 0 else self[f"{stream}_resid_pre", start])
            labels.append("embed" if start == 0 else f"{start}_embed")
        for step in range(start, last + 1 if mlp_input else last):
            parts = [(name, "out") for name in STREAM_ATTENTIONS[stream]] if with_attentions else []
            if with_ffn and step < last:
                parts.append((f"ffn_{stream}", "out"))
            for part, hook in parts:
                components.append(self[hook, step, part])
                labels.append(f"{step}_{part}_out")
        if not components:
            raise InvalidInput("nothing to decompose: incl_embeds=False and no step before layer")
        stack = _stack(components, pos_slice)  # (components, b, tokens, D)
        return (stack, labels) if return_labels else stack

    # ----- TransformerLens methods for parts this model has not ----------------------------------------------
    def logit_lens(self, *args: Any, **kwargs: Any):
        """Refused: no unembedding (``NotInThisModel``)."""
        raise NotInThisModel(_NO_LOGITS)

    def logit_attrs(self, *args: Any, **kwargs: Any):
        """Refused: no logits (``NotInThisModel``)."""
        raise NotInThisModel(_NO_LOGITS)

    def compute_head_results(self, *args: Any, **kwargs: Any):
        """Refused: each attention is one head whose output is cached (``NotInThisModel``)."""
        raise NotInThisModel(_ONE_HEAD)

    def stack_head_results(self, *args: Any, **kwargs: Any):
        """Refused: each attention is one head whose output is cached (``NotInThisModel``)."""
        raise NotInThisModel(_ONE_HEAD)

    def get_full_resid_decomposition(self, *args: Any, **kwargs: Any):
        """Refused: use ``decompose_resid(stream=...)`` (``NotInThisModel``)."""
        raise NotInThisModel("use decompose_resid(stream='points' | 'centroids'): its components are the embedding "
                             "and every attention's and FFN's output, each one head or one FFN (hook_hidden holds "
                             "an FFN's units)")

    def get_neuron_results(self, *args: Any, **kwargs: Any):
        """Refused: the FFN's units are cached as ``hook_hidden`` (``NotInThisModel``)."""
        raise NotInThisModel(_NEURONS)

    def stack_neuron_results(self, *args: Any, **kwargs: Any):
        """Refused: the FFN's units are cached as ``hook_hidden`` (``NotInThisModel``)."""
        raise NotInThisModel(_NEURONS)

    def ssm_layers(self, *args: Any, **kwargs: Any):
        """Refused: no SSM layers (``NotInThisModel``)."""
        raise NotInThisModel(_NO_SSM)

    def compute_ssm_effective_attention(self, *args: Any, **kwargs: Any):
        """Refused: no SSM layers (``NotInThisModel``)."""
        raise NotInThisModel(_NO_SSM)

    def compute_ssm_state(self, *args: Any, **kwargs: Any):
        """Refused: no SSM layers (``NotInThisModel``)."""
        raise NotInThisModel(_NO_SSM)


_NO_LOGITS = ("this model has no unembedding or logits: its output is the first d features of the centroid stream "
              "after the last step, cache['centroids_resid_post', -1][..., :d] (plus hook_anchor for a model that "
              "centres its tasks); every step's: accumulated_resid(stream='centroids')[..., :d]; the per-step labels "
              "and objective: interp.instruments.readouts")
_ONE_HEAD = ("each attention (attn_xc, attn_xx, attn_cx, attn_cc) is one head, and its output is cached as "
             "blocks.{l}.attn_xc.hook_out, ('out', l, 'attn_xc'); decompose_resid(stream=...) stacks them")
_NEURONS = ("the FFNs' units are cached as blocks.{l}.ffn_points.hook_hidden (('hidden', l, 'ffn_points'); and "
            "ffn_centroids); unit h adds hidden[..., h, None] * model.layers[i].ffn_points.W_out[:, h]")
_NO_SSM = "this model has no state-space (SSM) layers: its blocks are attentions (and FFNs)"


def _stack(components: list[Tensor], pos_slice) -> Tensor:
    """(c, ..., tokens, D): the components stacked, ``pos_slice`` (TransformerLens's ``Slice``) on the token axis."""
    pos_slice = pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)
    return torch.stack([pos_slice.apply(component, dim=-2) for component in components], dim=0)


# ----- run_with_cache -------------------------------------------------------------------------------------------


def run_with_cache(model, base: Callable, steps: int, model_args: tuple, kwargs: dict):
    """``KMeansTransformer.run_with_cache``: ``base`` (HookedRootModule.run_with_cache) without gradients, else
    ``_run_with_gradients``; returns the output and a ``KMeansActivationCache`` of ``steps`` steps."""
    kwargs = dict(kwargs)
    loss = kwargs.pop("loss", None)
    incl_bwd = bool(kwargs.get("incl_bwd", False))
    if loss is not None and not incl_bwd:
        raise InvalidInput("loss is the scalar run_with_cache(incl_bwd=True) differentiates: pass incl_bwd=True "
                           "with it")
    reembed = _forward_arguments(model, model_args, kwargs).get("reembed")
    has_batch_dim = not kwargs.get("remove_batch_dim", False)
    if incl_bwd:
        out, cache_dict = _run_with_gradients(model, model_args, kwargs, loss)
    else:
        out, cache_dict = base(*model_args, **kwargs)
    return out, KMeansActivationCache(cache_dict, model, has_batch_dim=has_batch_dim, steps=steps, reembed=reembed)


def _forward_arguments(model, model_args: tuple, kwargs: dict) -> dict:
    """The forward's arguments of a run_with_cache call, by name."""
    forward_kwargs = {name: value for name, value in kwargs.items() if name not in _CACHE_OPTIONS}
    return inspect.signature(model.forward).bind_partial(*model_args, **forward_kwargs).arguments


def _run_with_gradients(model, model_args: tuple, kwargs: dict, loss: Callable | None):
    """As HookedRootModule.run_with_cache(incl_bwd=True), with a scalar of the ``ClusteringOutput``: ``loss(out)``,
    by default mean_b ln Phi_b (the k-means objective of the output centroids on the caller's points; paper 2,
    Eq. 1). Every cached activation that needs no grad (frozen weights, a re-embedded stream, a caller under
    ``torch.no_grad``) is made a differentiable function of a new leaf, times 1, so its backward hook sees the
    scalar's gradient with respect to it; the values are unchanged. As in TransformerLens, ``backward`` also
    accumulates into the ``.grad`` of the parameters and inputs that require grad."""
    if loss is not None and not callable(loss):
        raise InvalidInputType(f"loss must be a callable of the ClusteringOutput returning a scalar tensor, got "
                               f"{type(loss).__name__}")
    options = {name: kwargs.pop(name, default) for name, default in _CACHE_OPTIONS.items()}
    if options["remove_batch_dim"] and model_args and isinstance(model_args[0], Tensor) and model_args[0].shape[0] != 1:
        raise InvalidInput(f"remove_batch_dim=True needs one task, got a batch of {model_args[0].shape[0]}")
    cache_dict, fwd, bwd = model.get_caching_hooks(options["names_filter"], True, options["device"],
                                                   remove_batch_dim=options["remove_batch_dim"],
                                                   pos_slice=Slice.unwrap(options["pos_slice"]))
    tracked = [(name, _differentiable) for name, _ in fwd]  # before the caching hooks: they cache the same values
    points = _forward_arguments(model, model_args, kwargs).get("points")
    with model.hooks(fwd_hooks=tracked + fwd, bwd_hooks=bwd, reset_hooks_end=options["reset_hooks_end"],
                     clear_contexts=options["clear_contexts"]), torch.enable_grad():
        out = model(*model_args, **kwargs)
        scalar = log_objective(points, out.centroids).mean() if loss is None else loss(out)  # ()
        if not (isinstance(scalar, Tensor) and scalar.ndim == 0 and scalar.is_floating_point()):
            raise InvalidInput(f"loss must return a 0-dimensional floating tensor, got "
                               f"{getattr(scalar, 'shape', type(scalar).__name__)}")
        if not scalar.requires_grad:
            raise InvalidInput("the loss does not depend on any cached activation: no gradient to cache")
        with warnings.catch_warnings():  # a hook point whose input needs no grad fires on its output: intended here
            warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
            scalar.backward()
    return out, cache_dict


def _differentiable(activation: Tensor, hook) -> Tensor | None:
    """A floating activation that needs no grad, as activation * 1 with the 1 a new leaf (the same values);
    None (unchanged) otherwise."""
    if activation.requires_grad or not activation.is_floating_point():
        return None
    one = torch.ones((), dtype=activation.dtype, device=activation.device, requires_grad=True)  # ()
    return activation * one
