"""The package a lab adopts: a version from one place, a licence, a changelog that names the version."""

import importlib.metadata
import re
from pathlib import Path

import interp

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_installed_one_and_the_changelog_names_it():
    assert re.fullmatch(r"\d+\.\d+\.\d+", interp.__version__)
    assert importlib.metadata.version("interp") == interp.__version__  # pyproject reads interp._version
    assert f"## {interp.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_the_licence_is_mit_as_the_papers_code():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert importlib.metadata.metadata("interp")["License-Expression"] == "MIT"
