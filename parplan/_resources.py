"""Access to the data files shipped inside the package (presets, published runs)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir(*parts: str) -> Path:
    """Path of a folder under parplan/data (the package is installed as plain files)."""
    path = resources.files("parplan").joinpath("data")
    for part in parts:
        path = path.joinpath(part)
    return Path(str(path))
