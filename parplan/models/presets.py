"""Model presets shipped with parplan, and the one entry point that resolves a name or a path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from parplan._input import exists, read_text
from parplan._resources import data_dir
from parplan.errors import ConfigError, UnknownPresetError
from parplan.models.hf import load_hf_config
from parplan.models.spec import ModelSpec
from parplan.models.yaml_format import load_model_yaml


def preset_names() -> list[str]:
    """Names of the shipped model presets (the file names under parplan/data/models)."""
    return sorted(p.stem for p in data_dir("models").glob("*.json"))


@lru_cache(maxsize=64)
def _load_preset(name: str) -> ModelSpec:
    return load_hf_config(data_dir("models") / f"{name}.json", name=name)


def load_model_file(path: str | Path) -> ModelSpec:
    """A Hugging Face config.json (.json) or a parplan model file (.yaml/.yml)."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        return load_model_yaml(path)
    if path.suffix.lower() == ".json":
        return load_hf_config(path)
    read_text(path)  # a directory, a device or a binary file is reported as such
    raise ConfigError("expected a .json (Hugging Face config) or .yaml/.yml (parplan model) file",
                      file=str(path))


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """Resolve a preset name (case-insensitive), a config.json or a parplan YAML file."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path)
    names = preset_names()
    if text.lower() in names:
        return _load_preset(text.lower())
    path = Path(text).expanduser()
    if exists(path):
        return load_model_file(path)
    if path.suffix in (".json", ".yaml", ".yml") or "/" in text:
        raise ConfigError("no such file", file=text)
    raise UnknownPresetError("model", text, names)
