"""Write tests/data/frameworks/*.txt: the option names, types, choices and defaults each framework version
parplan exports for accepts, read off the framework's own code.

Not part of the test suite: run it by hand with a Python that has the frameworks' dependencies (see the
README's developer section, "Checking the exports against the frameworks"), after extracting their sources:

    python tests/frameworks/extract_options.py --src $PARPLAN_FRAMEWORKS_SRC

Each target is read in its own subprocess (Megatron-LM and Megatron-DeepSpeed both call their package
`megatron`). Nothing here is imported by parplan or by the default test run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "frameworks"

# target name -> (kind, tree under --src, file the options are defined in)
TARGETS = {
    "megatron-core_v0.16.1": ("megatron", "mlm/core_v0.16.1", "megatron/training/arguments.py"),
    "megatron-core_v0.19.0": ("megatron", "mlm/core_v0.19.0", "megatron/training/arguments.py"),
    "megatron-HEAD": ("megatron", "mlm/HEAD", "megatron/training/arguments.py"),
    "megatron-deepspeed-HEAD": ("mds", "mds/HEAD", "megatron/arguments.py (+ deepspeed.add_config_arguments)"),
    "deepspeed-0.19.8": ("deepspeed", "", "deepspeed/runtime/constants.py, deepspeed/runtime/zero/config.py"),
    "torchtitan-0.2.2": ("titan", "torchtitan/0.2.2", "torchtitan/config/job_config.py"),
    "torchtitan-0.3.0": ("titan", "torchtitan/0.3.0", "torchtitan/config/configs.py, torchtitan/trainer.py"),
    "torchtitan-HEAD": ("titan", "torchtitan/HEAD", "torchtitan/config/configs.py, torchtitan/trainer.py"),
}


def _type_name(t: object) -> str:
    if t is None:
        return "str"
    if t in (int, float, str):
        return t.__name__  # type: ignore[union-attr]
    return getattr(t, "__name__", repr(t))


def argparse_rows(parser: argparse.ArgumentParser) -> list[str]:
    """One row per option string: flag, dest, action, type, nargs, choices, default (tab-separated)."""
    rows = []
    for action in parser._actions:
        kind = type(action).__name__.removeprefix("_").removesuffix("Action").lower() or "store"
        if kind == "help":
            continue
        # enum choices (Megatron's AttnBackend) by the name the command line takes
        choices = "|".join(getattr(c, "name", str(c)) for c in action.choices) if action.choices else "-"
        nargs = "-" if action.nargs is None else str(action.nargs)
        default = json.dumps(action.default, default=str)
        for flag in action.option_strings:
            rows.append("\t".join([flag, action.dest, kind, _type_name(action.type) if kind == "store" else "-",
                                   nargs, choices, default]))
    return sorted(rows)


def megatron_rows(root: str) -> list[str]:
    sys.path.insert(0, root)
    from megatron.training.arguments import add_megatron_arguments

    return argparse_rows(add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False)))


def mds_rows(root: str) -> list[str]:
    sys.path.insert(0, root)
    import argparse as ap

    from megatron import arguments

    parsers: list[ap.ArgumentParser] = []
    original = ap.ArgumentParser.parse_args

    def spy(self, args=None, namespace=None):
        parsers.append(self)
        raise SystemExit(0)

    ap.ArgumentParser.parse_args = spy  # type: ignore[method-assign]
    sys.argv = ["pretrain_gpt.py"]
    try:
        arguments.parse_args(ignore_unknown_args=False)
    except SystemExit:
        pass
    finally:
        ap.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    return argparse_rows(parsers[-1])


def deepspeed_rows(_: str) -> list[str]:
    """ds_config.json keys: the top-level names runtime/config.py reads (runtime/constants.py) and the
    ZeRO and bf16 sections' pydantic fields (extra keys are refused there)."""
    from deepspeed.runtime import constants
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config
    from deepspeed.runtime.zero import config as zero_constants
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    rows = [f"{v}\ttop-level\t-" for module in (constants, zero_constants) for k, v in vars(module).items()
            if k.isupper() and isinstance(v, str) and not k.endswith("_DEFAULT") and v
            and v.replace("_", "").isalnum() and v == v.lower()]
    for section, model in (("zero_optimization", DeepSpeedZeroConfig), ("bf16", DeepSpeedBF16Config)):
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            for key in {name, field.alias or name}:
                rows.append(f"{section}.{key}\t{field.annotation}\t{json.dumps(field.default, default=str)}")
    return sorted(set(rows))


def titan_rows(root: str) -> list[str]:
    """Dotted keys of every plain config section, their type (Literal choices included) and default; and the
    config-registry entries of each model (HEAD-style trees) or the train-spec flavors (0.2.2)."""
    sys.path.insert(0, root)
    import dataclasses
    import importlib
    import pkgutil
    import typing

    import torchtitan.models as models

    rows: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            t = hints[f.name]
            if dataclasses.is_dataclass(t) and not hasattr(t, "build"):
                walk(t, f"{prefix}{f.name}.")
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            if dataclasses.is_dataclass(default) or "torchtitan." in str(t):
                continue  # a configurable component (model, optimizer, AC, ...): set in the registry
            name = str(t).replace("typing.", "").replace("<class '", "").replace("'>", "")
            rows.append(f"{prefix}{f.name}\t{name}\t{json.dumps(default, default=str)}")

    try:
        from torchtitan.trainer import Trainer

        walk(Trainer.Config, "")
        for info in pkgutil.iter_modules(models.__path__):
            try:
                reg = importlib.import_module(f"torchtitan.models.{info.name}.config_registry")
            except ImportError:
                continue
            for name in sorted(vars(reg)):
                fn = getattr(reg, name)
                if callable(fn) and getattr(fn, "__module__", "") == reg.__name__ and not name.startswith("_"):
                    ret = typing.get_type_hints(fn).get("return")
                    if ret is not None and "Config" in getattr(ret, "__qualname__", ""):
                        rows.append(f"registry:{info.name}\t{name}\t-")
    except ImportError:
        from torchtitan.config.job_config import JobConfig
        from torchtitan.protocols.train_spec import get_train_spec

        walk(JobConfig, "")
        for info in pkgutil.iter_modules(models.__path__):
            try:
                importlib.import_module(f"torchtitan.models.{info.name}")
                spec = get_train_spec(info.name)
            except (ImportError, ValueError):
                continue
            rows += [f"flavor:{info.name}\t{flavor}\t-" for flavor in sorted(spec.model_args)]
        from torchtitan.protocols.model_converter import _registry_model_converter_cls

        rows += [f"converter\t{name}\t-" for name in sorted(_registry_model_converter_cls)]
    return sorted(rows)


READERS = {"megatron": megatron_rows, "mds": mds_rows, "deepspeed": deepspeed_rows, "titan": titan_rows}
COLUMNS = {"megatron": "flag, dest, action, type, nargs, choices, default (JSON)",
           "mds": "flag, dest, action, type, nargs, choices, default (JSON)",
           "deepspeed": "key, type, default (JSON)",
           "titan": "dotted key, type, default (JSON); registry:<module> / flavor:<model> / converter rows name "
                    "what the tree registers"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="the extracted framework trees (EXPORT_CHECK_SRC layout)")
    ap.add_argument("--only", default="", help="comma-separated target names (default: all)")
    ap.add_argument("--worker", nargs=2, metavar=("TARGET", "OUT"), help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.worker:
        name, out = ns.worker
        kind, tree, _ = TARGETS[name]
        import contextlib
        import os

        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            rows = READERS[kind](str(Path(ns.src) / tree))
        Path(out).write_text("\n".join(rows) + "\n")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (kind, tree, where) in TARGETS.items():
        if ns.only and name not in ns.only.split(","):
            continue
        tmp = OUT / f".{name}.rows"
        subprocess.run([sys.executable, __file__, "--src", ns.src, "--worker", name, str(tmp)], check=True)
        if kind == "deepspeed":
            import deepspeed

            origin = f"deepspeed {deepspeed.__version__} (PyPI wheel)"
        elif (Path(ns.src) / tree / "SOURCE").exists():  # a git tree: "<repo> <ref> <commit>"
            repo, ref, sha = (Path(ns.src) / tree / "SOURCE").read_text().split()
            origin = f"{Path(repo).parent.name.replace('+', '/')} {ref}, commit {sha}"
        else:  # a release wheel
            origin = f"{name.replace('-', ' ')} (PyPI wheel)"
        header = [f"# {name}: options read off the framework's code by tests/frameworks/extract_options.py",
                  f"# source: {origin}; defined in {where}",
                  f"# columns (tab-separated): {COLUMNS[kind]}"]
        (OUT / f"{name}.txt").write_text("\n".join(header) + "\n" + tmp.read_text())
        tmp.unlink()
        print(f"{OUT / name}.txt")


if __name__ == "__main__":
    main()
