"""Model presets shipped with parplan, and the one entry point that resolves a name or a path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from parplan._input import exists, read_text, read_yaml
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


def _hub_dir() -> Path:
    return data_dir("models", "hub")


@lru_cache(maxsize=1)
def _hub_index() -> dict[str, tuple[str, Path]]:
    """Lower-cased Hugging Face id -> (canonical id, config file) of the shipped serving configs and their
    aliases (hub/aliases.yaml: quantised or fine-tuned checkpoints of the same architecture)."""
    index = {}
    for path in sorted(_hub_dir().glob("*.json")):
        hub_id = path.stem.replace("__", "/", 1)
        index[hub_id.lower()] = (hub_id, path)
    aliases_file = _hub_dir() / "aliases.yaml"
    aliases = read_yaml(aliases_file)
    if not isinstance(aliases, dict):
        raise ConfigError("expected a mapping of checkpoint id -> {config, why}", file=str(aliases_file))
    for alias, entry in aliases.items():
        target = entry.get("config") if isinstance(entry, dict) else None
        if not isinstance(target, str) or target.lower() not in index:
            raise ConfigError(f"names no shipped config: {target!r}", file=str(aliases_file), field=str(alias))
        index[str(alias).lower()] = (str(alias), index[target.lower()][1])
    return index


def hub_ids() -> list[str]:
    """Hugging Face ids (and checkpoint aliases) that load_model resolves to a shipped config."""
    return sorted(canonical for canonical, _ in _hub_index().values())


@lru_cache(maxsize=64)
def _load_hub(key: str) -> ModelSpec:
    hub_id, path = _hub_index()[key]
    return load_hf_config(path, name=hub_id)


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
    """Resolve a preset name (case-insensitive), a Hugging Face id of a shipped config
    (`deepseek-ai/DeepSeek-V3`, see data/models/hub), a config.json or a parplan YAML file."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path)
    names = preset_names()
    if text.lower() in names:
        return _load_preset(text.lower())
    path = Path(text).expanduser()
    if exists(path):
        return load_model_file(path)
    if text.lower() in _hub_index():
        return _load_hub(text.lower())
    if path.suffix in (".json", ".yaml", ".yml") or "/" in text:
        raise ConfigError("no such file", file=text)
    raise UnknownPresetError("model", text, names + hub_ids())
