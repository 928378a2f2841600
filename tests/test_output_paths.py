"""Output paths that are not regular files: nothing destroyed, nothing hung.

Every writer (the CLI's commands, the report, the analyses, checkpoints) checks its output paths with
``interp._checks.check_output_file`` / ``check_output_folder`` before any work, and writes through
``interp._io``. A path may name a regular file, a new name in a folder that exists, or (for text outputs) a
character device such as /dev/null, which is written straight (a rename would replace the device with a file).
FIFOs, sockets, block devices and folders where a file must be are refused by ``stat`` alone, without opening them
(opening a FIFO for writing blocks until a reader comes). A trailing slash names a folder.

Devices are made in the test's own folder with ``mknod`` (root only; the node's device is never opened); where
``mknod`` is refused, a symbolic link to /dev/null stands in for the character device.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
from contextlib import contextmanager
from pathlib import Path

import pytest

from interp._checks import InvalidInput, check_output_file, check_output_folder
from interp._io import write_text_atomically
from interp.cli import main

SECONDS = 5  # a check that takes longer than this is hung (each takes milliseconds)


@contextmanager
def within(seconds: float):
    """Raise TimeoutError in this (main) thread if the block runs longer than ``seconds``: a blocking open() is
    interrupted by the alarm's exception instead of being retried."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: the path was opened and blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


def make_character_device(path: Path, minor: int = 3) -> Path:
    """A memory device node (1, minor: 3 null, 7 full) in a folder of the test's, or a link to the system's where
    mknod is refused (never the system's own node: an old writer would have replaced it)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        path.symlink_to({3: "/dev/null", 7: "/dev/full"}[minor])
    return path


def make_block_device(path: Path) -> Path | None:
    """A block device node (the loop device 7, 0), never opened; None where mknod is refused (not root)."""
    try:
        os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except PermissionError:
        return None
    return path


def _kind(path: Path) -> str:
    mode = os.stat(path).st_mode
    return ("fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else
            "character device" if stat.S_ISCHR(mode) else "block device" if stat.S_ISBLK(mode) else
            "folder" if stat.S_ISDIR(mode) else "file")


SPECIAL = {"fifo": make_fifo, "socket": make_socket}


# ----- the checks ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_check_output_file_refuses_fifos_and_sockets_without_opening_them(tmp_path, kind):
    path = SPECIAL[kind](tmp_path / f"out.{kind}")
    with within(SECONDS), pytest.raises(InvalidInput, match=f"--out {path} is a {kind}"):
        check_output_file(path, "--out")
    assert _kind(path) == kind


def test_check_output_file_refuses_block_devices(tmp_path):
    path = make_block_device(tmp_path / "disk")
    if path is None:  # not root: a block device cannot be made; the folder case stands for a non-file here
        path = tmp_path
        with pytest.raises(InvalidInput, match="is a folder"):
            check_output_file(path, "--out")
        return
    with pytest.raises(InvalidInput, match=f"--out {path} is a block device"):
        check_output_file(path, "--out")
    assert _kind(path) == "block device"


def test_character_devices_are_accepted_for_text_and_refused_for_checkpoints(tmp_path):
    device = make_character_device(tmp_path / "null")
    assert check_output_file(device, "--out") == device
    with pytest.raises(InvalidInput, match="is a character device"):
        check_output_file(device, "--out", devices=False)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_check_output_folder_refuses_special_files_inside_it_and_as_it(tmp_path, kind):
    inside = SPECIAL[kind](tmp_path / "summary.csv")
    with within(SECONDS), pytest.raises(InvalidInput, match=f"--out {inside} is a {kind}"):
        check_output_folder(tmp_path, ("evaluation.csv", "summary.csv"), "--out")
    with within(SECONDS), pytest.raises(InvalidInput, match=f"--out {inside} is a {kind}; give a folder"):
        check_output_folder(inside, ("summary.csv",), "--out")


def test_a_trailing_slash_names_a_folder(tmp_path):
    with pytest.raises(InvalidInput, match=r"ends with '/': it names a folder; give the path of a file"):
        check_output_file(f"{tmp_path}/newdir/", "--out")
    assert not (tmp_path / "newdir").exists()
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(InvalidInput, match="is a file; give a folder"):
        check_output_folder(f"{tmp_path}/a_file/", ("summary.csv",), "--out")


# ----- the writer: defence in depth, and devices written straight ------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_the_atomic_writer_never_renames_onto_a_special_file(tmp_path, kind):
    path = SPECIAL[kind](tmp_path / "out.txt")
    with within(SECONDS), pytest.raises(InvalidInput, match=f"is a {kind}"):
        write_text_atomically(path, "page")
    assert _kind(path) == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left


def test_the_atomic_writer_writes_straight_into_a_character_device(tmp_path):
    device = make_character_device(tmp_path / "null")
    write_text_atomically(device, "page")
    assert _kind(device) == "character device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_the_atomic_writer_refuses_a_folder(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(InvalidInput, match="is a folder"):
        write_text_atomically(tmp_path / "folder", "page")
    assert (tmp_path / "folder").is_dir()


def test_a_full_device_is_a_clear_error(tmp_path):
    """Writing into a full device (1, 7) fails with ENOSPC: an OSError the command line prints as one line."""
    device = make_character_device(tmp_path / "full", minor=7)
    with pytest.raises(OSError) as error:
        write_text_atomically(device, "page")
    assert error.value.errno == errno.ENOSPC
    assert _kind(device) == "character device"


# ----- the commands -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import torch

    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("ckpt") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_report_refuses_a_special_output_before_any_work(checkpoint, tmp_path, capsys, kind):
    out = SPECIAL[kind](tmp_path / "report.html")
    with within(SECONDS):
        code = main(["report", "--checkpoint", str(checkpoint), "--out", str(out), "--tasks", "2"])
    assert code == 2
    assert _one_line(capsys) == f"interp report: error: --out {out} is a {kind}; give the path of a regular file"
    assert _kind(out) == kind


def test_report_into_a_device_writes_straight_and_leaves_the_device(checkpoint, tmp_path, capsys, monkeypatch):
    import interp.report.builder as report

    device = make_character_device(tmp_path / "null")
    monkeypatch.setattr(report.Report, "write", lambda self, out: write_text_atomically(out, "<html></html>"))
    monkeypatch.setattr(report, "evaluate", _no_work)
    with pytest.raises(AssertionError, match="computing"):  # the checks pass; the work starts
        main(["report", "--checkpoint", str(checkpoint), "--out", str(device), "--tasks", "2"])
    assert _kind(device) == "character device"


def _no_work(*args, **kwargs):
    raise AssertionError("computing")


def test_report_out_with_a_trailing_slash_writes_no_file_of_that_name(checkpoint, tmp_path, capsys):
    code = main(["report", "--checkpoint", str(checkpoint), "--out", f"{tmp_path}/newdir/", "--tasks", "2"])
    assert code == 2
    assert "ends with '/': it names a folder" in _one_line(capsys)
    assert not (tmp_path / "newdir").exists()


def test_train_refuses_a_fifo_checkpoint(tmp_path, capsys):
    out = make_fifo(tmp_path / "run.safetensors")
    with within(SECONDS):
        code = main(["train", "--out", str(out), "--steps", "1", "--no-progress"])
    assert code == 2
    assert _one_line(capsys) == f"interp train: error: --out {out} is a fifo; give the path of a regular file"
    assert _kind(out) == "fifo"


def test_train_refuses_a_device_checkpoint(tmp_path, capsys):
    out = make_character_device(tmp_path / "null")
    code = main(["train", "--out", str(out), "--steps", "1", "--no-progress"])
    assert code == 2
    assert "is a character device; give the path of a regular file" in _one_line(capsys)
    assert _kind(out) == "character device"


def test_evaluate_refuses_a_fifo_inside_its_folder(checkpoint, tmp_path, capsys):
    make_fifo(tmp_path / "summary.csv")
    with within(SECONDS):
        code = main(["evaluate", "--checkpoint", str(checkpoint), "--out", str(tmp_path), "--tasks", "2",
                     "--steps", "1", "--n", "20", "--inits", "random"])
    assert code == 2
    assert _one_line(capsys) == (f"interp evaluate: error: --out {tmp_path / 'summary.csv'} is a fifo; give the "
                                 "path of a regular file")


def test_save_checkpoint_never_replaces_a_special_file(tmp_path):
    import torch

    from interp.model.checkpoint import save_checkpoint

    path = make_fifo(tmp_path / "x.safetensors")
    with within(SECONDS), pytest.raises(InvalidInput, match="is a fifo"):
        save_checkpoint(path, {"w": torch.zeros(2)}, {})
    assert _kind(path) == "fifo"
