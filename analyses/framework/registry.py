"""The registry of studies: every folder of ``analyses/studies/`` (but those starting with ``_``, like the
template) whose ``__init__.py`` declares ``STUDY``; a folder's ``claims.py`` adds its ``CLAIMS`` to the claims of
``analyses.claims``."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from interp._checks import InvalidInput

FOLDER = Path(__file__).resolve().parents[1] / "studies"


def names() -> list[str]:
    """The studies' names: their folders, in name order."""
    return sorted(path.name for path in FOLDER.iterdir()
                  if (path / "__init__.py").is_file() and not path.name.startswith("_"))


def get(name: str):
    """The ``STUDY`` declared in ``analyses/studies/<name>/`` (InvalidInput naming the known studies otherwise)."""
    known = names()
    if name not in known:
        raise InvalidInput(f"STUDY: no study {name!r}; known: {', '.join(known)} (python -m analyses list)")
    return importlib.import_module(f"analyses.studies.{name}").STUDY


def studies() -> dict[str, object]:
    """name -> STUDY of every study."""
    return {name: get(name) for name in names()}


def claim_modules() -> list[ModuleType]:
    """The ``claims.py`` modules of the study folders that have one."""
    return [importlib.import_module(f"analyses.studies.{name}.claims") for name in names()
            if (FOLDER / name / "claims.py").is_file()]


def reading_modules() -> list[ModuleType]:
    """The ``reading.py`` modules of the study folders that have one (each declares ``READINGS``)."""
    return [importlib.import_module(f"analyses.studies.{name}.reading") for name in names()
            if (FOLDER / name / "reading.py").is_file()]


def sections() -> dict[str, str]:
    """RESULTS.md section key -> the study that writes it (a grid study writes the section of its own name)."""
    out = {}
    for name, study in studies().items():
        for key in study.sections if hasattr(study, "sections") else (name,):
            out[key] = name
    return out
