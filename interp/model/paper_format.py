"""Load a state dict saved by the papers' own code (the authors' learnable ``KModel``) as a KMeansTransformer.

The authors' model (paper 1's learning experiment; paper 2, §3) is one layer of four attentions, each with
``nn.Linear`` maps ``W_q``, ``W_k``, ``W_v`` (D x D, with bias), under these names:

    CAX  points -> centroids (cross)   = attn_xc        SAX  points -> points (self)        = attn_xx
    CAC  centroids -> points (cross)   = attn_cx        SAC  centroids -> centroids (self)  = attn_cc

and scores -gamma ||W_q z - W_k z'||^2 / sqrt(D) normalised over the keys (paper 2, Def. 2.2). ``nn.Linear`` stores
its weight as (out, in) and computes W z + b, which is exactly our paper orientation (``AttentionWeights``):
``CAX.W_q.weight`` -> ``attn_xc.W_Q``, ``CAX.W_q.bias`` -> ``attn_xc.b_Q``, and so on.

Their training script saves ``{"model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "cli_args",
"step", ...}`` with ``torch.save``; ``cli_args`` holds the run's settings (``ndims``, ``nclusters``, ``scratch``,
``attn_act``, ``attn_itemp``, ``dropout``, ``dqkv``). A bare state dict (``torch.save(model.state_dict())``) is
read too, with d, k and the embedding given as arguments. Files are read with ``torch.load(weights_only=True)``
only: tensors and plain containers, never code; a zip archive is first checked from its central directory alone
(``interp.model.torch_save_file``), so a zip bomb or an archive torch.save would not write is refused before anything is
decompressed or unpickled (docs/learned_model.md, "Loading the papers' checkpoints").
"""

from __future__ import annotations

import math
import os
import reprlib
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_choice, check_positive_int
from interp.model.config import EMBEDDINGS, ModelConfig, learned_model_config
from interp.model.embedding import centroid_codes
from interp.model.torch_save_file import is_torch_save_file, load_weights_only
from interp.model.transformer import KMeansTransformer

# their attention names -> ours; their nn.Linear names -> our (weight, bias) slots
PAPER_ATTENTIONS = {"CAX": "attn_xc", "SAX": "attn_xx", "CAC": "attn_cx", "SAC": "attn_cc"}
PAPER_PROJECTIONS = {"W_q": ("W_Q", "b_Q"), "W_k": ("W_K", "b_K"), "W_v": ("W_V", "b_V")}
# their setting values -> ours (their code has the one-hot and the d-only "none" scratch space)
PAPER_SCRATCH = {"onehot": "onehot", "none": "none"}
PAPER_NORMALISERS = {"softmax": "softmax", "sparsemax": "sparsemax"}
# settings a cli_args may leave out take the papers' main configuration (run names "A=softmax_a=1.0_p=0.01_q=1")
PAPER_DEFAULTS = {"attn_act": "softmax", "attn_itemp": 1.0, "dropout": 0.01, "dqkv": 1}
PAPER_LIMITS = {"d": 1_000_000, "k": 1_000_000}
SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def load_paper_state_dict(path: str | os.PathLike, *, d: int | None = None, k: int | None = None,
                          embedding: str | None = None) -> KMeansTransformer:
    """A ``KMeansTransformer`` (eval mode) with the weights of a state dict in the authors' ``KModel`` layout
    (``load_paper_checkpoint`` without the file's settings)."""
    return load_paper_checkpoint(path, d=d, k=k, embedding=embedding)[0]


def load_paper_checkpoint(path: str | os.PathLike, *, d: int | None = None, k: int | None = None,
                          embedding: str | None = None) -> tuple[KMeansTransformer, Mapping | None]:
    """(model, the file's ``cli_args`` or None): a ``KMeansTransformer`` (eval mode) with the weights of a state dict
    in the authors' ``KModel`` layout, and the settings their training script saved with it.

    The file is a ``torch.save`` of either the training script's dict (``model_state_dict`` and ``cli_args``) or a
    bare state dict. The settings come from ``cli_args`` when it is there: ``ndims`` -> d, ``nclusters`` -> k,
    ``scratch`` -> embedding (``onehot``: points [x; 0_k], centroids [c; e_j]; ``none``: x and c), ``attn_act`` ->
    normaliser, ``attn_itemp`` -> gamma, ``dropout`` -> the attention dropout, ``dqkv`` must be 1 (D x D maps).
    ``d``, ``k``, ``embedding`` given as well must agree with it. Without ``cli_args`` all three are needed (the width
    D = d + k or d cannot tell them apart) and the rest is the papers' main configuration (softmax, gamma = 1,
    dropout 0.01).

    Their attention dropout stays on in their evaluation; ours is drawn in training mode only, so the returned
    eval-mode model is deterministic (``model.train()`` draws the masks, with the same p, from the forward's
    generator). Every refusal (a zip archive torch.save would not write, code in the pickle, a truncated or foreign
    file, missing, unexpected, wrong-shaped or non-dense tensors, settings we do not map) is an ``InvalidInput``
    that names the file.
    """
    path = Path(path)
    source = str(path)
    given = _check_arguments(d, k, embedding)
    if not path.is_file():
        raise InvalidInput(f"{source}: no such file")
    if not is_torch_save_file(path):
        raise InvalidInput(f"{source}: not a torch.save file (neither a zip archive nor the legacy torch format)")
    loaded = load_weights_only(path)
    state, cli_args = _split_checkpoint(loaded, source)
    settings = _settings(cli_args, given, source)
    try:
        config = learned_model_config(settings["d"], settings["k"], settings["embedding"],
                                      normaliser=settings["normaliser"], gamma=settings["gamma"],
                                      dropout=settings["dropout"], bias=True)
    except InvalidInput as error:
        raise InvalidInput(f"{source}: cli_args give an invalid model: {error}") from None
    ours = _map_state_dict(state, config, source, from_cli_args=cli_args is not None)
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in ours.values()) else torch.float32
    model = KMeansTransformer(config).to(dtype)
    codes = centroid_codes(config.k, config.embedding, dtype)  # (k, e): the embedding's fixed codes
    model.load_state_dict({**{name: t.to(dtype) for name, t in ours.items()}, "codes": codes}, strict=True)
    return model.eval(), cli_args


# ----- reading the file ---------------------------------------------------------------------------------------
def _split_checkpoint(loaded: object, source: str) -> tuple[Mapping, Mapping | None]:
    """(state dict, cli_args or None) of the training script's dict or of a bare state dict."""
    if not isinstance(loaded, Mapping):
        raise InvalidInput(f"{source}: holds a {type(loaded).__name__}, not a dict: expected the training script's "
                           "dict with 'model_state_dict' or a bare state dict")
    if "model_state_dict" in loaded:
        state = loaded["model_state_dict"]
        if not isinstance(state, Mapping):
            raise InvalidInput(f"{source}: 'model_state_dict' is a {type(state).__name__}, not a state dict")
        cli_args = loaded.get("cli_args")
        if cli_args is not None and not isinstance(cli_args, Mapping):
            raise InvalidInput(f"{source}: 'cli_args' is a {type(cli_args).__name__}, not a dict of settings")
        return state, cli_args
    if loaded and all(isinstance(key, str) and isinstance(value, Tensor) for key, value in loaded.items()):
        return loaded, None
    keys = ", ".join(repr(key) for key in list(loaded)[:8])
    raise InvalidInput(f"{source}: no 'model_state_dict' entry and not a bare state dict of tensors (keys: {keys})")


# ----- settings ------------------------------------------------------------------------------------------------
def _check_arguments(d: object, k: object, embedding: object) -> dict:
    """The d, k, embedding the caller gave (None: not given), checked."""
    given = {}
    for name, value in (("d", d), ("k", k)):
        if value is not None:
            given[name] = check_positive_int(value, name)
            if value > PAPER_LIMITS[name]:
                raise InvalidInput(f"{name}={value} exceeds {PAPER_LIMITS[name]}")
    if embedding is not None:
        given["embedding"] = check_choice(embedding, "embedding", EMBEDDINGS)
    return given


def _setting(cli_args: Mapping, name: str, source: str) -> object:
    if name in cli_args:
        return cli_args[name]
    if name in PAPER_DEFAULTS:
        return PAPER_DEFAULTS[name]
    raise InvalidInput(f"{source}: cli_args has no {name!r} (it needs ndims, nclusters and scratch)")


def _number(value: object, name: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{source}: cli_args {name}={reprlib.repr(value)} is not a finite number")
    return float(value)


def _settings(cli_args: Mapping | None, given: dict, source: str) -> dict:
    """d, k, embedding, normaliser, gamma, dropout: from cli_args (checked against ``given``), else ``given`` and
    the papers' main configuration."""
    if cli_args is None:
        missing = [name for name in ("d", "k", "embedding") if name not in given]
        if missing:
            raise InvalidInput(
                f"{source}: a state dict without cli_args does not say its d, k and embedding (the width D = d + k "
                f"of a one-hot model is also that of a d-only one with d + k features): pass {', '.join(missing)} "
                f"(e.g. load_model(path, d=32, k=10, embedding='onehot'))")
        return {**given, "normaliser": "softmax", "gamma": 1.0, "dropout": PAPER_DEFAULTS["dropout"]}
    settings = {}
    for ours, theirs in (("d", "ndims"), ("k", "nclusters")):
        value = _setting(cli_args, theirs, source)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= PAPER_LIMITS[ours]:
            raise InvalidInput(f"{source}: cli_args {theirs}={reprlib.repr(value)} is not an int in [1, "
                               f"{PAPER_LIMITS[ours]}]")
        settings[ours] = value
    scratch = _setting(cli_args, "scratch", source)
    if not isinstance(scratch, str) or scratch not in PAPER_SCRATCH:
        raise InvalidInput(f"{source}: cli_args scratch={reprlib.repr(scratch)} is not one this loader maps "
                           f"({', '.join(PAPER_SCRATCH)})")
    settings["embedding"] = PAPER_SCRATCH[scratch]
    activation = _setting(cli_args, "attn_act", source)
    if not isinstance(activation, str) or activation not in PAPER_NORMALISERS:
        raise InvalidInput(f"{source}: cli_args attn_act={reprlib.repr(activation)} is not one this loader maps "
                           f"({', '.join(PAPER_NORMALISERS)})")
    settings["normaliser"] = PAPER_NORMALISERS[activation]
    dqkv = _setting(cli_args, "dqkv", source)
    if isinstance(dqkv, bool) or not isinstance(dqkv, (int, float)) or dqkv != 1:
        raise InvalidInput(f"{source}: cli_args dqkv={reprlib.repr(dqkv)}: only dqkv = 1 (D x D query, key and "
                           "value maps, as in the papers) maps onto this model")
    settings["gamma"] = _number(_setting(cli_args, "attn_itemp", source), "attn_itemp", source)
    settings["dropout"] = _number(_setting(cli_args, "dropout", source), "dropout", source)
    for name, value in given.items():
        if settings[name] != value:
            theirs = {"d": "ndims", "k": "nclusters", "embedding": "scratch"}[name]
            raise InvalidInput(f"{source}: {name}={value!r} disagrees with the file's cli_args {theirs}="
                               f"{cli_args.get(theirs)!r}; leave it out to use the file's settings")
    return settings


# ----- tensors ---------------------------------------------------------------------------------------------------
def _paper_prefix(state: Mapping, source: str) -> str:
    """The common prefix before ``CAX.W_q.weight`` ('' for the bare module; e.g. 'module.' for a wrapped one)."""
    anchor = "CAX.W_q.weight"
    prefixes = sorted(key[: -len(anchor)] for key in state if isinstance(key, str) and key.endswith(anchor)
                      and (len(key) == len(anchor) or key[-len(anchor) - 1] == "."))
    if not prefixes:
        keys = ", ".join(repr(key) for key in list(state)[:8])
        raise InvalidInput(f"{source}: not a state dict in the papers' KModel layout: no 'CAX.W_q.weight' (its "
                           f"attentions are CAX, SAX, CAC, SAC with W_q, W_k, W_v); keys: {keys}")
    if len(prefixes) > 1:
        raise InvalidInput(f"{source}: holds {len(prefixes)} sets of the four attentions (prefixes {prefixes}); this "
                           "loader reads one-layer models")
    return prefixes[0]


def _check_dense(tensor: Tensor, name: str, source: str) -> None:
    """Refuse what the weights-only unpickler returns but a weight cannot be: a nested, sparse (any sparse layout),
    meta (no values) or quantized tensor."""
    if tensor.is_nested:
        raise InvalidInput(f"{source}: {name} is a nested tensor; only dense tensors are read")
    if tensor.layout in SPARSE_LAYOUTS:
        raise InvalidInput(f"{source}: {name} is a sparse tensor ({tensor.layout}); only dense tensors are read")
    if tensor.layout != torch.strided:
        raise InvalidInput(f"{source}: {name} has layout {tensor.layout}; only dense tensors are read")
    if tensor.is_meta:
        raise InvalidInput(f"{source}: {name} is a meta tensor (a shape without values); only tensors with values "
                           "are read")
    if tensor.is_quantized:
        raise InvalidInputType(f"{source}: {name} is a quantized tensor ({tensor.dtype}); only dense floating-point "
                               "tensors are read")


def _map_state_dict(state: Mapping, config: ModelConfig, source: str, from_cli_args: bool) -> dict[str, Tensor]:
    """Our ``layers.0.attn_*.{W,b}_*`` tensors from their ``{prefix}{CAX,...}.{W_q,...}.{weight,bias}``, after
    checking names, shapes (W (D, D), b (D,)), dtypes and values."""
    prefix = _paper_prefix(state, source)
    width = config.d_model
    where = ("from its cli_args" if from_cli_args else "from the arguments") + (
        f": D = d + e = {config.d} + {config.scratch_width} for embedding={config.embedding!r}, k={config.k}")
    expected = {}  # their key -> (our key, shape)
    for theirs_attention, ours_attention in PAPER_ATTENTIONS.items():
        for theirs_linear, (weight, bias) in PAPER_PROJECTIONS.items():
            stem = f"{prefix}{theirs_attention}.{theirs_linear}"
            expected[f"{stem}.weight"] = (f"layers.0.{ours_attention}.{weight}", (width, width))
            expected[f"{stem}.bias"] = (f"layers.0.{ours_attention}.{bias}", (width,))
    missing = [key for key in expected if key not in state]
    if missing:
        raise InvalidInput(f"{source}: the state dict lacks {', '.join(missing)} (the papers' KModel has four "
                           "attentions CAX, SAX, CAC, SAC, each with W_q, W_k, W_v as nn.Linear with bias)")
    unexpected = [reprlib.repr(key) if not isinstance(key, str) else key for key in state if key not in expected]
    if unexpected:
        listed = ", ".join(unexpected[:8]) + (f" and {len(unexpected) - 8} more" if len(unexpected) > 8 else "")
        raise InvalidInput(f"{source}: the state dict holds tensors this loader does not map ({listed})"
                           "; only the papers' one-layer KModel (four attentions, no FFN or norm) is read")
    ours = {}
    for theirs, (name, shape) in expected.items():
        tensor = state[theirs]
        if not isinstance(tensor, Tensor):
            raise InvalidInputType(f"{source}: {theirs} is a {type(tensor).__name__}, not a tensor")
        _check_dense(tensor, theirs, source)
        if tuple(tensor.shape) != shape:
            raise InvalidInput(f"{source}: {theirs} has shape {tuple(tensor.shape)}, expected {shape} ({where})")
        if not tensor.is_floating_point():
            raise InvalidInputType(f"{source}: {theirs} has dtype {tensor.dtype}, expected a floating dtype")
        tensor = tensor.detach().to(torch.float64 if tensor.dtype == torch.float64 else torch.float32)
        if not bool(torch.isfinite(tensor).all()):
            raise InvalidInput(f"{source}: {theirs} has NaN or inf entries")
        largest = tensor.abs().max().item()
        limit = torch.finfo(tensor.dtype).max ** 0.25  # a score ||Qz - Kz'||^2 is quadratic in the weights
        if largest > limit:
            raise InvalidInput(f"{source}: {theirs} has an entry of magnitude {largest:.3g} > {limit:.3g}, which "
                               "overflows the attention scores")
        ours[name] = tensor
    return ours
