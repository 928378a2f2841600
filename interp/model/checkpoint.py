"""Checkpoints: one safetensors file = tensors + JSON metadata; never pickle (docs/learned_model.md, "Checkpoints").

Writes are atomic (a temporary file ``.{name}.XXXXXXXX.tmp`` in the same folder, fsync, then rename), so an
interrupted write never replaces a good checkpoint; a temporary file left by a killed writer is removed by the next
training run that holds the checkpoint's lock (``interp.training.lock``).

Every file carries a sha256 digest of its tensors and metadata. The digest is not keyed: it detects accidental
damage (a truncated copy, flipped bits, an edit by a tool that does not know the format), not tampering, since
anyone who edits a file can recompute it. So nothing read from a file is trusted; before anything is allocated the
header is checked (format tag, metadata nested at most ``MAX_METADATA_DEPTH`` levels, the model config within
``FILE_LIMITS`` and, in a file written by training, equal field by field to what its training config implies, every
tensor's name, shape and dtype equal to what the config needs), and what is loaded is checked (finite weights of
magnitude at most ``max_weight(dtype)``, the centroid codes equal to the embedding's). Every refusal is an
``InvalidInput``; ``interp.training.state`` checks a training run's state the same way before resuming it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import reprlib
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save
from torch import Tensor

from interp._checks import InvalidInput, SymlinkLoop, check_device, check_utf8_path, existing_kind
from interp._io import write_bytes_atomically
from interp.model import KMeansTransformer, ModelConfig
from interp.model.block import LayerWeights
from interp.model.config import InferenceSettings, trained_model_config
from interp.model.embedding import centroid_codes
from interp.model.paper_format import load_paper_checkpoint
from interp.model.torch_save_file import is_torch_save_file

FORMAT = "interp-checkpoint-v1"
DIGEST = "sha256"  # header key: digest of every tensor (name, dtype, shape, bytes) and every other header entry
MAX_METADATA_DEPTH = 16  # containers; interp writes at most 4 (optimizer -> param_groups -> group -> params)
# Sizes a checkpoint's model_config may give. The tensors fix d, k (except embedding "none", whose codes are (k, 0))
# and the number of weight sets; a shared-weights model has one weight set whatever n_layers is, and n_layers only
# sets how many hook-holding blocks are built (about 1-2 ms and 60 KB each; longer runs pass steps=).
FILE_LIMITS = {"d": 1_000_000, "k": 1_000_000, "n_layers": 1_000, "ffn_hidden": 1_000_000}
MODEL_DTYPES = (torch.float32, torch.float64)
HISTORY_FIELDS = ("step", "relative_objective")  # what every history entry holds (loss and lr may be null or absent)
SAFETENSORS_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
                      "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
                      "I64": torch.int64, "BOOL": torch.bool}
TEMPORARY = r"[a-z0-9_]{8}\.tmp"  # what tempfile.mkstemp adds after the prefix ".{name}." of a checkpoint's temporary

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "pretrained"


def _digest(tensors: dict[str, Tensor], header: dict[str, str]) -> str:
    """sha256 over the tensors (sorted by name) and the header entries other than the digest itself."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu().reshape(-1)
        h.update(f"{name}|{tensor.dtype}|{tuple(tensors[name].shape)}|".encode())
        h.update(tensor.view(torch.uint8).numpy().tobytes())
    for key in sorted(k for k in header if k != DIGEST):
        h.update(f"{key}={header[key]}|".encode())
    return h.hexdigest()


def stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """The temporary files ``save_checkpoint`` makes for ``path`` (left behind only by a killed writer)."""
    path = Path(path)
    pattern = re.compile(re.escape(f".{path.name}.") + TEMPORARY)
    if not path.parent.is_dir():
        return []
    return sorted(entry for entry in path.parent.iterdir() if pattern.fullmatch(entry.name))


def check_checkpoint_path(path: str | os.PathLike, name: str = "out") -> Path:
    """``path`` as a checkpoint to write: a UTF-8 file name (``check_utf8_path``, the rule of every writer) in a
    folder that exists (nothing is created), not a loop of symbolic links."""
    path = check_utf8_path(path, name)
    try:
        kind = existing_kind(path)
    except SymlinkLoop as loop:
        raise loop.named(name) from None
    if kind == "folder":
        raise InvalidInput(f"{name} must be a checkpoint file path, got the folder {path}")
    if kind not in (None, "file"):
        raise InvalidInput(f"{name} {path} is a {kind}; give the path of a regular file")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InvalidInput(f"{name} {path}: its folder {folder} {what}; create it first (mkdir -p {folder})")
    return path


def save_checkpoint(path: str | os.PathLike, tensors: dict[str, Tensor], metadata: dict) -> Path:
    """Atomically write ``tensors`` and JSON-able ``metadata`` (each top-level value JSON-encoded) to ``path``, whose
    folder must exist."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write checkpoint {path}: its folder {path.parent} does not exist")
    header = {"format": FORMAT, **{key: json.dumps(value) for key, value in metadata.items()}}
    contiguous = {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}
    header[DIGEST] = _digest(contiguous, header)
    # serialised here and written through our own temporary: safetensors' save_file writes through a temporary of
    # its own (".tmpXXXXXX"), which a run killed mid-write would leave behind under a name no cleanup knows
    payload = save(contiguous, metadata=header)
    return write_bytes_atomically(path, payload, devices=False, sync=True)  # .{name}.XXXXXXXX.tmp, then a rename


def _depth(value: object) -> int:
    """Nesting depth of a JSON value: the most containers on one path (a scalar 0, [] and [1] 1, [[1]] 2),
    computed without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, enclosing = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, enclosing + 1)
            stack.extend((child, enclosing + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_header(path: str | os.PathLike) -> tuple[dict, dict[str, tuple[torch.dtype | str, tuple[int, ...]]]]:
    """(metadata, {tensor name: (dtype, shape)}) of an interp checkpoint, read from its header alone: no tensor is
    loaded. Clear errors for unreadable or foreign files and for metadata that is not bounded JSON."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
            shapes = {}
            for name in handle.keys():
                view = handle.get_slice(name)
                shapes[name] = (SAFETENSORS_DTYPES.get(view.get_dtype(), view.get_dtype()), tuple(view.get_shape()))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise InvalidInput(f"{path} is not a readable safetensors checkpoint (truncated or corrupt?): "
                           f"{error}") from None
    if header.get("format") != FORMAT:
        raise InvalidInput(f"{path} is not an interp checkpoint (format tag {header.get('format')!r}, "
                           f"expected {FORMAT!r})")
    metadata = {}
    for key, value in header.items():
        if key in ("format", DIGEST):
            continue
        try:
            metadata[key] = json.loads(value)
        except ValueError as error:  # not JSON, or an integer of more digits than Python converts (4300)
            raise InvalidInput(f"{path} has corrupt metadata: its {key!r} entry is not JSON ({error})") from None
        except RecursionError:
            metadata[key] = None
            depth = math.inf
        else:
            depth = _depth(metadata[key])
        if depth > MAX_METADATA_DEPTH:
            raise InvalidInput(f"{path}: metadata {key!r} is nested deeper than {MAX_METADATA_DEPTH} levels; interp "
                               "never writes that (a crafted file?)")
    if DIGEST not in header:
        raise InvalidInput(f"{path} has no {DIGEST} integrity digest: not written by interp, or edited")
    return metadata, shapes


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict]:
    """(tensors, metadata) of an interp checkpoint; clear errors for missing, truncated, damaged or foreign files.

    The header is checked first (``read_header``); loading then allocates what the tensors occupy in the file."""
    path = Path(path)
    metadata, _ = read_header(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise InvalidInput(f"{path} is not a readable safetensors checkpoint (truncated or corrupt?): "
                           f"{error}") from None
    if header.get(DIGEST) != _digest(tensors, header):
        raise InvalidInput(f"{path} was modified after it was written ({DIGEST} digest mismatch): damaged or edited")
    return tensors, metadata


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_history(history: object, source: str) -> None:
    """Refuse a ``history`` metadata entry that is not a list of evaluations as training writes them: objects with a
    non-negative integer ``step``, a number ``relative_objective`` (what the report plots and a sweep tabulates) and,
    where present, a number or null ``loss`` and ``lr``."""
    where = f"{source}: metadata history"
    if not isinstance(history, list):
        raise InvalidInput(f"{where} must be a list of evaluations, got a {type(history).__name__}")
    for index, entry in enumerate(history):
        at = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise InvalidInput(f"{at} must be an object (step, loss, relative_objective, lr), got a "
                               f"{type(entry).__name__}")
        for key in HISTORY_FIELDS:
            if key not in entry:
                raise InvalidInput(f"{at} lacks {key!r}; training writes {' and '.join(HISTORY_FIELDS)} in every entry")
        step = entry["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidInput(f"{at} step must be a non-negative integer, got {reprlib.repr(step)}")
        if not _is_number(entry["relative_objective"]):
            raise InvalidInput(f"{at} relative_objective must be a number, got "
                               f"{reprlib.repr(entry['relative_objective'])}")
        for key in ("loss", "lr"):
            if entry.get(key) is not None and not _is_number(entry[key]):
                raise InvalidInput(f"{at} {key} must be a number or null, got {reprlib.repr(entry[key])}")


def model_tensors(model: KMeansTransformer) -> dict[str, Tensor]:
    return {f"model.{name}": tensor for name, tensor in model.state_dict().items()}


def check_file_limits(config: ModelConfig, source: str) -> None:
    """Refuse a model config read from a file whose sizes exceed ``FILE_LIMITS``."""
    for name, limit in FILE_LIMITS.items():
        value = getattr(config, name)
        if value > limit:
            raise InvalidInput(f"{source}: model_config {name}={value} exceeds the limit {limit:,} for a checkpoint "
                               "(a crafted or damaged file?)")


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every ``model.*`` tensor a ``KMeansTransformer(config)`` has, computed without allocating:
    the codes (k, e) and one layer's weights (built on the meta device) once per weight set."""
    with torch.device("meta"):
        layer = LayerWeights(config)
    sets = 1 if config.shared_weights else config.n_layers
    shapes = {"model.codes": (config.k, config.scratch_width)}
    for index in range(sets):
        for name, tensor in layer.state_dict().items():
            shapes[f"model.layers.{index}.{name}"] = tuple(tensor.shape)
    return shapes


def check_model_header(shapes: dict[str, tuple], config: ModelConfig, source: str) -> torch.dtype:
    """Check, before any tensor is loaded, that the file's ``model.*`` tensors are exactly those ``config`` needs
    (names, shapes, one float32 or float64 dtype); returns that dtype."""
    check_file_limits(config, source)
    expected = expected_shapes(config)
    present = {name: shape for name, shape in shapes.items() if name.startswith("model.")}
    missing = sorted(set(expected) - set(present))
    unexpected = sorted(set(present) - set(expected))
    wrong = sorted(name for name in set(expected) & set(present) if tuple(present[name][1]) != expected[name])
    if missing or unexpected or wrong:
        detail = "; ".join(f"{name} is {present[name][1]}, needs {expected[name]}" for name in wrong[:2])
        raise InvalidInput(
            f"{source}: weights do not match its model config (missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"wrong shape {wrong[:4]}{': ' + detail if detail else ''})"
        )
    dtypes = {dtype for dtype, _ in present.values()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in MODEL_DTYPES:
        raise InvalidInput(f"{source}: model tensors must all be float32 or all float64, "
                           f"got {sorted(map(str, dtypes))}")
    return next(iter(dtypes))


def max_weight(dtype: torch.dtype) -> float:
    """Largest weight magnitude a checkpoint may hold: finfo.max^(1/4) (about 2^32 in float32, 2^256 in float64). A
    score ||Q z - K z'||^2 is quadratic in the weights, so larger weights overflow to inf (and the patterns to NaN)
    on inputs of ordinary size."""
    return torch.finfo(dtype).max ** 0.25


def check_model_values(tensors: dict[str, Tensor], config: ModelConfig, source: str) -> None:
    """Finite weights of magnitude at most ``max_weight``, and codes equal to the embedding's codes."""
    for name, tensor in tensors.items():
        if not name.startswith("model.") or name == "model.codes":
            continue
        if not bool(torch.isfinite(tensor).all()):
            raise InvalidInput(f"{source}: weight {name} has NaN or inf entries (a damaged or crafted file)")
        largest = tensor.abs().max().item() if tensor.numel() else 0.0
        if largest > max_weight(tensor.dtype):
            raise InvalidInput(f"{source}: weight {name} has an entry of magnitude {largest:.3g} > "
                               f"{max_weight(tensor.dtype):.3g}, which overflows the attention scores")
    codes = tensors["model.codes"]  # (k, e)
    if not torch.equal(codes, centroid_codes(config.k, config.embedding, codes.dtype)):
        raise InvalidInput(f"{source}: model.codes differ from the {config.embedding} codes of k={config.k} centroids "
                           "(a damaged or crafted file)")


def model_from_tensors(tensors: dict[str, Tensor], config: ModelConfig, source: str) -> KMeansTransformer:
    """Build a model of ``config`` from the ``model.*`` tensors after checking their names, shapes, dtype and values
    (clear error on mismatch)."""
    dtype = check_model_header({name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}, config, source)
    check_model_values(tensors, config, source)
    state = {name[len("model."):]: tensor for name, tensor in tensors.items() if name.startswith("model.")}
    model = KMeansTransformer(config).to(dtype)
    model.load_state_dict(state)
    return model.eval()


def save_model(path: str | os.PathLike, model: KMeansTransformer, **metadata) -> Path:
    """Save a model's weights and config (plus any JSON-able metadata), and its ``inference`` settings when they are
    not the defaults (``load_model`` restores them)."""
    if model.inference != InferenceSettings():
        metadata = {"inference": model.inference.to_dict(), **metadata}
    return save_checkpoint(path, model_tensors(model), {"model_config": model.config.to_dict(), **metadata})


def load_torch_save_checkpoint(path: str | os.PathLike, *, d: int | None = None, k: int | None = None,
                               embedding: str | None = None) -> tuple[KMeansTransformer, dict | None]:
    """(model, its ``cli_args``) of a ``torch.save`` file read as the papers' checkpoint
    (``interp.model.paper_format.load_paper_checkpoint``), recognised by its content. A file named ``*.safetensors``
    that is refused is said to be what it is, a torch.save file, with the papers' loader's reason and what to do
    with a ``KMeansTransformer``'s own state dict (interp's checkpoints are safetensors files: ``save_model``)."""
    path = Path(path)
    try:
        return load_paper_checkpoint(path, d=d, k=k, embedding=embedding)
    except InvalidInput as error:
        if path.suffix != ".safetensors":
            raise
        reason = str(error).removeprefix(f"{path}: ")
        raise InvalidInput(f"{path} is a torch.save file, not a safetensors file, despite its name (its content "
                           "decides); read as a checkpoint of the papers' code it is refused: " + reason.rstrip(".")
                           + ". A KMeansTransformer's state dict saved with torch.save is not an interp checkpoint: "
                           "load it into KMeansTransformer(config) and write it with "
                           "interp.model.checkpoint.save_model(path, model)") from None


def resolve(name_or_path: str | os.PathLike) -> Path:
    """A shipped checkpoint name (``main-onehot``) or a path."""
    candidate = PRETRAINED_DIR / f"{name_or_path}.safetensors"
    if isinstance(name_or_path, str) and "/" not in name_or_path and candidate.is_file():
        return candidate
    path = Path(name_or_path)
    if not path.is_file():
        shipped = sorted(p.stem for p in PRETRAINED_DIR.glob("*.safetensors"))
        raise FileNotFoundError(f"no checkpoint {name_or_path!r}: not a file, nor a shipped name "
                                f"({', '.join(shipped)})")
    return path


def config_from_metadata(metadata: dict, source: str) -> ModelConfig:
    """The ``model_config`` of a checkpoint's metadata, as a checked ``ModelConfig``."""
    if "model_config" not in metadata:
        raise InvalidInput(f"{source} has no model_config in its metadata")
    data = metadata["model_config"]
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: invalid model_config: expected a JSON object, got {type(data).__name__}")
    try:
        return ModelConfig.from_dict(data)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{source}: invalid model_config: {error}") from None


def config_disagreements(saved: dict, implied: ModelConfig) -> list[str]:
    """The fields (``attn_xc.gamma`` for nested ones) a saved ``model_config`` gives with another value than
    ``implied``; fields it leaves out (files written before a field existed) are not compared."""
    wanted = json.loads(json.dumps(implied.to_dict()))
    differ = []
    for key, value in saved.items():
        if isinstance(value, dict) and isinstance(wanted.get(key), dict):
            differ += [f"{key}.{sub}" for sub in value if value[sub] != wanted[key].get(sub, object())]
        elif value != wanted.get(key, object()):
            differ.append(key)
    return differ


def _check_against_train_config(metadata: dict, source: str) -> None:
    """A checkpoint written by training: its model_config must be the one its train_config implies
    (``trained_model_config``: the model fields of the training config)."""
    data = metadata["train_config"]
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: invalid train_config: expected a JSON object, got {type(data).__name__}")
    try:
        implied = trained_model_config(data)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{source}: invalid train_config: {error}") from None
    differ = config_disagreements(metadata["model_config"], implied)
    if differ:
        raise InvalidInput(f"{source}: model_config disagrees with the train_config it was trained under "
                           f"({', '.join(differ[:4])}): edited after training?")


def load_model(name_or_path: str | os.PathLike, *, d: int | None = None, k: int | None = None,
               embedding: str | None = None, device: str | torch.device = "cpu") -> KMeansTransformer:
    """Load a shipped (``best``, ``main-onehot``, ``main-binary``, ``main-none``, ``main-equivariant``) or saved
    model, in eval mode, with the inference settings its checkpoint recommends (metadata ``inference``: steps and
    slot order a call without them runs; ``best`` runs 20 steps in shuffled slot orders, docs/learned_model.md).

    The model config, the tensors' names, shapes and dtype and the training history are checked from the header
    before anything is loaded or built, then the values (``check_model_values``). A ``torch.save`` file of the
    papers' own model (docs/learned_model.md, "Loading the papers' checkpoints") is read with ``weights_only=True``;
    ``d``, ``k`` and ``embedding`` are for such files when their ``cli_args`` are missing. Every file is read and
    checked on the CPU (``map_location="cpu"`` for a ``torch.save`` file); the model is then moved to ``device``
    (``check_device``: "cpu", "cuda", "cuda:1", "mps" or a ``torch.device``).

    The format is recognised by the file's content, never by its name: a ``torch.save`` file (a zip archive or the
    legacy pickle format, ``is_torch_save_file``) is read as the papers' checkpoint whatever it is called, so one
    renamed ``*.safetensors`` loads as what it is; anything else is read as a safetensors file (whatever its
    extension), and an interp checkpoint named ``*.pt`` loads too. A ``torch.save`` file named ``*.safetensors``
    that is not in the papers' layout is refused saying that it is a torch.save file, not a safetensors one
    (``load_torch_save_checkpoint``)."""
    device = check_device(device, "device")
    path = resolve(name_or_path)
    if is_torch_save_file(path):
        return load_torch_save_checkpoint(path, d=d, k=k, embedding=embedding)[0].to(device)
    if (d, k, embedding) != (None, None, None):
        raise InvalidInput(f"{path}: d, k and embedding are only for torch.save files in the papers' layout")
    metadata, shapes = read_header(path)
    config = config_from_metadata(metadata, str(path))
    check_model_header(shapes, config, str(path))
    if "train_config" in metadata:
        _check_against_train_config(metadata, str(path))
    if "history" in metadata:
        check_history(metadata["history"], str(path))
    inference = InferenceSettings.from_dict(metadata["inference"], str(path)) if "inference" in metadata else None
    tensors, _ = load_checkpoint(path)
    model = model_from_tensors(tensors, config, str(path))
    if inference is not None:
        model.inference = inference
    model.served_k = _served_k(metadata, config, str(path))
    return model.to(device)


def _served_k(metadata: dict, config: ModelConfig, source: str) -> tuple[int, int]:
    """The numbers of clusters a checkpoint was trained for: (train_config's k_least, k), or (k, k)."""
    least = metadata["train_config"].get("k_least") if "train_config" in metadata else None
    if least is None:
        return config.k, config.k
    if isinstance(least, bool) or not isinstance(least, int) or not 1 <= least <= config.k:
        raise InvalidInput(f"{source}: train_config k_least must be an integer from 1 to k={config.k}, got "
                           f"{str(least)[:40]}")
    return least, config.k

