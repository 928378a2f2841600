"""Loading a state dict in the papers' own layout (interp/model/paper_format.py).

The reference is a stand-in of the authors' learnable layer written here from the papers' math (paper 2, Def. 2.2
and Eq. 4): four attentions CAX (points -> centroids), SAX (points -> points), CAC (centroids -> updated points),
SAC (centroids -> centroids), each with nn.Linear W_q, W_k, W_v (bias on), scores -itemp ||q - k||^2 / sqrt(D)
from torch.cdist, normalised over the keys. It imports nothing from interp. Tokens as the authors' training
script builds them: one-hot scratch [x; 0_k] for points and [c; e_j] (the rows of I_k) for centroids, or x and c
with no scratch ("none"); several steps re-embed from the current centroids.
"""

import math
import os
import pickle
import zipfile

import pytest
import torch
import torch.nn.functional as F
from entmax import sparsemax
from torch import nn

from interp._checks import InvalidInput
from interp.model import KMeansTransformer
from interp.model.checkpoint import save_model
from interp.model.config import learned_model_config
from interp.model.paper_format import load_paper_state_dict
from interp.model.torch_save_file import LEGACY_MAGIC, is_torch_save_file

ACTIVATIONS = {"softmax": torch.softmax, "sparsemax": sparsemax}


class StandInAttention(nn.Module):
    """out_i = sum_j w_ij (W_v z'_j + b_v), w_i = act(-itemp ||W_q z_i + b_q - W_k z'_j - b_k||^2 / sqrt(D)) over j."""

    def __init__(self, width: int, inv_temp: float, act: str, dropout_p: float):
        super().__init__()
        self.W_q = nn.Linear(width, width)
        self.W_k = nn.Linear(width, width)
        self.W_v = nn.Linear(width, width)
        self.inv_temp, self.act, self.dropout_p = inv_temp, ACTIVATIONS[act], dropout_p

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k, v = self.W_q(queries), self.W_k(keys), self.W_v(keys)  # (b, q, D), (b, r, D), (b, r, D)
        logits = -self.inv_temp * torch.cdist(q, k).square() / math.sqrt(q.shape[-1])  # (b, q, r)
        weights = F.dropout(self.act(logits, dim=-1), p=self.dropout_p)  # (b, q, r); p = 0 here
        return weights @ v  # (b, q, D)


class StandInKModel(nn.Module):
    """X' = X + CAX(X, C) + SAX(X, X);  C' = C + CAC(C, X') + SAC(C, C)."""

    def __init__(self, width: int, inv_temp: float = 1.0, act: str = "softmax"):
        super().__init__()
        for name in ("CAX", "SAX", "CAC", "SAC"):
            setattr(self, name, StandInAttention(width, inv_temp, act, dropout_p=0.0))

    def forward(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X_new = X + self.CAX(X, C) + self.SAX(X, X)  # (b, n, D)
        C_new = C + self.CAC(C, X_new) + self.SAC(C, C)  # (b, k, D)
        return X_new, C_new


def stand_in_model(width: int, seed: int, dtype=torch.float64, **kwargs) -> StandInKModel:
    """Seeded nn.Linear initialisation, weights doubled so the patterns are far from uniform."""
    torch.manual_seed(seed)
    model = StandInKModel(width, **kwargs).to(dtype)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(2.0)
    return model.eval()


def tokens(points: torch.Tensor, centroids: torch.Tensor, scratch: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Points (b, n, d), centroids (b, k, d) -> the stand-in's input tokens."""
    if scratch == "none":
        return points.clone(), centroids.clone()
    b, n, _ = points.shape
    k = centroids.shape[1]
    X = torch.cat([points, points.new_zeros(b, n, k)], dim=2)  # (b, n, d + k)
    C = torch.cat([centroids, torch.eye(k, dtype=points.dtype).repeat(b, 1, 1)], dim=2)  # (b, k, d + k)
    return X, C


def stand_in_centroids(model: StandInKModel, points, centroids, scratch: str, steps: int) -> torch.Tensor:
    """Centroids (b, k, d) after ``steps`` layers, re-embedding before each."""
    d = points.shape[2]
    current = centroids
    with torch.no_grad():
        for _ in range(steps):
            _, C = model(*tokens(points, current, scratch))
            current = C[:, :, :d]
    return current


def tasks(b: int, n: int, d: int, k: int, seed: int, dtype=torch.float64):
    """Points uniform in [0, 1]^d (b, n, d) and their first k points as initial centroids (b, k, d)."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(b, n, d, generator=generator, dtype=dtype)
    return points, points[:, :k].clone()


def cli_args(d: int, k: int, scratch: str, **changes) -> dict:
    """The settings the authors' training script saves (their argument names; main-configuration values)."""
    args = {"nlb": 128, "nub": 512, "nclusters": k, "ndims": d, "train_dists": "normal", "scale": 0.1, "em": True,
            "es": True, "sdb": True, "scratch": scratch, "dqkv": 1, "attn_act": "softmax", "attn_itemp": 1.0,
            "dropout": 0.01, "loss_act": "softmax", "logloss": False, "loss_itemp": 10.0, "seed": 548977, "bsz": 32,
            "init_lr": 0.01, "lr_decay": 0.5, "patience": 5.0, "nsteps": 10000, "nsteps_per_eval": 50,
            "val_nbatches": 10, "odir": "runs"}
    return {**args, **changes}


def save_training_checkpoint(path, model: nn.Module, args: dict) -> str:
    """As the authors' training script: weights, optimiser and scheduler state, settings, step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=5)
    torch.save({"cli_args": args, "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict(),
                "best_val_rel_obj": 0.9, "step": 10}, path)
    return str(path)


D, K = 3, 4


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Tiny problems: one torch thread."""


# ----- identical outputs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scratch, width", [("onehot", D + K), ("none", D)])
def test_training_checkpoint_gives_the_stand_in_centroids(tmp_path, scratch, width):
    reference = stand_in_model(width, seed=1)
    path = save_training_checkpoint(tmp_path / "run_last.pt", reference, cli_args(D, K, scratch))
    model = load_paper_state_dict(path)
    assert not model.training
    assert model.config.d == D and model.config.k == K and model.config.embedding == scratch
    assert model.config.d_model == width and model.codes.dtype == torch.float64
    assert model.config.attn_cx.dropout == 0.01 and model.config.attn_cx.gamma == 1.0
    points, centroids = tasks(b=3, n=40, d=D, k=K, seed=2)
    for steps in (1, 3):
        expected = stand_in_centroids(reference, points, centroids, scratch, steps)  # (b, k, d)
        with torch.no_grad():
            got = model(points, centroids, steps=steps).centroids  # (b, k, d)
        assert (got - expected).abs().max().item() < 1e-10
        assert (expected - centroids).abs().max().item() > 1e-2  # the step moved the centroids


def test_attn_act_and_attn_itemp_map_to_normaliser_and_gamma(tmp_path):
    reference = stand_in_model(D + K, seed=3, inv_temp=2.5, act="sparsemax")
    path = save_training_checkpoint(tmp_path / "sparse.pt", reference,
                                    cli_args(D, K, "onehot", attn_act="sparsemax", attn_itemp=2.5, dropout=0.0))
    model = load_paper_state_dict(path)
    assert model.config.attn_xx.normaliser == "sparsemax" and model.config.attn_xx.gamma == 2.5
    assert model.config.attn_xx.dropout == 0.0
    points, centroids = tasks(b=2, n=30, d=D, k=K, seed=4)
    expected = stand_in_centroids(reference, points, centroids, "onehot", 2)
    with torch.no_grad():
        got = model(points, centroids, steps=2).centroids
    assert (got - expected).abs().max().item() < 1e-10


def test_bare_float32_state_dict_needs_and_takes_d_k_embedding(tmp_path):
    reference = stand_in_model(D + K, seed=5, dtype=torch.float32)
    path = tmp_path / "bare.pt"
    torch.save(reference.state_dict(), path)
    with pytest.raises(InvalidInput, match=r"pass d, k, embedding"):
        load_paper_state_dict(path)
    with pytest.raises(InvalidInput, match=r"pass embedding"):
        load_paper_state_dict(path, d=D, k=K)
    model = load_paper_state_dict(path, d=D, k=K, embedding="onehot")
    assert model.codes.dtype == torch.float32
    points, centroids = tasks(b=2, n=30, d=D, k=K, seed=6, dtype=torch.float32)
    expected = stand_in_centroids(reference, points, centroids, "onehot", 1)
    with torch.no_grad():
        got = model(points, centroids, steps=1).centroids
    assert (got - expected).abs().max().item() < 1e-5
    # the same width read as a d-only model with d + k features: a different model, refused only by the caller's d
    with pytest.raises(InvalidInput, match=r"has shape \(7, 7\), expected \(3, 3\)"):
        load_paper_state_dict(path, d=D, k=K, embedding="none")


def test_wrapped_module_prefix_and_legacy_format(tmp_path):
    reference = stand_in_model(D + K, seed=7)
    state = {f"module.{key}": value for key, value in reference.state_dict().items()}
    path = tmp_path / "wrapped.pt"
    torch.save({"model_state_dict": state, "cli_args": cli_args(D, K, "onehot")}, path,
               _use_new_zipfile_serialization=False)
    assert is_torch_save_file(path)
    model = load_paper_state_dict(path)
    points, centroids = tasks(b=2, n=30, d=D, k=K, seed=8)
    expected = stand_in_centroids(reference, points, centroids, "onehot", 1)
    with torch.no_grad():
        got = model(points, centroids).centroids
    assert (got - expected).abs().max().item() < 1e-10


# ----- refusals -------------------------------------------------------------------------------------------------
class RunsCode:
    """Unpickling this would run a shell command that creates ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("zip_format", [True, False])
def test_pickle_with_code_is_refused_and_never_run(tmp_path, zip_format):
    marker = tmp_path / "code_was_run"
    path = tmp_path / "evil.pt"
    torch.save({"model_state_dict": stand_in_model(D + K, seed=9).state_dict(), "cli_args": cli_args(D, K, "onehot"),
                "payload": RunsCode(str(marker))}, path, _use_new_zipfile_serialization=zip_format)
    assert is_torch_save_file(path)
    with pytest.raises(InvalidInput, match=r"refused: it asks to unpickle .*system.*nothing in it was run"):
        load_paper_state_dict(path)
    assert not marker.exists()


def test_plain_pickle_is_not_a_torch_file_and_never_run(tmp_path):
    marker = tmp_path / "code_was_run"
    path = tmp_path / "plain.pkl"
    with open(path, "wb") as file:
        pickle.dump({"model_state_dict": RunsCode(str(marker))}, file, protocol=2)
    assert not is_torch_save_file(path)
    with pytest.raises(InvalidInput, match=r"not a torch.save file"):
        load_paper_state_dict(path)
    assert not marker.exists()


@pytest.mark.parametrize("zip_format", [True, False])
def test_truncated_file_is_refused(tmp_path, zip_format):
    path = tmp_path / "whole.pt"
    torch.save({"model_state_dict": stand_in_model(D + K, seed=10).state_dict(), "cli_args": cli_args(D, K, "onehot")},
               path, _use_new_zipfile_serialization=zip_format)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    assert is_torch_save_file(truncated)
    with pytest.raises(InvalidInput, match=r"not a readable torch.save file \(truncated or damaged\?\)"):
        load_paper_state_dict(truncated)
    for cut in range(len(LEGACY_MAGIC), len(data), max(1, len(data) // 80)):  # any cut: a clear refusal, never a crash
        truncated.write_bytes(data[:cut])
        with pytest.raises(InvalidInput, match=r"truncated\.pt: (not a readable|refused)"):
            load_paper_state_dict(truncated)


def test_foreign_files_are_refused(tmp_path):
    safetensors = save_model(tmp_path / "ours.safetensors", KMeansTransformer(learned_model_config(D, K)))
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    archive = tmp_path / "other.pt"
    with zipfile.ZipFile(archive, "w") as file:
        file.writestr("readme.txt", "a zip archive, not a torch.save file")
    assert not is_torch_save_file(safetensors) and not is_torch_save_file(text)
    assert not is_torch_save_file(tmp_path / "missing.pt")
    for path in (safetensors, text):
        with pytest.raises(InvalidInput, match=r"not a torch.save file"):
            load_paper_state_dict(path)
    assert is_torch_save_file(archive)
    with pytest.raises(InvalidInput, match=r"not a readable torch.save file"):
        load_paper_state_dict(archive)
    with pytest.raises(InvalidInput, match=r"no such file"):
        load_paper_state_dict(tmp_path / "missing.pt")


def edited(tmp_path, edit, args: dict | None = None, name: str = "edited.pt") -> str:
    """A training checkpoint whose state dict ``edit`` changed in place."""
    state = dict(stand_in_model(D + K, seed=11).state_dict())
    edit(state)
    path = tmp_path / name
    torch.save({"model_state_dict": state, "cli_args": cli_args(D, K, "onehot") if args is None else args}, path)
    return str(path)


def test_wrong_shaped_missing_unexpected_and_non_finite_tensors_are_named(tmp_path):
    def widen(state):
        state["SAC.W_k.weight"] = torch.zeros(D + K + 1, D + K, dtype=torch.float64)

    widened = r"SAC.W_k.weight has shape \(8, 7\), expected \(7, 7\) .*D = d \+ e = 3 \+ 4"
    with pytest.raises(InvalidInput, match=widened):
        load_paper_state_dict(edited(tmp_path, widen))
    with pytest.raises(InvalidInput, match=r"CAC.W_v.bias has shape \(7, 1\), expected \(7,\)"):
        load_paper_state_dict(edited(tmp_path, lambda s: s.update({"CAC.W_v.bias": s["CAC.W_v.bias"][:, None]})))
    with pytest.raises(InvalidInput, match=r"lacks SAX.W_q.bias"):
        load_paper_state_dict(edited(tmp_path, lambda s: s.pop("SAX.W_q.bias")))
    with pytest.raises(InvalidInput, match=r"does not map \(ffn.weight\)"):
        load_paper_state_dict(edited(tmp_path, lambda s: s.update({"ffn.weight": torch.zeros(2)})))
    with pytest.raises(InvalidInput, match=r"CAX.W_q.weight has NaN or inf"):
        load_paper_state_dict(edited(tmp_path, lambda s: s["CAX.W_q.weight"].__setitem__((0, 0), math.inf)))
    with pytest.raises(InvalidInput, match=r"no 'CAX.W_q.weight'"):
        load_paper_state_dict(edited(tmp_path, lambda s: s.update({"other.CAX_W_q": s.pop("CAX.W_q.weight")})))
    # cli_args for another model: the shapes no longer fit and the message says where D came from
    with pytest.raises(InvalidInput, match=r"expected \(3, 3\) \(from its cli_args: D = d \+ e = 3 \+ 0"):
        load_paper_state_dict(edited(tmp_path, lambda s: None, cli_args(D, K, "none")))


def test_settings_this_loader_does_not_map_are_refused(tmp_path):
    unchanged = lambda state: None  # noqa: E731
    cases = [
        (cli_args(D, K, "onehot", dqkv=2), r"dqkv=2: only dqkv = 1"),
        (cli_args(D, K, "binary"), r"scratch='binary' is not one this loader maps \(onehot, none\)"),
        (cli_args(D, K, "onehot", attn_act="relu"), r"attn_act='relu' is not one this loader maps"),
        (cli_args(D, K, "onehot", attn_itemp=-1.0), r"invalid model: gamma must be a positive number"),
        (cli_args(D, K, "onehot", dropout=1.5), r"invalid model: dropout must be in \[0, 1\)"),
        (cli_args(D, True, "onehot"), r"nclusters=True is not an int"),
        ({"nclusters": K, "scratch": "onehot"}, r"cli_args has no 'ndims'"),
    ]
    for index, (args, message) in enumerate(cases):
        with pytest.raises(InvalidInput, match=message):
            load_paper_state_dict(edited(tmp_path, unchanged, args, name=f"case{index}.pt"))
    path = edited(tmp_path, unchanged)
    with pytest.raises(InvalidInput, match=r"d=5 disagrees with the file's cli_args ndims=3"):
        load_paper_state_dict(path, d=5)
    with pytest.raises(InvalidInput, match=r"embedding='none' disagrees with the file's cli_args scratch='onehot'"):
        load_paper_state_dict(path, embedding="none")
    assert load_paper_state_dict(path, d=D, k=K, embedding="onehot").config.d == D  # agreeing arguments are fine
    with pytest.raises(InvalidInput, match=r"embedding must be one of"):
        load_paper_state_dict(path, embedding="unary")


def test_containers_other_than_a_state_dict_are_refused(tmp_path):
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], listed)
    with pytest.raises(InvalidInput, match=r"holds a list, not a dict"):
        load_paper_state_dict(listed)
    wrong_entry = tmp_path / "entry.pt"
    torch.save({"model_state_dict": [torch.zeros(2)], "cli_args": cli_args(D, K, "onehot")}, wrong_entry)
    with pytest.raises(InvalidInput, match=r"'model_state_dict' is a list, not a state dict"):
        load_paper_state_dict(wrong_entry)
    other_dict = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2), "step": 3}, other_dict)
    with pytest.raises(InvalidInput, match=r"no 'model_state_dict' entry and not a bare state dict"):
        load_paper_state_dict(other_dict)
