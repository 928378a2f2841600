"""Checkpoints: one safetensors file = tensors + JSON metadata; never pickle (DESIGN "Layout").

Writes are atomic (a temporary file in the same folder, fsync, then rename), so an interrupted write never
replaces a good checkpoint. Every file carries a sha256 digest of its tensors and metadata; loading checks the
format tag, the digest and the configuration, and turns a truncated, tampered or foreign file into a clear
``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from safetensors import safe_open
from torch import Tensor

from interp._checks import InvalidInput
from interp.model import KMeansTransformer, ModelConfig

FORMAT = "interp-checkpoint-v1"
DIGEST = "sha256"  # header key: digest of every tensor (name, dtype, shape, bytes) and every other header entry

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


def save_checkpoint(path: str | os.PathLike, tensors: dict[str, Tensor], metadata: dict) -> Path:
    """Atomically write ``tensors`` and JSON-able ``metadata`` (each top-level value JSON-encoded) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, **{key: json.dumps(value) for key, value in metadata.items()}}
    contiguous = {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}
    header[DIGEST] = _digest(contiguous, header)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        save_file(contiguous, tmp, metadata=header)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict]:
    """(tensors, metadata) of an interp checkpoint; clear errors for missing, truncated or foreign files."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise InvalidInput(f"{path} is not a readable safetensors checkpoint (truncated or corrupt?): {error}") from None
    if header.get("format") != FORMAT:
        raise InvalidInput(f"{path} is not an interp checkpoint (format tag {header.get('format')!r}, expected {FORMAT!r})")
    try:
        metadata = {key: json.loads(value) for key, value in header.items() if key not in ("format", DIGEST)}
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{path} has corrupt metadata: {error}") from None
    if DIGEST not in header:
        raise InvalidInput(f"{path} has no {DIGEST} integrity digest: not written by interp, or tampered")
    if header[DIGEST] != _digest(tensors, header):
        raise InvalidInput(f"{path} was modified after it was written ({DIGEST} digest mismatch): tampered or corrupt")
    return tensors, metadata


def model_tensors(model: KMeansTransformer) -> dict[str, Tensor]:
    return {f"model.{name}": tensor for name, tensor in model.state_dict().items()}


def model_from_tensors(tensors: dict[str, Tensor], config: ModelConfig, source: str) -> KMeansTransformer:
    """Build a model of ``config`` and load the ``model.*`` tensors strictly (clear error on mismatch)."""
    model = KMeansTransformer(config)
    state = {name[len("model."):]: tensor for name, tensor in tensors.items() if name.startswith("model.")}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(name for name in set(expected) & set(state) if expected[name].shape != state[name].shape)
    if missing or unexpected or wrong:
        raise InvalidInput(
            f"{source}: weights do not match its model config (missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"wrong shape {wrong[:4]})"
        )
    model = model.to(next(iter(state.values())).dtype)
    model.load_state_dict(state)
    return model.eval()


def save_model(path: str | os.PathLike, model: KMeansTransformer, **metadata) -> Path:
    """Save a model's weights and config (plus any JSON-able metadata)."""
    return save_checkpoint(path, model_tensors(model), {"model_config": model.config.to_dict(), **metadata})


def resolve(name_or_path: str | os.PathLike) -> Path:
    """A shipped checkpoint name (``main-onehot``) or a path."""
    candidate = PRETRAINED_DIR / f"{name_or_path}.safetensors"
    if isinstance(name_or_path, str) and "/" not in name_or_path and candidate.is_file():
        return candidate
    path = Path(name_or_path)
    if not path.is_file():
        shipped = sorted(p.stem for p in PRETRAINED_DIR.glob("*.safetensors"))
        raise FileNotFoundError(f"no checkpoint {name_or_path!r}: not a file, nor a shipped name ({', '.join(shipped)})")
    return path


def load_model(name_or_path: str | os.PathLike) -> KMeansTransformer:
    """Load a shipped (``main-onehot``, ``main-binary``, ``main-none``) or saved model, in eval mode."""
    path = resolve(name_or_path)
    tensors, metadata = load_checkpoint(path)
    if "model_config" not in metadata:
        raise InvalidInput(f"{path} has no model_config in its metadata")
    try:
        config = ModelConfig.from_dict(metadata["model_config"])
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{path}: invalid model_config: {error}") from None
    return model_from_tensors(tensors, config, str(path))
