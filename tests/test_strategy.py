"""Strategy validation: each rule rejects the layouts it should, with a message naming the rule."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.errors import InvalidStrategyError
from parplan.hardware import load_cluster
from parplan.planner.strategy import RULES, Layouts, Strategy, valid_mask


def check(model, gpus, cluster="h100", **kw):
    Strategy(**kw).check(model, load_cluster(cluster, gpus=gpus))


def test_valid_layout_passes(llama70):
    check(llama70, 64, tp=8, pp=4, gbs=64, seq=8192, schedule="interleaved", vpp=5)


@pytest.mark.parametrize(("kw", "gpus", "match"), [
    ({"tp": 3, "gbs": 64}, 48, "tp=3 must divide the 64 attention heads"),
    ({"tp": 16, "gbs": 64}, 64, "tp=16 must divide the 8 key/value heads"),
    ({"tp": 8, "pp": 3, "gbs": 64}, 64, r"tp·pp·cp = 8·3·1 = 24 does not divide the 64 GPUs"),
    ({"tp": 8, "gbs": 12, "mbs": 1}, 64, r"gbs=12 must be a multiple of dp·mbs = 8·1 = 8"),
    ({"ep": 2, "gbs": 64}, 64, "needs a mixture-of-experts model"),
    ({"cp": 4, "seq": 4100, "gbs": 64}, 64, "must be a multiple of 2·cp = 8"),
    ({"pp": 4, "schedule": "interleaved", "vpp": 1, "gbs": 64}, 64, "interleaved schedule needs vpp >= 2"),
    ({"pp": 4, "vpp": 2, "gbs": 64}, 64, "vpp=2 needs the interleaved schedule"),
    ({"pp": 3, "schedule": "dualpipe", "gbs": 60}, 60, "DualPipe needs an even pp"),
    ({"pp": 4, "schedule": "dualpipe", "gbs": 32}, 64, r"dualpipe needs at least 2·pp = 8 micro-batches"),
    ({"pp": 4, "schedule": "dualpipev", "vpp": 1, "gbs": 64}, 64, "DualPipeV holds two stages per rank"),
    ({"schedule": "zb-h1", "gbs": 64}, 64, "schedule zb-h1 needs pp > 1"),
    ({"pp": 4, "vpp": 30, "schedule": "interleaved", "gbs": 64}, 64, "virtual stages exceed the 80 layers"),
    ({"pp": 8, "vpp": 2, "schedule": "interleaved", "gbs": 32}, 64,
     "interleaved schedule needs the micro-batch count to be a multiple of pp=8"),
    ({"zero": 4, "gbs": 64}, 64, "zero must lie in 0..3"),
    ({"tp": 2, "sp": False, "tp_overlap": True, "gbs": 64}, 64, "tp_overlap needs sequence parallelism"),
])
def test_rules_reject_with_reason(llama70, kw, gpus, match):
    with pytest.raises(InvalidStrategyError, match=match):
        check(llama70, gpus, **kw)


def test_fp8_needs_hardware_support(llama70):
    with pytest.raises(InvalidStrategyError, match="no fp8 tensor cores"):
        check(llama70, 64, cluster="a100-80gb", tp=8, gbs=64, precision="fp8")


def test_moe_rules(dsv3):
    with pytest.raises(InvalidStrategyError, match="ep=3 must divide the 256 routed experts"):
        check(dsv3, 96, ep=3, gbs=96, pp=2)
    with pytest.raises(InvalidStrategyError, match="MoE with tp > 1 needs sequence parallelism"):
        check(dsv3, 64, tp=2, sp=False, gbs=64)
    with pytest.raises(InvalidStrategyError, match="ep·etp = 128 must divide the 64 GPUs"):
        check(dsv3, 128, ep=64, etp=2, pp=2, gbs=128)
    # DeepSeek-V3's own layout: pp16, ep64, no TP, on 2048 GPUs (DeepSeek-V3 report §3.2).
    check(dsv3, 2048, cluster="h800", pp=16, ep=64, gbs=15360, seq=4096, schedule="dualpipe")


def test_unknown_choice_is_rejected(llama70):
    with pytest.raises(InvalidStrategyError, match="schedule must be one of"):
        Layouts.from_strategies([Strategy(schedule="gpipe")])


def test_sp_is_normalised_off_at_tp1():
    assert Strategy(tp=1, sp=True) == Strategy(tp=1, sp=False)


def test_vectorised_rules_agree_with_scalar_check(llama70):
    """The mask over a batch equals checking each layout alone (same rules, one place)."""
    cluster = load_cluster("h100", gpus=64)
    strategies = [Strategy(tp=tp, pp=pp, vpp=v, schedule="interleaved" if v > 1 else "1f1b", gbs=64, seq=4096)
                  for tp in (1, 2, 3, 8, 16) for pp in (1, 2, 3, 4) for v in (1, 2)]
    mask = valid_mask(Layouts.from_strategies(strategies), llama70, cluster)
    for s, ok in zip(strategies, mask, strict=True):
        try:
            s.check(llama70, cluster)
            scalar = True
        except InvalidStrategyError:
            scalar = False
        assert scalar == bool(ok), s
    assert 0 < mask.sum() < len(strategies)


def test_layouts_round_trip():
    s = Strategy(tp=4, pp=2, vpp=3, schedule="interleaved", recompute="selective", precision="fp8", gbs=32)
    lay = Layouts.from_strategies([s, Strategy()])
    assert lay.strategy(0) == s and len(lay) == 2
    assert np.array_equal(lay.take(np.array([1])).tp, [1])


def test_every_rule_has_a_distinct_name():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
