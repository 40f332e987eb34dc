"""The framework-side checks of parplan's opt-in `pytest -m frameworks` run (tests/test_frameworks.py).

Adapted from the export_check harness (check_exports.py, written for parplan's issue #17 and kept with the
project's development tools outside the repository): its worker half, unchanged in what it runs and checks,
without its driver, with one change: a torchtitan registry release (0.3.0, HEAD) reads the overrides file
parplan writes for it (overrides_v<version>.txt) where one exists. It runs with a Python that has the
frameworks' dependencies (README, "Checking the exports against the frameworks") and imports no parplan code:

    python harness.py worker <megatron|deepspeed|titan_toml|titan_head> <framework tree> <case.json> <label>

Each framework's own code runs in one CPU process (torch's fake process group stands in for any world size):

  Megatron-LM   megatron.training.arguments.parse_args(ignore_unknown_args=False) + validate_args, then
                gpt_config_from_args / core_transformer_config_from_args (TransformerConfig.__post_init__), the
                num-microbatches calculator, parallel_state.initialize_model_parallel and the decoder layers
                each (pp rank, virtual stage) builds.
  DeepSpeed     DeepSpeedConfig(ds_config.json, mpu=<Megatron-DeepSpeed mpu>), DeepSpeed MoE expert groups,
                Megatron-DeepSpeed's parse_args + validate_args.
  torchtitan    0.2.2: ConfigManager().parse_args(["--job.config_file", train.toml]) and the same keys as tyro
                flags, ParallelDims + build_mesh, the model flavor, module FQNs against a meta-device model, the
                pipeline schedule. 0.3.0 / HEAD: ConfigManager().parse_args(["--module", M, "--config", ENTRY,
                *overrides]), ParallelDims + mesh, the Trainer's batch checks.

What cannot run without a GPU is stubbed explicitly and listed in each result ("stubs"); checks that repeat a
runtime assertion of an object that cannot be built here say so ("mirror").
"""

# ruff: noqa: E731, RUF059

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

MARK = "@@RESULT@@"

# GPU compute capability of each parplan cluster preset (stub for the CPU-only machine).
ARCH = {"a100-40gb": (8, 0), "a100-80gb": (8, 0), "h100": (9, 0), "h200": (9, 0), "h800": (9, 0),
        "b200": (10, 0), "gb200-nvl72": (10, 0), "mi300x": (9, 4)}
TE_VERSION_STUB = os.environ.get("EXPORT_CHECK_TE_VERSION", "2.12.0")


# ----------------------------------------------------------------------------------------------------------
# shared helpers (driver and workers)
# ----------------------------------------------------------------------------------------------------------

def bash_array(path: Path, name: str) -> list[str]:
    """Source a bash file in a clean shell and return the array's elements (NUL-separated: no re-splitting)."""
    out = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f'set -e; source "$1"; printf "%s\\0" "${{{name}[@]}}"', "_",
         str(path)], capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return [t.decode() for t in out.stdout.split(b"\0")[:-1]]


def split_flags(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """[--a, 1, --b, --c, x, y] -> [(--a,[1]), (--b,[]), (--c,[x,y])]."""
    groups: list[tuple[str, list[str]]] = []
    for tok in tokens:
        if tok.startswith("--"):
            groups.append((tok, []))
        elif groups:
            groups[-1][1].append(tok)
        else:
            groups.append(("<positional>", [tok]))
    return groups


class Result:
    def __init__(self, target: str, kind: str):
        self.d: dict = {"target": target, "kind": kind, "status": "pass", "errors": [], "checks": [],
                        "unknown_flags": [], "warnings": [], "stubs": [], "info": {}}

    def error(self, stage: str, message: str, **kw):
        self.d["errors"].append({"stage": stage, "message": message, **kw})
        self.d["status"] = "fail"

    def check(self, name: str, expected, got, ok: bool | None = None, how: str = "real", note: str = ""):
        ok = (expected == got) if ok is None else ok
        self.d["checks"].append({"name": name, "expected": expected, "got": got, "ok": bool(ok), "how": how,
                                 **({"note": note} if note else {})})
        if not ok:
            self.d["status"] = "fail"

    def note(self, name: str, expected, got, note: str = ""):
        """Informational comparison: recorded, never fails the result."""
        self.d["checks"].append({"name": name, "expected": expected, "got": got, "ok": None, "how": "info",
                                 **({"note": note} if note else {})})

    def stub(self, text: str):
        self.d["stubs"].append(text)

    def warn(self, text: str):
        if text not in self.d["warnings"]:
            self.d["warnings"].append(text)


def exc_info(e: BaseException, root: str | None = None) -> dict:
    """Exception type, message and the innermost frame inside the framework tree (file:line: code)."""
    tb = traceback.extract_tb(e.__traceback__)
    where = None
    for fr in reversed(tb):
        if (root and fr.filename.startswith(root)) or ("site-packages" in fr.filename and root is None):
            where = f"{fr.filename.replace(root or '', '').lstrip('/')}:{fr.lineno}: {fr.line}"
            break
    if where is None and tb:
        fr = tb[-1]
        where = f"{fr.filename}:{fr.lineno}: {fr.line}"
    return {"type": type(e).__name__, "message": str(e).strip(), "where": where}


class _Cap(io.StringIO):
    """A capture buffer that still has a file descriptor (faulthandler.enable() asks for one)."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd

    def fileno(self):
        return self._fd


@contextlib.contextmanager
def captured():
    """stdout/stderr into buffers; Python warnings raised inside are appended to stderr as 'Warning: ...'."""
    import warnings
    out, err = _Cap(1), _Cap(2)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield out, err
    for w in caught:
        if "site-packages" not in str(w.filename):
            err.write(f"\nWarning: {w.category.__name__}: {w.message}\n")


HARNESS_NOISE = ("'type' is deprecated as of Python 3.12",  # Python 3.12 itself, not the export
                 "Overriding default arguments for tokenizer_type",  # the harness's own --tokenizer-type
                 "overriding default arguments for tokenizer_type")


def interesting_lines(text: str) -> list[str]:
    keep = []
    for line in text.splitlines():
        low = line.lower()
        if ("warn" in low or "deprecat" in low or "disabling" in low or "overriding" in low) and len(line) < 600:
            if "...." in line or "warnings.warn(" in line or "is not installed" in low or "no cuda runtime" in low:
                continue
            if any(s in line for s in HARNESS_NOISE):
                continue
            keep.append(line.strip())
    return keep


def fake_world(world_size: int):
    """torch.distributed on torch's in-process 'fake' backend: every collective is a no-op, groups are real
    objects, so rank-grid construction code runs for any world size on one CPU process."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)


def recompute_expect(s: dict, model: dict) -> dict:
    r = s["recompute"]
    if r == "none":
        return {"recompute_granularity": None}
    if r == "selective":
        return {"recompute_granularity": "selective"}
    if r == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    mods = ["core_attn", "layernorm"] + (["moe_act"] if model.get("moe") else []) + (
        ["mla_up_proj"] if model.get("mla") else [])
    return {"recompute_granularity": "selective", "recompute_modules": mods}


# ----------------------------------------------------------------------------------------------------------
# Megatron-LM worker
# ----------------------------------------------------------------------------------------------------------

def megatron_user_args(case: dict) -> list[str]:
    """What the export leaves to the user, minimal: mock data, a null tokenizer with the model's vocab,
    an LR schedule and a run length."""
    return ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(case["model"]["vocab"]),
            "--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style", "cosine", "--train-iters", "100"]


def _parse_each_flag(parser, groups, res: Result, who: str):
    """Per-flag diagnosis with the framework's own parser object: unknown flags and value errors, all of them
    (argparse itself stops at the first value error)."""
    known = parser._option_string_actions
    for flag, vals in groups:
        if flag not in known:
            res.d["unknown_flags"].append({"flag": flag, "values": vals, "from": who})
            continue

        def boom(msg):
            raise ValueError(msg)
        old = parser.error
        parser.error = boom
        try:
            _ns, rest = parser.parse_known_args([flag, *vals])
            if rest:
                res.error("parse", f"{flag} {' '.join(vals)}: argparse left {rest} unconsumed "
                                   f"(flag takes fewer values than emitted)", flag=flag, origin=who)
        except (ValueError, SystemExit) as e:
            res.error("parse", f"{flag} {' '.join(map(shlex.quote, vals))}: {e}", flag=flag, origin=who)
        finally:
            parser.error = old


def w_megatron(case: dict, root: str, label: str) -> dict:
    import argparse as ap
    import warnings
    res = Result(label, "megatron")
    s, gpus, model = case["strategy"], case["gpus"], case["model"]
    sys.path.insert(0, root)
    emitted = bash_array(Path(case["export_dir"]) / "pretrain_gpt_args.sh", "MEGATRON_ARGS")
    user = megatron_user_args(case) + case.get("extra_args", [])
    res.d["info"]["emitted_args"] = emitted
    res.d["info"]["harness_added_args"] = user
    os.environ.update(WORLD_SIZE=str(gpus), RANK="0", LOCAL_RANK="0")
    if any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in case["notes"]):
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        res.d["info"]["env"] = "CUDA_DEVICE_MAX_CONNECTIONS=1 (as the export's notes say)"
    else:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        res.d["info"]["env"] = "CUDA_DEVICE_MAX_CONNECTIONS unset (as the export's notes say)"

    import torch
    arch = ARCH.get(case["cluster"], (9, 0))
    torch.cuda.get_device_capability = lambda device=None: arch
    res.stub(f"torch.cuda.get_device_capability() -> {arch} ({case['cluster']}); no GPU here")
    warnings.simplefilter("ignore")
    with captured() as (o, e):
        import megatron.core.utils as U
        import megatron.training.arguments as A
    from packaging.version import Version
    if hasattr(A, "get_device_arch_version"):
        A.get_device_arch_version = lambda: arch[0]
        res.stub(f"megatron get_device_arch_version() -> {arch[0]}")
    try:
        U._te_version = Version(TE_VERSION_STUB)
        res.stub(f"Transformer Engine version -> {TE_VERSION_STUB} (not installed; megatron.core.utils._te_version)")
    except Exception:
        pass
    try:  # TransformerConfig asks TE for its fused RoPE kernel (apply_rope_fusion defaults on)
        from megatron.core.models.common.embeddings import rope_utils as RU
        if getattr(RU, "fused_apply_rotary_pos_emb", 0) is None:
            RU.fused_apply_rotary_pos_emb = lambda *a, **k: None
            res.stub("rope_utils.fused_apply_rotary_pos_emb -> placeholder (TE's fused RoPE)")
    except Exception:
        pass

    # 1. the real parser, exactly as pretrain_gpt.py calls it (ignore_unknown_args=False)
    parsers = []
    orig_parse = ap.ArgumentParser.parse_args

    def spy(self, args=None, namespace=None):
        parsers.append(self)
        return orig_parse(self, args, namespace)
    ap.ArgumentParser.parse_args = spy
    sys.argv = ["pretrain_gpt.py", *emitted, *user]
    args = None
    try:
        with captured() as (o, e):
            args = A.parse_args(ignore_unknown_args=False)
        for w in interesting_lines(o.getvalue() + e.getvalue()):
            res.warn(w)
    except SystemExit:
        msg = [ln for ln in e.getvalue().splitlines() if "error:" in ln]
        res.error("parse_args", msg[-1] if msg else e.getvalue().strip()[-800:])
    except Exception as ex:
        res.error("parse_args", **exc_info(ex, root))
    finally:
        ap.ArgumentParser.parse_args = orig_parse
    if parsers:
        p = parsers[-1]
        res.d["info"]["parser_flags"] = len(p._option_string_actions)
        _parse_each_flag(p, split_flags(emitted), res, "export")
        _parse_each_flag(p, split_flags(user), res, "harness")
    if res.d["unknown_flags"]:
        res.d["status"] = "fail"
    if args is None:
        return res.d

    # 2. validate_args, with pretrain_gpt.py's defaults
    try:
        with captured() as (o, e):
            A.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
        for w in interesting_lines(o.getvalue() + e.getvalue()):
            res.warn(w)
    except BaseException as ex:
        res.error("validate_args", **exc_info(ex, root))
        return res.d

    # 3. parsed + validated values against the plan
    g = lambda k, d=None: getattr(args, k, d)
    res.check("tp", s["tp"], g("tensor_model_parallel_size"))
    res.check("pp", s["pp"], g("pipeline_model_parallel_size"))
    res.check("cp", s["cp"], g("context_parallel_size"))
    res.check("ep", s["ep"], g("expert_model_parallel_size", 1))
    if model.get("moe"):
        res.check("etp", s["etp"], g("expert_tensor_parallel_size"))
    res.check("vpp", s["vpp"], g("virtual_pipeline_model_parallel_size") or 1)
    res.check("dp", s["dp"], g("data_parallel_size"))
    res.check("mbs", s["mbs"], g("micro_batch_size"))
    res.check("gbs", s["gbs"], g("global_batch_size"))
    res.check("seq", s["seq"], g("seq_length"))
    res.check("sequence_parallel", bool(s["sp"]) and s["tp"] > 1, bool(g("sequence_parallel")),
              note="Megatron turns sequence parallelism off when tp == 1")
    if s["sp"] and s["tp"] == 1:
        res.warn("plan has sp=on with tp=1; Megatron disabled it")
    for k, v in recompute_expect(s, model).items():
        res.check(f"recompute:{k}", v, g(k))
    zero = s["zero"]
    res.check("zero:use_distributed_optimizer", zero >= 1, bool(g("use_distributed_optimizer")))
    res.check("zero:use_megatron_fsdp", zero >= 2, bool(g("use_megatron_fsdp", False)))
    if zero >= 2:
        res.check("zero:data_parallel_sharding_strategy", {2: "optim_grads", 3: "optim_grads_params"}[zero],
                  g("data_parallel_sharding_strategy"))
    res.check("precision:bf16", True, bool(g("bf16")))
    res.check("precision:fp8", "hybrid" if s["precision"] == "fp8" else None, g("fp8"))
    res.check("tp_comm_overlap", bool(s["tp_overlap"]), bool(g("tp_comm_overlap")))
    if s["pp"] > 1:
        res.check("pipeline p2p overlap (plan p2p_overlap vs args.overlap_p2p_comm after validate_args)",
                  bool(s.get("p2p_overlap")), bool(g("overlap_p2p_comm")),
                  note="validate_args sets overlap_p2p_comm=False for non-interleaved schedules")
    if model.get("moe"):
        res.check("moe:dispatcher", "flex" if s["dispatch"] == "deepep" else "alltoall",
                  g("moe_token_dispatcher_type"))
        res.check("moe:overlap_moe_expert_parallel_comm", bool(s["ep_overlap"]),
                  bool(g("overlap_moe_expert_parallel_comm", False)))

    # 4. microbatches through Megatron's own calculator
    try:
        import inspect

        from megatron.core import num_microbatches_calculator as nmc
        kw = dict(rank=0, rampup_batch_size=g("rampup_batch_size"), global_batch_size=g("global_batch_size"),
                  micro_batch_size=g("micro_batch_size"), data_parallel_size=g("data_parallel_size"),
                  decrease_batch_size_if_needed=bool(g("decrease_batch_size_if_needed", False)))
        sig = inspect.signature(nmc.init_num_microbatches_calculator).parameters
        kw = {k: v for k, v in kw.items() if k in sig}
        with captured():
            nmc.init_num_microbatches_calculator(**kw)
        res.check("microbatches (num_microbatches_calculator)", s["microbatches"], nmc.get_num_microbatches())
    except BaseException as ex:
        res.error("num_microbatches_calculator", **exc_info(ex, root))

    # 5. the model config pretrain_gpt.py builds (TransformerConfig.__post_init__ validates a lot)
    config = None
    try:
        with captured() as (o, e):
            try:
                from megatron.training.argument_utils import gpt_config_from_args
                mcfg = gpt_config_from_args(args)
                config = mcfg.transformer
                res.d["info"]["model_config"] = "gpt_config_from_args"
                try:
                    from megatron.training.argument_utils import pretrain_cfg_container_from_args
                    pretrain_cfg_container_from_args(args, mcfg)
                    res.d["info"]["model_config"] += " + pretrain_cfg_container_from_args"
                except ImportError:
                    pass
            except ImportError:
                config = A.core_transformer_config_from_args(args)
                res.d["info"]["model_config"] = "core_transformer_config_from_args"
        for w in interesting_lines(o.getvalue() + e.getvalue()):
            res.warn(w)
    except BaseException as ex:
        res.error("model_config", **exc_info(ex, root))

    # 6. the rank grid on a fake process group of the plan's size, then the layers each stage builds
    try:
        import inspect
        fake_world(gpus)
        from megatron.core import parallel_state as ps
        want = dict(tensor_model_parallel_size=g("tensor_model_parallel_size"),
                    pipeline_model_parallel_size=g("pipeline_model_parallel_size"),
                    virtual_pipeline_model_parallel_size=g("virtual_pipeline_model_parallel_size"),
                    context_parallel_size=g("context_parallel_size"),
                    hierarchical_context_parallel_sizes=g("hierarchical_context_parallel_sizes"),
                    expert_model_parallel_size=g("expert_model_parallel_size"),
                    expert_tensor_parallel_size=g("expert_tensor_parallel_size"),
                    num_distributed_optimizer_instances=g("num_distributed_optimizer_instances", 1),
                    gtp_remat_size=g("gtp_weight_remat_size", 1),
                    expert_gtp_remat_size=g("expert_gtp_weight_remat_size", 1),
                    order="tp-cp-ep-dp-pp" if not g("use_tp_pp_dp_mapping", False) else "tp-cp-ep-pp-dp",
                    create_gloo_process_groups=False)
        sig = inspect.signature(ps.initialize_model_parallel).parameters
        kw = {k: v for k, v in want.items() if k in sig}
        with captured():
            ps.initialize_model_parallel(**kw)
        res.stub("parallel_state on torch's fake process group, gloo groups off")
        res.check("grid: data-parallel size", s["dp"], ps.get_data_parallel_world_size())
        if model.get("moe"):
            edp = gpus // (s["ep"] * s["etp"] * s["pp"])
            res.check("grid: expert-data-parallel size", edp, ps.get_expert_data_parallel_world_size())
    except BaseException as ex:
        res.error("initialize_model_parallel", **exc_info(ex, root))

    if config is not None:
        try:
            per_rank = _megatron_layers(config, s, root)
            res.d["info"]["layers_per_pp_rank_and_virtual_stage"] = per_rank
            # plan stages are run-length encoded: `ranks` consecutive pp ranks share one entry
            planned = [st["dense_layers"] + st["moe_layers"] for st in case["stages"]
                       for _ in range(st.get("ranks", 1))]
            got = [sum(v) for v in per_rank]
            res.check("decoder layers per pipeline rank", planned, got)
            res.check("decoder layers in total", model["layers"], sum(got))
        except BaseException as ex:
            res.error("get_num_layers_to_build", **exc_info(ex, root))
    return res.d


def _megatron_layers(config, s: dict, root: str) -> list[list[int]]:
    """Decoder layers Megatron builds on each (pp rank, virtual stage)."""
    from megatron.core.transformer.enums import LayerType
    pp = config.pipeline_model_parallel_size
    vpp = config.virtual_pipeline_model_parallel_size or 1
    layout = getattr(config, "pipeline_model_parallel_layout", None)
    out = []
    for r in range(pp):
        row = []
        for v in range(vpp):
            if layout is not None:
                row.append(layout.layout[r][v].count(LayerType.decoder))
            else:
                from megatron.core.transformer.transformer_block import get_num_layers_to_build
                row.append(get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=r))
        out.append(row)
    return out


# ----------------------------------------------------------------------------------------------------------
# DeepSpeed + Megatron-DeepSpeed worker
# ----------------------------------------------------------------------------------------------------------

def mds_user_args(case: dict) -> list[str]:
    """Model-definition arguments the export leaves to the user's Megatron-DeepSpeed model script, plus the
    minimal data/tokenizer/optimizer ones."""
    m = case["model"]
    args = ["--num-layers", str(m["layers"]), "--hidden-size", str(m["hidden"]),
            "--num-attention-heads", str(m["heads"]), "--ffn-hidden-size", str(m["ffn"]),
            "--max-position-embeddings", str(max(m["max_position"], case["strategy"]["seq"])),
            "--vocab-file", "vocab.json", "--merge-file", "merges.txt",
            "--data-path", "dummy_text_document", "--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style",
            "cosine", "--train-iters", "100"]
    if m["kv_heads"] < m["heads"]:
        args += ["--num-key-value-heads", str(m["kv_heads"])]
    if m.get("moe"):
        args += ["--num-experts", str(m["moe"]["experts"]), "--topk", str(m["moe"]["top_k"])]
    return args


def w_deepspeed(case: dict, root: str, label: str) -> dict:
    import warnings
    res = Result(label, "deepspeed")
    s, gpus, model = case["strategy"], case["gpus"], case["model"]
    exp = Path(case["export_dir"])
    sys.path.insert(0, root)
    os.environ.update(WORLD_SIZE=str(gpus), RANK="0", LOCAL_RANK="0")
    warnings.simplefilter("ignore")
    with captured():
        import deepspeed
        import torch
        from deepspeed.runtime.config import DeepSpeedConfig
    res.d["info"]["deepspeed"] = deepspeed.__version__
    cfg_path = exp / "ds_config.json"
    raw = json.loads(cfg_path.read_text())
    res.d["info"]["ds_config"] = raw

    # 1. Megatron-DeepSpeed's own argument parser (with deepspeed.add_config_arguments) + validate_args
    args = None
    ds_args_file = exp / "megatron_deepspeed_args.sh"
    if ds_args_file.exists():
        import argparse as ap
        emitted = bash_array(ds_args_file, "DS_ARGS")
        emitted = [str(cfg_path) if t == "ds_config.json" else t for t in emitted]
        user = mds_user_args(case)
        res.d["info"]["emitted_args"] = emitted
        res.d["info"]["harness_added_args"] = user
        with captured():
            from megatron import arguments as MA
        parsers = []
        orig_parse = ap.ArgumentParser.parse_args

        def spy(self, a=None, namespace=None):
            parsers.append(self)
            return orig_parse(self, a, namespace)
        ap.ArgumentParser.parse_args = spy
        sys.argv = ["pretrain_gpt.py", *emitted, *user]
        try:
            with captured() as (o, e):
                args = MA.parse_args(ignore_unknown_args=False)
        except SystemExit:
            msg = [ln for ln in e.getvalue().splitlines() if "error:" in ln]
            res.error("mds parse_args", msg[-1] if msg else e.getvalue().strip()[-800:])
        except Exception as ex:
            res.error("mds parse_args", **exc_info(ex, root))
        finally:
            ap.ArgumentParser.parse_args = orig_parse
        if parsers:
            _parse_each_flag(parsers[-1], split_flags(emitted), res, "export")
            _parse_each_flag(parsers[-1], split_flags(user), res, "harness")
        if res.d["unknown_flags"]:
            res.d["status"] = "fail"
        if args is not None:
            try:
                with captured() as (o, e):
                    MA.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
                for w in interesting_lines(o.getvalue() + e.getvalue()):
                    res.warn(w)
                g = lambda k, d=None: getattr(args, k, d)
                res.check("mds: tp", s["tp"], g("tensor_model_parallel_size"))
                res.check("mds: pp", s["pp"], g("pipeline_model_parallel_size"))
                res.check("mds: dp", s["dp"], g("data_parallel_size"))
                res.check("mds: zero_stage", s["zero"], g("zero_stage"))
                res.check("mds: mbs", s["mbs"], g("micro_batch_size"))
                res.check("mds: gbs", s["gbs"], g("global_batch_size"))
                res.check("mds: seq", s["seq"], g("seq_length"))
                res.check("mds: sequence_parallel", bool(s["sp"]), bool(g("sequence_parallel")))
                res.check("mds: deepspeed pipeline engine used", s["pp"] > 1, bool(g("ds_pipeline_enabled")))
                for k, v in recompute_expect(s, model).items():
                    if k != "recompute_modules":
                        res.check(f"mds: recompute:{k}", v, g(k))
                if model.get("moe"):
                    eps = g("moe_expert_parallel_size", None)
                    res.check("mds: moe_expert_parallel_size", s["ep"], eps)
                    res.check("mds: enable_expert_tensor_parallelism", s["etp"] > 1,
                              bool(g("enable_expert_tensor_parallelism")))
                res.check("mds: zbh1", s["schedule"] == "zb-h1", bool(g("enable_zbh1_pipeline")))
                res.check("mds: --deepspeed_config points at the JSON", str(cfg_path), g("deepspeed_config"))
            except BaseException as ex:
                res.error("mds validate_args", **exc_info(ex, root))
    else:
        res.warn("no megatron_deepspeed_args.sh emitted")

    # 2. DeepSpeedConfig with the real Megatron-DeepSpeed mpu on a fake process group of the plan's size
    mpu = None
    try:
        fake_world(gpus)
        with captured():
            deepspeed.init_distributed(dist_backend="fake", auto_mpi_discovery=False, verbose=False)
        from megatron.core import parallel_state as mpu_mod
        with captured():
            mpu_mod.initialize_model_parallel(s["tp"], s["pp"], 1, None, None,
                                              use_distributed_optimizer=False)
        mpu = mpu_mod
        res.stub("torch.distributed 'fake' backend; deepspeed.comm initialised on it")
        res.check("mds mpu: data-parallel world size", s["dp"], mpu.get_data_parallel_world_size())
    except BaseException as ex:
        res.error("mds initialize_model_parallel", **exc_info(ex, root))
    grid = mpu
    if s["pp"] > 1:
        # Megatron-DeepSpeed passes mpu=None with a PipelineModule; deepspeed.initialize then uses
        # PipelineModule.mpu(), i.e. its PipelineParallelGrid over a PipeModelDataParallelTopology.
        try:
            from deepspeed.runtime.pipe.topology import PipelineParallelGrid, PipeModelDataParallelTopology
            with captured():
                grid = PipelineParallelGrid(topology=PipeModelDataParallelTopology(
                    num_pp=s["pp"], num_mp=s["tp"], num_dp=gpus // (s["pp"] * s["tp"])))
            res.check("PipelineParallelGrid: data-parallel world size", s["dp"], grid.get_data_parallel_world_size())
        except BaseException as ex:
            res.error("PipelineParallelGrid", **exc_info(ex))
    cfg = None
    try:
        with captured() as (o, e):
            cfg = DeepSpeedConfig(str(cfg_path), mpu=grid)
        res.check("DeepSpeedConfig.world_size (data parallel)", s["dp"], cfg.world_size)
        res.check("train_batch_size", s["gbs"], cfg.train_batch_size)
        res.check("train_micro_batch_size_per_gpu", s["mbs"], cfg.train_micro_batch_size_per_gpu)
        res.check("gradient_accumulation_steps", s["microbatches"], cfg.gradient_accumulation_steps)
        res.check("batch identity tbs == mbs*gas*dp (DeepSpeed _batch_assertion passed)",
                  cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps
                  * cfg.world_size)
        res.check("zero_optimization.stage", s["zero"], int(cfg.zero_optimization_stage))
        res.check("bf16 enabled", True, bool(cfg.bfloat16_config.enabled))
        for w in interesting_lines(o.getvalue() + e.getvalue()):
            res.warn(w)
    except BaseException as ex:
        res.error("DeepSpeedConfig", **exc_info(ex))
    if s["pp"] > 1:
        # PipelineEngine.__init__ (deepspeed/runtime/pipe/engine.py) asserts
        # zero_optimization_stage() < ZeroStageEnum.gradients -- cannot construct the engine on CPU: mirror.
        res.check("PipelineEngine: ZeRO stage < 2 with pipeline parallelism (mirror of engine.py assert)",
                  True, raw.get("zero_optimization", {}).get("stage", 0) < 2, how="mirror")

    # 3. DeepSpeed MoE: the real deepspeed.moe.layer.MoE (meta device, nn.Linear standing in for the expert
    #    MLP) and set_deepspeed_parallelism(), as DeepSpeedEngine._configure_distributed_model does after
    #    `groups.mpu = self.mpu` (Megatron-DeepSpeed passes mpu only with --no-pipeline-parallel).
    if model.get("moe"):
        try:
            import torch
            from deepspeed.moe.layer import MoE
            from deepspeed.utils import groups
            groups.mpu = mpu if s["pp"] == 1 else None
            h = model["hidden"]
            with torch.device("meta"), captured():
                layer = MoE(h, torch.nn.Linear(h, h, bias=False), num_experts=model["moe"]["experts"],
                            ep_size=s["ep"], k=model["moe"]["top_k"],
                            enable_expert_tensor_parallelism=s["etp"] > 1)
                layer.set_deepspeed_parallelism(bool(getattr(cfg, "use_data_before_expert_parallel_", False)))
            name = f"ep_size_{s['ep']}"
            res.check("DeepSpeed MoE(...) + set_deepspeed_parallelism: expert-parallel group size", s["ep"],
                      groups._get_expert_parallel_world_size(name))
            res.d["info"]["ds_expert_data_parallel_size"] = groups._get_expert_data_parallel_world_size(name)
            res.d["info"]["ds_num_local_experts"] = layer.num_local_experts
        except BaseException as ex:
            res.error("deepspeed.moe.layer.MoE", **exc_info(ex))
    return res.d


# ----------------------------------------------------------------------------------------------------------
# torchtitan workers
# ----------------------------------------------------------------------------------------------------------

def _toml_to_cli(data: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _toml_to_cli(v, key + ".")
        elif isinstance(v, bool):
            out.append(f"--{key}" if v else f"--no-{key}")  # tyro's boolean flag pair
        elif isinstance(v, list) and v and isinstance(v[0], list):
            out += [f"--{key}", json.dumps(v)]
        elif isinstance(v, list):
            out += [f"--{key}", ",".join(map(str, v))]
        else:
            out += [f"--{key}", str(v)]
    return out


def _titan_gpu_stub(res: Result, cluster: str):
    """torchtitan asks torch.cuda for the capability (float8 converters refuse < SM89): answer for the
    plan's cluster in every torchtitan module that imported has_cuda_capability."""
    arch = ARCH.get(cluster, (9, 0))
    fn = lambda major, minor: arch >= (major, minor)
    for name, mod in list(sys.modules.items()):
        if name.startswith("torchtitan") and hasattr(mod, "has_cuda_capability"):
            mod.has_cuda_capability = fn
    res.stub(f"torchtitan has_cuda_capability() answers for {cluster} {arch}")


def _tyro_msg(err: str) -> str:
    """tyro's boxed error without box drawing, log lines and the help pointer."""
    keep = []
    for ln in err.splitlines():
        ln = ln.strip(" │╭╰─╮╯")
        if not ln or set(ln) <= set("─-") or "has no effect without" in ln or ln.startswith("For full helptext") \
                or "does not exist!" in ln:
            continue
        keep.append(ln)
    return " | ".join(keep)[-1800:]


def _titan_parallel_dims(res: Result, par, gpus: int, root: str, version: str):
    """ParallelDims of the installed tree (its __post_init__ validates) + build_mesh on the fake PG."""
    import inspect

    from torchtitan.distributed import ParallelDims
    fields = inspect.signature(ParallelDims).parameters
    kw = dict(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
              cp=par.context_parallel_degree, tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
              ep=getattr(par, "expert_parallel_degree", 1), etp=getattr(par, "expert_tensor_parallel_degree", 1),
              world_size=gpus)
    kw = {k: v for k, v in kw.items() if k in fields}
    missing = [k for k in fields if k not in kw and fields[k].default is inspect.Parameter.empty]
    if missing:
        res.warn(f"ParallelDims needs {missing} (not set)")
    try:
        pd = ParallelDims(**kw)
    except BaseException as ex:
        res.error("ParallelDims", **exc_info(ex, root))
        return None
    try:
        fake_world(gpus)
        with captured():
            try:
                mesh = pd.build_mesh()
            except TypeError:
                mesh = pd.build_mesh(device_type="cpu")
        res.stub("ParallelDims.build_mesh on torch's fake process group")
        res.d["info"]["mesh"] = str(getattr(mesh, "mesh_dim_names", mesh))
    except BaseException as ex:
        res.error("ParallelDims.build_mesh", **exc_info(ex, root))
    return pd


def w_titan_toml(case: dict, root: str, label: str) -> dict:
    import warnings

    import tomllib
    res = Result(label, "titan_toml")
    s, gpus, model = case["strategy"], case["gpus"], case["model"]
    sys.path.insert(0, root)
    toml_path = Path(case["export_dir"]) / "train.toml"
    data = tomllib.loads(toml_path.read_text())
    os.environ.update(WORLD_SIZE=str(gpus), RANK="0", LOCAL_RANK="0")
    warnings.simplefilter("ignore")
    with captured():
        import torchtitan.tools.utils  # noqa: F401
        from torchtitan.config import ConfigManager
    _titan_gpu_stub(res, case["cluster"])
    # 1. the documented launch path: --job.config_file
    cfg = None
    try:
        with captured() as (o, e):
            cfg = ConfigManager().parse_args(["--job.config_file", str(toml_path)])
    except BaseException as ex:
        res.error("ConfigManager(--job.config_file)", **exc_info(ex, root))
    # 2. the same keys as tyro flags: tyro checks types and Literal choices (the TOML path does not)
    try:
        cli = _toml_to_cli(data)
        res.d["info"]["as_cli"] = cli
        with captured() as (_o, e):
            ConfigManager().parse_args(cli)
    except SystemExit:
        res.error("tyro CLI with the TOML's keys", _tyro_msg(e.getvalue()))
    except BaseException as ex:
        res.error("tyro CLI with the TOML's keys", **exc_info(ex, root))
    if cfg is None:
        return res.d
    par, tr = cfg.parallelism, cfg.training
    dp = s["dp"]
    res.check("tp", s["tp"], par.tensor_parallel_degree)
    res.check("pp", s["pp"], par.pipeline_parallel_degree)
    res.check("cp", s["cp"], par.context_parallel_degree)
    if model.get("moe"):
        res.check("ep", s["ep"], par.expert_parallel_degree)
        res.check("etp", s["etp"], par.expert_tensor_parallel_degree)
    res.check("dp (replicate*shard)", dp, par.data_parallel_replicate_degree * par.data_parallel_shard_degree)
    res.check("seq", s["seq"], tr.seq_len)
    res.check("gbs", s["gbs"], tr.global_batch_size)
    res.check("activation_checkpoint.mode", {"none": "none", "selective": "selective", "full": "full"}.get(
        s["recompute"], s["recompute"]), cfg.activation_checkpoint.mode)
    try:
        import typing

        from torchtitan.config import job_config as jc
        lit = typing.get_type_hints(jc.ActivationCheckpoint)["mode"]
        res.check("activation_checkpoint.mode is one of the Literal choices", True,
                  cfg.activation_checkpoint.mode in typing.get_args(lit), note=str(typing.get_args(lit)))
    except Exception:
        pass
    pd = _titan_parallel_dims(res, par, gpus, root, "0.2.2")
    # 3. Trainer.__init__ batch checks (torchtitan/train.py) -- mirror: the Trainer cannot be built here
    batch_degree = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    gb = tr.global_batch_size if tr.global_batch_size > 0 else tr.local_batch_size * batch_degree
    res.check("train.py: global % (local_batch_size * dp) == 0 (mirror)", 0,
              gb % (tr.local_batch_size * batch_degree), how="mirror")
    ga = gb // (tr.local_batch_size * batch_degree)
    if s["pp"] == 1:
        res.check("gradient accumulation steps == plan microbatches (mirror)", s["microbatches"], ga, how="mirror")
        res.check("local_batch_size == mbs", s["mbs"], tr.local_batch_size)
    # 4. model name / flavor in this release's registry; converters registered
    try:
        from torchtitan.protocols.train_spec import get_train_spec
        with captured():
            spec = get_train_spec(cfg.model.name)
        res.check("model.flavor exists in the train spec", True, cfg.model.flavor in spec.model_args,
                  note=f"{cfg.model.name}: {sorted(spec.model_args)}")
        margs = spec.model_args.get(cfg.model.flavor)
        if margs is not None:
            nl = getattr(margs, "n_layers", None)
            res.check("flavor's n_layers == plan model layers", model["layers"], nl)
            if s["pp"] > 1:
                _titan_pp(res, cfg, spec, margs, s, gpus, pd, root)
    except BaseException as ex:
        res.error("train spec", **exc_info(ex, root))
    if getattr(cfg.model, "converters", None):
        # the real train.py call: build_model_converters(job_config, parallel_dims)
        from torchtitan.protocols.model_converter import _registry_model_converter_cls as reg
        from torchtitan.protocols.model_converter import build_model_converters
        res.d["info"]["registered_converters"] = sorted(reg)
        try:
            with captured():
                build_model_converters(cfg, pd)
            res.check("build_model_converters(model.converters)", True, True)
        except KeyError as ex:
            res.error("build_model_converters", f"KeyError: {ex} -- model.converters = {cfg.model.converters}; "
                      f"registered: {sorted(reg)}", where="torchtitan/protocols/model_converter.py "
                      "ModelConvertersContainer.__init__: _registry_model_converter_cls[name]")
        except BaseException as ex:
            d = exc_info(ex, root)
            res.warn(f"build_model_converters stopped on this CPU machine: {d['type']}: {d['message'][:300]}")
    return res.d


def _titan_pp(res: Result, cfg, spec, margs, s: dict, gpus: int, pd, root: str):
    """Pipeline: module FQNs against a meta-device model of the flavor; the schedule class built with
    PipelineStages on the fake pp group (torch.distributed.pipelining's own constructor checks)."""
    import torch
    par = cfg.parallelism
    fqns = par.module_fqns_per_model_part
    if fqns is None:
        res.warn("no module_fqns_per_model_part: torchtitan splits layers itself")
        return
    try:
        try:
            with torch.device("meta"), captured():
                if hasattr(margs, "update_from_config"):
                    margs.update_from_config(cfg)  # as train.py does before building the model
                m = spec.model_cls(margs)
        except ImportError as ex:  # DeepEP and friends are CUDA-only; module names do not depend on them
            if getattr(par, "expert_parallel_comm_backend", "standard") == "standard":
                raise
            res.stub(f"meta model built with expert_parallel_comm_backend='standard' ({ex})")
            par.expert_parallel_comm_backend = "standard"
            with torch.device("meta"), captured():
                margs.update_from_config(cfg)
                m = spec.model_cls(margs)
        names = {n for n, _ in m.named_modules()}
        bad = [f for part in fqns for f in part if f not in names]
        res.check("every module_fqns_per_model_part entry is a module of the model", [], bad)
        flat = [f for part in fqns for f in part]
        want = sorted([n for n, _ in m.named_children() if n != "layers"]
                      + [f"layers.{k}" for k in (m.layers.keys() if hasattr(m.layers, "keys")
                                                 else range(len(m.layers)))])
        dup = sorted({f for f in flat if flat.count(f) > 1})
        res.check("no module placed twice", [], dup)
        res.check("every model child placed", [], sorted(set(want) - set(flat)))
    except BaseException as ex:
        res.error("meta model", **exc_info(ex, root))
    num_stages = len(fqns)
    res.check("virtual stages == pp*vpp", s["pp"] * s["vpp"], num_stages)
    try:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
        cls = get_schedule_class(par.pipeline_parallel_schedule)
        looped = issubclass(cls, PipelineScheduleMulti)
        stages_per_rank = num_stages // par.pipeline_parallel_degree
        res.check("stages divide evenly over pp ranks", 0, num_stages % par.pipeline_parallel_degree)
        if not looped:
            res.check(f"{cls.__name__} is single-stage: one stage per rank", 1, stages_per_rank)
        mb = par.pipeline_parallel_microbatch_size
        bs = cfg.training.local_batch_size
        if bs % mb:
            res.error("build_pipeline_schedule", f"Batch size {bs} must be divisible by microbatch_size {mb}",
                      how="mirror")
        n_mb = bs // mb
        res.check("pipeline microbatches == plan microbatches", s["microbatches"], n_mb)
        pp_mesh = None
        if pd is not None:
            for how in (lambda: pd.get_mesh("pp"), lambda: pd.world_mesh["pp"], lambda: pd._world_mesh["pp"]):
                try:
                    pp_mesh = how()
                    break
                except Exception:
                    continue
        group = pp_mesh.get_group() if pp_mesh is not None else None
        if group is None:
            res.warn("no pp mesh group: schedule not built")
            return
        # stage ids owned by pp rank 0, as torchtitan's pipeline_module_split picks them
        pp = par.pipeline_parallel_degree
        if "V" in par.pipeline_parallel_schedule or "DualPipe" in par.pipeline_parallel_schedule:
            ids = [0, 2 * pp - 1] if stages_per_rank == 2 else [0]
        else:
            ids = [0 + i * pp for i in range(stages_per_rank)]
        with captured():
            stages = [PipelineStage(torch.nn.Identity(), i, num_stages, torch.device("cpu"), group=group)
                      for i in ids]
            cls(stages if looped else stages[0], n_microbatches=n_mb, loss_fn=lambda a, b: a.sum(),
                scale_grads=False)
        res.check(f"{cls.__name__}(n_microbatches={n_mb}) constructed with {len(ids)} local stage(s)", True, True)
    except BaseException as ex:
        res.error("pipeline schedule", **exc_info(ex))


TITAN_ENTRY = {  # HF preset -> (module, config_registry function) for HEAD-style configs
    "llama3.1-8b": ("llama3", "llama3_8b"), "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-405b": ("llama3", "llama3_405b"), "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "deepseek-v2-lite": ("deepseek_v3", "deepseek_v3_16b"),
    # no 235B entry in the registry (the model registry has flavor "235B-A22B"): parse on the 30B-A3B entry
    "qwen3-235b-a22b": ("qwen3", "qwen3_235b_a22b", "qwen3_30b_a3b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"), "qwen3-32b": ("qwen3", "qwen3_32b"),
    "qwen3-8b": ("qwen3", "qwen3_8b"), "qwen3-0.6b": ("qwen3", "qwen3_0_6b"),
}


def w_titan_head(case: dict, root: str, label: str) -> dict:
    import importlib
    import warnings
    res = Result(label, "titan_head")
    s, gpus, model = case["strategy"], case["gpus"], case["model"]
    sys.path.insert(0, root)
    ov_path = Path(case["export_dir"]) / "overrides.txt"
    per_version = Path(case["export_dir"]) / f"overrides_v{Path(root).name}.txt"
    if per_version.exists():  # parplan writes one overrides file per registry release (0.3.0, HEAD)
        ov_path = per_version
    if not ov_path.exists():
        res.error("overrides.txt", "not written by the export (see notes)")
        return res.d
    lines = [ln for ln in ov_path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    overrides = [tok for ln in lines for tok in shlex.split(ln)]
    if "drop_unknown" in case:
        kept = []
        for flag, vals in split_flags(overrides):
            if flag not in case["drop_unknown"]:
                kept += [flag, *vals]
        res.d["info"]["dropped_overrides"] = case["drop_unknown"]
        overrides = kept
    overrides += case.get("extra_args", [])
    header = ov_path.read_text().splitlines()[:2]
    mod_m = re.search(r"--module (\S+)", " ".join(header))
    module = mod_m.group(1) if mod_m else None
    os.environ.update(WORLD_SIZE=str(gpus), RANK="0", LOCAL_RANK="0")
    warnings.simplefilter("ignore")
    with captured():
        import torchtitan.tools.utils  # noqa: F401
        from torchtitan.config import ConfigManager
    _titan_gpu_stub(res, case["cluster"])
    entry = TITAN_ENTRY.get(case["model_name"])
    if entry is None:
        res.error("config registry", f"no known config_registry entry for {case['model_name']}")
        return res.d
    if module != entry[0]:
        res.check("--module in overrides.txt header", entry[0], module)
    # the registry function must exist in this tree
    try:
        with captured():
            reg = importlib.import_module(f"torchtitan.models.{entry[0]}.config_registry")
        fns = sorted(n for n in dir(reg) if callable(getattr(reg, n)) and n[0].islower() and n.startswith(entry[0][:4]))
        if not hasattr(reg, entry[1]):
            if len(entry) > 2 and hasattr(reg, entry[2]):
                res.warn(f"{entry[0]}.config_registry has no {entry[1]} (has {fns}); the overrides are parsed "
                         f"on {entry[2]} instead -- a user must write a registry entry for this model")
                res.note("config_registry entry for the model", entry[1], f"missing; used {entry[2]}")
                entry = (entry[0], entry[2])
            else:
                res.error("config registry", f"{entry[0]}.config_registry has no {entry[1]}; has {fns}")
                return res.d
    except BaseException as ex:
        res.error("config registry import", **exc_info(ex, root))
        return res.d
    argv = ["--module", entry[0], "--config", entry[1], *overrides]
    res.d["info"]["argv"] = argv
    cfg = None
    try:
        with captured() as (_o, e):
            cfg = ConfigManager().parse_args(argv)
    except SystemExit:
        res.error("ConfigManager.parse_args (tyro)", _tyro_msg(e.getvalue()))
        # which overrides are unknown to this tree: try each alone
        # which overrides does this tree not know? (each alone; only "Unrecognized" counts)
        rest = []
        for flag, vals in split_flags(overrides):
            try:
                with captured() as (o2, e2):
                    ConfigManager().parse_args(["--module", entry[0], "--config", entry[1], flag, *vals])
                rest += [flag, *vals]
            except SystemExit:
                if "Unrecognized" in e2.getvalue():
                    res.d["unknown_flags"].append({"flag": flag, "values": vals, "from": "export"})
                else:
                    rest += [flag, *vals]
            except BaseException:
                rest += [flag, *vals]
        if res.d["unknown_flags"]:
            try:
                with captured() as (_o2, e2):
                    ConfigManager().parse_args(["--module", entry[0], "--config", entry[1], *rest])
                res.d["info"]["without_unknown_overrides"] = "the remaining overrides parse"
            except SystemExit:
                res.error("ConfigManager.parse_args without the unknown overrides", _tyro_msg(e2.getvalue()))
            except BaseException as ex:
                res.error("ConfigManager.parse_args without the unknown overrides", **exc_info(ex, root))
        return res.d
    except BaseException as ex:
        res.error("ConfigManager.parse_args", **exc_info(ex, root))
        return res.d
    par, tr = cfg.parallelism, cfg.training
    res.check("tp", s["tp"], par.tensor_parallel_degree)
    res.check("pp", s["pp"], par.pipeline_parallel_degree)
    res.check("cp", s["cp"], par.context_parallel_degree)
    if model.get("moe"):
        res.check("ep", s["ep"], par.expert_parallel_degree)
    res.check("dp (replicate*shard)", s["dp"], par.data_parallel_replicate_degree * par.data_parallel_shard_degree)
    if hasattr(tr, "num_tokens_per_train_step"):
        res.check("num_tokens_per_train_step == gbs*seq", s["gbs"] * s["seq"], tr.num_tokens_per_train_step)
        res.check("max_context_length == seq", s["seq"], tr.max_context_length)
    else:
        res.check("seq_len", s["seq"], tr.seq_len)
        res.check("global_batch_size", s["gbs"], tr.global_batch_size)
    if s["pp"] > 1 and hasattr(par, "num_pp_microbatches"):
        res.check("num_pp_microbatches", s["microbatches"], par.num_pp_microbatches)
    _titan_parallel_dims(res, par, gpus, root, "head")
    dp_degree = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    if hasattr(tr, "num_tokens_per_train_step"):
        # torchtitan/trainer.py (HEAD) Trainer.__init__ -- mirror: the Trainer cannot be built here.
        n_tok = tr.num_tokens_per_microbatch_per_dp_rank
        sp_on = getattr(par, "enable_sequence_parallel", True)
        div = (par.tensor_parallel_degree if sp_on else 1) * (2 * par.context_parallel_degree
                                                              if par.context_parallel_degree > 1 else 1)
        res.check("trainer.py: num_tokens_per_microbatch_per_dp_rank % (tp*2cp) == 0 (mirror)", 0, n_tok % div,
                  how="mirror")
        n_pp_mb = par.num_pp_microbatches if par.pipeline_parallel_degree > 1 else 1
        per_dp = n_tok * n_pp_mb
        step = tr.num_tokens_per_train_step if tr.num_tokens_per_train_step > 0 else per_dp * dp_degree
        rem = step % (per_dp * dp_degree)
        res.check("trainer.py: num_tokens_per_train_step % (tokens/microbatch * num_pp_microbatches * dp) == 0 "
                  "(mirror)", 0, rem, how="mirror",
                  note=f"{step} % ({n_tok} * {n_pp_mb} * {dp_degree}) = {rem}" + (
                      "; Trainer.__init__ would raise ValueError: training.num_tokens_per_train_step "
                      f"({step}) must be divisible by the number of tokens processed globally in one gradient "
                      f"accumulation iteration ({per_dp * dp_degree})." if rem else ""))
        if rem == 0:
            res.check("gradient accumulation steps (mirror)", 1 if s["pp"] > 1 else s["microbatches"],
                      step // (per_dp * dp_degree), how="mirror")
        res.check("tokens per pipeline microbatch per dp rank == mbs*seq", s["mbs"] * s["seq"], n_tok)
    else:
        gb = tr.global_batch_size if tr.global_batch_size > 0 else tr.local_batch_size * dp_degree
        res.check("trainer.py: global % (local_batch_size * dp) == 0 (mirror)", 0,
                  gb % (tr.local_batch_size * dp_degree), how="mirror")
    ac = getattr(cfg, "activation_checkpoint", None)
    res.note("activation checkpointing set by the registry entry (overrides cannot change it)",
             s["recompute"], type(ac).__qualname__ if ac is not None else None)

    if s["pp"] > 1:
        res.d["info"]["pipeline_parallel_schedule"] = par.pipeline_parallel_schedule
    return res.d


WORKERS = {"megatron": w_megatron, "deepspeed": w_deepspeed, "titan_toml": w_titan_toml, "titan_head": w_titan_head}


def worker_main(kind: str, root: str, case_path: str, label: str):
    case = json.loads(Path(case_path).read_text())
    try:
        d = WORKERS[kind](case, root, label)
    except BaseException as ex:
        d = Result(label, kind).d
        d["status"] = "harness-error"
        d["errors"].append({"stage": "harness", **exc_info(ex, root), "traceback": traceback.format_exc()[-3000:]})
    sys.stdout.flush()
    print(MARK + json.dumps(d, default=str), flush=True)
    os._exit(0)  # skip interpreter teardown (fake process groups, grain threads)


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "worker":
        sys.exit(__doc__)
    worker_main(*sys.argv[2:6])
