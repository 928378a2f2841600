"""Reading a ``torch.save`` file without trusting it: its format from the first bytes, a zip archive's central
directory checked before anything is decompressed or unpickled, then ``torch.load(weights_only=True)`` (tensors and
plain containers, never code). The papers' checkpoints (``interp.model.paper_format``) are read through it.

A zip archive torch.save would not write is refused from its directory alone: more than ``MAX_ZIP_ENTRIES`` entries,
names outside torch's layout, compressed records (a zip bomb), sizes the file cannot hold or above the limits.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections import Counter
from pathlib import Path

import torch

from interp._checks import InvalidInput

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default format is a zip archive
# torch.save's legacy format opens with a pickled magic number: PROTO 2, LONG1 of 10 bytes, 0x1950a86a20f9469cfc6c
LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_HEAD = len(LEGACY_MAGIC)  # 14 bytes decide the format

# torch.save's zip layout: one top-level folder (named after the file, or "archive") holding the pickle, one record
# per tensor storage and a few small records; it stores every record uncompressed (ZIP_STORED), so a record's bytes
# are in the file and all records together are at most the file's size
ZIP_PICKLE = "data.pkl"
ZIP_RECORDS = ("version", ".data/version", "byteorder", ".data/serialization_id", ".format_version",
               ".storage_alignment")
ZIP_STORAGE = re.compile(r"data/\d+")
# Limits on what a papers' file may hold, generous multiples of a papers' training checkpoint (weights, Adam moments
# and steps, scheduler, cli_args): 102 entries, a 9 kB data.pkl and small records of at most 40 bytes.
MAX_ZIP_ENTRIES = 10_000  # 100 times 102; every entry costs a directory entry read by Python and by torch
MAX_PICKLE_BYTES = 1_000_000  # 100 times 9 kB; unpickled, it builds Python objects of up to some 80 times its size
MAX_RECORD_BYTES = 1_000  # 25 times the longest small record (the 40-byte serialization id); torch reads it whole
ZIP_METHODS = {zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}


def is_torch_save_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts like a ``torch.save`` file: a zip archive (its default format) or the legacy pickle
    format's magic number. Only the first bytes are read and nothing is unpickled; a safetensors file (8-byte header
    length, then ``{``) is never taken for one. False for a file that cannot be read."""
    try:
        with open(path, "rb") as file:
            head = file.read(_HEAD)
    except OSError:
        return False
    if head.startswith(ZIP_MAGIC) and head[8:9] != b"{":
        return True
    return head == LEGACY_MAGIC


def _is_zip(path: Path) -> bool:
    """Whether ``path`` starts like a zip archive (torch.save's default format; else the legacy one)."""
    with open(path, "rb") as file:
        return file.read(len(ZIP_MAGIC)) == ZIP_MAGIC


def check_zip_archive(path: str | os.PathLike) -> None:
    """Refuse, from the zip's central directory alone (nothing is decompressed or unpickled), an archive torch.save
    would not write or whose records could cost more than its file: more than ``MAX_ZIP_ENTRIES`` entries, names
    outside torch's layout, compressed records (a zip bomb), sizes the file cannot hold or above the limits."""
    path = Path(path)
    source = str(path)
    entries = _zip_entries(path)
    if len(entries) > MAX_ZIP_ENTRIES:
        raise InvalidInput(f"{source}: refused: its zip archive has {len(entries):,} entries; a papers' checkpoint "
                           f"has about a hundred (limit {MAX_ZIP_ENTRIES:,}); nothing was unpickled")
    folder = _zip_folder(entries, source)
    size = path.stat().st_size
    for entry in entries:
        _check_zip_entry(entry, folder, size, source)
    total = sum(entry.compress_size for entry in entries)
    if total > size:
        raise InvalidInput(f"{source}: refused: its zip entries declare {total:,} bytes in all, more than the file "
                           f"of {size:,} bytes holds (records that overlap: a crafted archive)")


def _zip_entries(path: Path) -> list[zipfile.ZipInfo]:
    """The entries of the zip archive's central directory (read by ``zipfile``; no record is opened)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as error:  # what zipfile raises
        raise InvalidInput(f"{path}: not a readable torch.save file (truncated or damaged?): its zip directory "
                           f"cannot be read: {error}") from None


def _zip_folder(entries: list[zipfile.ZipInfo], source: str) -> str:
    """The one top-level folder of torch.save's layout, after checking that it holds ``data.pkl`` once."""
    if not entries:
        raise InvalidInput(f"{source}: not a readable torch.save file: its zip archive is empty")
    folders = sorted({entry.filename.split("/", 1)[0] for entry in entries})
    if len(folders) != 1:
        listed = ", ".join(repr(folder) for folder in folders[:4])
        raise InvalidInput(f"{source}: not a readable torch.save file: its zip archive has entries in {len(folders)} "
                           f"top-level folders ({listed}); torch.save writes one")
    counts = Counter(entry.filename for entry in entries)
    twice = [name for name, count in counts.items() if count > 1]
    if twice:
        raise InvalidInput(f"{source}: refused: its zip archive holds {twice[0]!r} more than once (a crafted archive)")
    pickle_name = f"{folders[0]}/{ZIP_PICKLE}"
    if pickle_name not in counts:
        raise InvalidInput(f"{source}: not a readable torch.save file: its zip archive has no {pickle_name!r}")
    return folders[0]


def _check_zip_entry(entry: zipfile.ZipInfo, folder: str, size: int, source: str) -> None:
    """One entry: a name of torch.save's layout, stored uncompressed, inside the file, within its limit."""
    name = entry.filename
    inner = name[len(folder) + 1:] if name.startswith(f"{folder}/") else None
    if inner is None or not (inner == ZIP_PICKLE or inner in ZIP_RECORDS or ZIP_STORAGE.fullmatch(inner)):
        raise InvalidInput(f"{source}: not a readable torch.save file: zip entry {name!r} is not one torch.save "
                           f"writes (one folder holding {ZIP_PICKLE}, data/<n> and {', '.join(ZIP_RECORDS)})")
    if entry.compress_type != zipfile.ZIP_STORED:
        method = ZIP_METHODS.get(entry.compress_type, f"method {entry.compress_type}")
        raise InvalidInput(f"{source}: refused: zip entry {name!r} is compressed ({method}, {entry.file_size:,} bytes "
                           f"from {entry.compress_size:,}); torch.save stores its records uncompressed, so this is "
                           "not its file (a zip bomb?); nothing was decompressed or unpickled")
    if entry.file_size != entry.compress_size:
        raise InvalidInput(f"{source}: refused: zip entry {name!r} is stored ({entry.compress_size:,} bytes) but "
                           f"declares {entry.file_size:,} bytes uncompressed (a damaged or crafted archive)")
    if entry.header_offset + entry.compress_size > size:
        raise InvalidInput(f"{source}: refused: zip entry {name!r} declares {entry.file_size:,} bytes, more than the "
                           f"file of {size:,} bytes holds (a damaged or crafted archive)")
    limit = MAX_PICKLE_BYTES if inner == ZIP_PICKLE else None if ZIP_STORAGE.fullmatch(inner) else MAX_RECORD_BYTES
    if limit is not None and entry.file_size > limit:
        usual = "a few kB" if inner == ZIP_PICKLE else "a few bytes"
        raise InvalidInput(f"{source}: refused: zip entry {name!r} holds {entry.file_size:,} bytes; torch.save writes "
                           f"{usual} there for a papers' checkpoint (limit {limit:,})")


def load_weights_only(path: str | os.PathLike) -> object:
    """The object a ``torch.save`` file holds, read with ``torch.load(map_location="cpu", weights_only=True)``
    (tensors and plain containers, never code) after a zip archive's directory passed ``check_zip_archive``. The file
    is read by its content whatever its name: torch.load is given the open file, not the path (given a path whose
    name ends in ``.safetensors``, torch 2.13 reads it as a safetensors file and fails on a torch.save one)."""
    path = Path(path)
    if _is_zip(path):
        check_zip_archive(path)
    source = str(path)
    try:
        with open(path, "rb") as file:  # an open file: torch.load reads a *path* ending in .safetensors as safetensors
            return torch.load(file, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL (\S+)", str(error))
        if found is None:
            raise InvalidInput(f"{source}: not a readable torch.save file (truncated or damaged?): the weights-only "
                               "unpickler stopped on it") from None
        raise InvalidInput(
            f"{source}: refused: it asks to unpickle {found.group(1)}, which is neither a tensor nor a plain container "
            "(code, or a damaged file); it is read with torch.load(weights_only=True) and nothing in it was run. If "
            "you trust it, re-save only its weights and settings: torch.save({'model_state_dict': "
            "ckpt['model_state_dict'], 'cli_args': dict(ckpt['cli_args'])}, path)") from None
    except Exception as error:  # any other failure to parse the file (the reader's RuntimeError, EOFError, ...)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InvalidInput(f"{source}: not a readable torch.save file (truncated or damaged?): {first_line}") from None
