"""Every export of a wide matrix (dense and MoE models, 8 to 4,096 GPUs, bf16/fp8, pp/vpp, cp, ep, every
ZeRO stage, recompute and schedule a framework allows) is accepted by each version it is written for:
every flag or key exists with the right type and choices there (tests/data/frameworks, read off each
version's code), and none of the cross-option checks that version runs refuses it (framework_options).

The layouts are the ones the framework's support rules let through, so a rule missing from
parplan/export (a combination the planner would cost and the framework refuse) fails here, as does a flag
a version does not know."""

from __future__ import annotations

import itertools
import json

import framework_options as fo
import pytest

from parplan.errors import InvalidStrategyError
from parplan.export import export, targets, unsupported_reason
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner.search import plan
from parplan.planner.strategy import Strategy

MODELS = [("llama3.1-8b", 8), ("llama3.1-8b", 64), ("llama3.1-70b", 512), ("llama3.1-405b", 4096),
          ("qwen3-30b-a3b", 64), ("mixtral-8x22b", 128), ("qwen3-235b-a22b", 256), ("deepseek-v3", 1024)]


def check_launch(framework: str, model, gpus: int, s: Strategy) -> None:
    """Export `s` for every version of `framework` and check each file against that version."""
    launch = export(model, load_cluster("h100", gpus=gpus), s, framework)
    moe = model.moe is not None
    if framework.startswith("megatron"):
        tokens = fo.shell_tokens(launch.files["pretrain_gpt_args.sh"], "MEGATRON_ARGS")
        for target in fo.MEGATRON:
            ns = fo.parse(target, tokens)
            assert fo.megatron_refusals(ns, gpus) == [], (target, s)
            # what validate_args leaves of the overlap is what the plan costed
            assert fo.megatron_overlap_p2p(ns) == s.p2p_overlap or s.pp == 1, (target, s)
    elif framework.startswith("deepspeed"):
        ns = fo.parse("megatron-deepspeed-HEAD",
                      fo.shell_tokens(launch.files["megatron_deepspeed_args.sh"], "DS_ARGS"))
        assert fo.deepspeed_refusals(json.loads(launch.files["ds_config.json"]), ns, gpus) == [], s
    else:
        tomllib = pytest.importorskip("tomllib")
        for t in targets(framework):
            if t.key == "0.2.2":
                cfg = fo.titan_toml_config("0.2.2", tomllib.loads(launch.files["train.toml"]))
            else:
                file = "overrides.txt" if t.key == "HEAD" else f"overrides_v{t.key}.txt"
                cfg = fo.titan_overrides_config(t.key, launch.files[file])
            assert fo.titan_refusals(t.key, cfg, gpus, moe) == [], (t.key, s)


def _layouts(model, gpus: int):
    """Layouts crossing parallel degrees, schedules, ZeRO, recompute, precision and the switches: every
    79th point of the grid (a prime stride, so every value still meets every other in many combinations),
    those valid for the model."""
    cluster = load_cluster("h100", gpus=gpus)
    moe = model.moe is not None
    grid = itertools.product((1, 2, 8), (1, 2, 4, 8), (1, 2), (1, 8, 32) if moe else (1,), (0, 1, 2, 3),
                             ("1f1b", "interleaved", "zb-h1", "dualpipev"), ("none", "selective", "modules", "full"),
                             ("bf16", "fp8"), (False, True), (1, 2))
    for tp, pp, cp, ep, zero, schedule, recompute, precision, switch, mbs in itertools.islice(grid, 0, None, 79):
        vpp = 2 if schedule in ("interleaved", "dualpipev") else 1
        dp = gpus // (tp * pp * cp)
        s = Strategy(tp=tp, pp=pp, cp=cp, ep=ep, etp=1 if switch else tp, vpp=vpp, zero=zero, schedule=schedule,
                     recompute=recompute, precision=precision, mbs=mbs, gbs=max(1, dp) * mbs * 4 * pp,
                     tp_overlap=switch and tp > 1, dispatch="deepep" if switch and moe else "alltoall",
                     ep_overlap=switch and moe and ep > 1 and recompute != "full" and (pp == 1 or vpp > 1),
                     p2p_overlap=not (switch and pp > 2), seq=4096 * cp)
        try:
            s.check(model, cluster)
        except InvalidStrategyError:
            continue
        yield s


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan", "torchtitan@0.2.2"])
@pytest.mark.parametrize(("name", "gpus"), MODELS)
def test_every_supported_export_is_accepted_by_each_version(framework, name, gpus):
    model = load_model(name)
    checked = 0
    for s in _layouts(model, gpus):
        if unsupported_reason(framework, s, model=model, gpus=gpus) is None:
            check_launch(framework, model, gpus, s)
            checked += 1
    assert checked > 0  # the matrix reaches every framework and model


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
@pytest.mark.parametrize(("name", "gpus", "extra"), [
    ("llama3.1-8b", 64, {"pp": "1..4", "precision": "bf16,fp8"}),
    ("llama3.1-70b", 128, {"cp": "1,2", "pp": "2,4", "schedule": "1f1b,interleaved"}),
    ("qwen3-30b-a3b", 64, {"ep": "4,8", "tp": "1,2", "pp": "1,2"}),
])
def test_planned_layouts_are_accepted(framework, name, gpus, extra):
    """What `plan --framework F` recommends is what F's versions accept (the rules filter the search)."""
    from parplan.export import framework_filter
    from parplan.planner.api import space_from_options

    model, cluster = load_model(name), load_cluster("h100", gpus=gpus)
    space = space_from_options(**extra)
    result = plan(model, cluster, gbs=gpus * 2, seq=4096, space=space, top=3,
                  layout_filter=framework_filter(framework, model, gpus))
    for p in result.plans:
        check_launch(framework, model, gpus, p.strategy)
