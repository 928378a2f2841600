"""The package version, in one place: ``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``) and
``interp.__version__`` is it. Changes are listed in CHANGELOG.md."""

__version__ = "0.3.0"
