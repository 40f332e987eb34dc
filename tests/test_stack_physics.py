"""Each stack fact against its source, by hand counts; the properties the search relies on with stacks on."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from conftest import ANY_STACK
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan._resources import data_dir
from parplan.hardware import load_cluster
from parplan.hardware.efficiency import attention_efficiency
from parplan.models import LayerKind, load_model
from parplan.planner import Layouts, Strategy, comm, compute, evaluate, evaluate_layouts
from parplan.planner.context import Ctx
from parplan.planner.recompute import recompute_flops_per_token
from parplan.stacks import load_stack
from parplan.stacks.spec import StackSpec

LLAMA8 = load_model("llama3.1-8b")


def _ctx(stack: StackSpec | str, gpus: int = 8, **kw) -> Ctx:
    kw.setdefault("gbs", gpus)
    kw.setdefault("seq", 8192)
    return Ctx.build(LLAMA8, load_cluster("h100", gpus=gpus), Layouts.from_strategies([Strategy(**kw)]),
                     stack=load_stack(stack))


def _variant(base: str, **changes) -> StackSpec:
    """A preset with some of its facts changed (what a user stack file would do)."""
    spec = load_stack(base)
    sections = {}
    for key, value in changes.items():
        section, name = key.split("__")
        sections.setdefault(section, {})[name] = value
    return dataclasses.replace(spec, **{s: dataclasses.replace(getattr(spec, s), **v) for s, v in sections.items()})


# ------------------------------------------------------------------------------------------ recompute names

def test_torchtitan_op_sac_recomputes_every_second_matmul():
    """torchtitan parallelize_llama.py @820504e: a Llama block runs wq, wk, wv, wo, w1, w3, w2 as aten.mm in
    this order and per-op SAC recomputes every second one: wk (4096×1024), wo (4096×4096), w3 (4096×14336) of
    Llama 3.1 8B = 79,691,776 weights, 2 FLOPs each per token, 32 layers; the attention core is saved."""
    assert recompute_flops_per_token(LLAMA8, 8192, "op_sac", fp8=False) == 2 * 79_691_776 * 32
    # Under torchao float8 the policy still sees aten.mm (torch.mm on the float8 tensor subclass,
    # torchao/float8/float8_linear.py): the same three matmuls are recomputed.
    assert recompute_flops_per_token(LLAMA8, 8192, "op_sac", fp8=True) == 2 * 79_691_776 * 32


def test_megatron_selective_recomputes_the_attention_core_only():
    """Korthikanti et al. 2022 §5: selective recompute repeats QKᵀ and P·V, nothing else."""
    assert recompute_flops_per_token(LLAMA8, 8192, "core_attention", fp8=False) == \
        LLAMA8.attention_core_flops_per_token(8192)


def test_one_name_means_what_the_stack_says():
    megatron, titan = (evaluate(LLAMA8, load_cluster("h100", gpus=8), Strategy(zero=3, gbs=8, seq=8192,
                                                                              recompute="selective"), stack=s)
                       for s in (ANY_STACK, "torchtitan"))
    assert titan.hfu / titan.mfu > megatron.hfu / megatron.mfu  # SAC repeats a third of the GEMMs


def test_blocks_fraction_scales_recompute_time_and_flops():
    cluster = load_cluster("h100", gpus=8)
    full, half = (evaluate(LLAMA8, cluster, Strategy(zero=3, gbs=8, seq=4096, recompute=r), stack="torchtitan")
                  for r in ("full", "blocks:1/2"))
    assert half.time_breakdown["recompute"]["seconds"] == pytest.approx(full.time_breakdown["recompute"]["seconds"] / 2)
    assert half.hfu / half.mfu - 1 == pytest.approx((full.hfu / full.mfu - 1) / 2)


# ----------------------------------------------------------------------------------------- communication

def test_fsdp2_reduces_gradients_in_fp32():
    """torchtitan mixed_precision_reduce = float32: 4 B per gradient element in the reduce-scatter, against 2 B
    with a bf16 reduce (fms-fsdp's bfSixteen). All 8,030,261,248 parameters of Llama 3.1 8B on 8 GPUs
    (pp = 1), ring reduce-scatter over NVLink: each GPU moves 7/8 of the message at the 365 GB/s bus
    bandwidth, so the 2 extra bytes per element cost 7/8 × 8,030,261,248 × 2 / 365e9 s; latency is equal."""
    params = np.array([8_030_261_248.0])
    layers = np.array([32.0])
    fp32, bf16 = (comm.dp_traffic(_ctx(s, zero=3), params, np.zeros(1), layers).zero3_reduce[0]
                  for s in ("torchtitan", _variant("torchtitan", communication__grad_reduce_bytes=2)))
    assert fp32 - bf16 == pytest.approx(7 / 8 * 8_030_261_248 * 2 / 365e9, rel=1e-9)


@pytest.mark.parametrize(("stack", "pp", "passes"), [
    ("torchtitan", 1, 2),  # reshard_after_forward for every block when PP is off (apply_fsdp @820504e)
    ("torchtitan", 2, 1),  # 'For PP, do not reshard after forward'
    (_variant("torchtitan", communication__reshard_after_forward=False), 1, 1),  # fsdp_reshard_after_forward never
    ("fsdp", 2, 2),  # FSDP1 FULL_SHARD reshards whatever the layout
])
def test_parameter_gathers_per_micro_batch(stack, pp, passes):
    assert comm.zero3_gathers(_ctx(stack, pp=pp, zero=3))[0] == passes


def test_dtensor_tp_keeps_the_gathered_input():
    """DTensor TP saves the all-gathered SP input for the weight gradient: backward moves what forward moved;
    Megatron re-gathers it, one more all-gather per column-parallel group."""
    for stack, same in (("torchtitan", True), (ANY_STACK, False)):
        ctx = _ctx(stack, tp=8, sp=True, zero=3)
        lt = compute.layer_time(ctx, LayerKind.DENSE)
        fwd, bwd = comm.tp_layer(ctx, LayerKind.DENSE, lt.gemm_f, lt.gemm_b)
        assert bool(bwd.total[0] == pytest.approx(fwd.total[0])) is same


def test_hsdp_shards_states_over_one_replica():
    """dp_replicate = 2 on 16 GPUs at ZeRO-1: the optimizer states shard over 8 ranks instead of 16, twice the
    bytes per rank (12 B per parameter / 8 against / 16)."""
    cluster = load_cluster("h100", gpus=16)
    one, two = (evaluate(LLAMA8, cluster, Strategy(zero=1, dp_replicate=r, gbs=16, seq=4096))
                for r in (1, 2))
    assert two.memory_breakdown["optimizer"] == pytest.approx(2 * one.memory_breakdown["optimizer"])


# ---------------------------------------------------------------------------------------------- kernels

def test_fa2_on_hopper_runs_at_its_own_efficiency():
    """FlashAttention-3 (arXiv 2407.08608): FA2 reaches 35% of the H100's peak where FA3 reaches 75%."""
    gpu = load_cluster("h100").gpu
    ratio = attention_efficiency(gpu, 8192, kernel="fa2") / attention_efficiency(gpu, 8192)
    assert ratio == pytest.approx(0.35 / 0.75)
    a100 = load_cluster("a100-80gb").gpu  # FA2 is the A100's own kernel: no slower entry
    assert attention_efficiency(a100, 8192, kernel="fa2") == attention_efficiency(a100, 8192)


def test_fa2_on_mi300x_runs_at_its_measured_rate():
    """ROCm/flash-attention#142 (MI300X, ROCm 6.3.2, head dim 128, batch 1, 16,384 tokens): FlashAttention-2
    forward 353.22 and backward 194.43 TFLOP/s against the 1,307.4 TFLOP/s bf16 peak; within the rounding of
    the stored asymptotes (0.281, 0.155)."""
    gpu = load_cluster("mi300x").gpu
    assert attention_efficiency(gpu, 16384, kernel="fa2") * 1307.4 == pytest.approx(353.22, rel=3e-3)
    assert attention_efficiency(gpu, 16384, backward=True, kernel="fa2") * 1307.4 == pytest.approx(194.43, rel=3e-3)


def test_torchao_float8_casts_every_weight_at_every_use():
    """torchao's roofline model (roofline_utils.py, tensorwise, role 'weight'): the amax pass reads the bf16
    weight (2 B), the forward cast reads it and writes fp8 (3 B), backward casts it again (3 B). Llama 3.1 8B's
    quantised linears of one layer: wq 4096² + wk, wv 4096·1024 + wo 4096² + w1, w3, w2 4096·14336 =
    218,103,808 weights, cast in every micro-batch where the stack caches no fp8 copy (torchtitan), never where
    Transformer Engine keeps the copies for the step (megatron-core) or XLA quantises them inside the GEMM's
    operand fusion (maxtext)."""
    weights = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    titan = _ctx("torchtitan", zero=3, precision="fp8")
    assert compute.gemm_work(titan, LayerKind.DENSE).fp8_weights[0] == weights
    assert compute.fp8_weight_casts(titan, np.array([weights]))[0] == weights
    cached = Ctx.build(LLAMA8, titan.cluster, titan.lay, stack=_variant("torchtitan", memory__fp8_weight_cache_bytes=1))
    cast, kept = compute.layer_time(titan, LayerKind.DENSE), compute.layer_time(cached, LayerKind.DENSE)
    bw = titan.cluster.gpu.hbm_tbps * 1e12 * titan.cluster.gpu.hbm_efficiency
    assert cast.elem_f[0] - kept.elem_f[0] == pytest.approx(5 * weights / bw, rel=1e-9)
    assert cast.elem_b[0] - kept.elem_b[0] == pytest.approx(3 * weights / bw, rel=1e-9)
    assert compute.fp8_weight_casts(_ctx(ANY_STACK, precision="fp8"), np.array([weights]))[0] == 0
    assert compute.fp8_weight_casts(_ctx("torchtitan", zero=3), np.array([weights]))[0] == 0  # bf16: no casts
    assert compute.fp8_weight_casts(_ctx("maxtext", zero=3, precision="fp8"), np.array([weights]))[0] == 0


def test_eager_rmsnorm_moves_ten_times_the_bytes():
    """PyTorch's composite RMSNorm (upcast, pow, mean, scale, weight, downcast) moves 40 B per element against
    a fused kernel's 4 (compute.EAGER_OPS hand count)."""
    eager, fused = (compute._norm_bytes(_ctx(s)) for s in ("torchtitan", load_stack("torchtitan", compile=True)))
    assert eager[0] == pytest.approx(10 * fused[0])


def _layouts(draw_seed: int, n: int = 24) -> list[Strategy]:
    rng = np.random.default_rng(draw_seed)
    out = []
    while len(out) < n:
        tp = int(rng.choice([1, 2, 4, 8]))
        out.append(Strategy(tp=tp, sp=tp > 1, zero=int(rng.choice([0, 2, 3])), mbs=int(rng.choice([1, 2])),
                            recompute=str(rng.choice(["none", "selective", "full"])), gbs=32,
                            seq=int(rng.choice([2048, 8192])), precision=str(rng.choice(["bf16", "fp8"]))))
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), host_us=st.sampled_from([2.0, 8.0, 40.0]))
def test_more_fusion_or_compile_is_never_slower(seed, host_us):
    """Compiling, or fusing more of the element-wise ops, removes HBM traffic and kernels and adds nothing."""
    cluster = load_cluster("h100", gpus=32)
    lay = Layouts.from_strategies(_layouts(seed))
    base = _variant("torchtitan", kernels__host_us_per_kernel=host_us)
    steps = [evaluate_layouts(LLAMA8, cluster, lay, stack=s, breakdown=False).step_time_s for s in (
        base, dataclasses.replace(base, kernels=dataclasses.replace(base.kernels, fused_ops=("norm",))),
        dataclasses.replace(base, kernels=dataclasses.replace(base.kernels, fused_ops=("norm", "rope", "activation"))),
        dataclasses.replace(base, kernels=dataclasses.replace(base.kernels,
                                                              fused_ops=("norm", "rope", "activation", "loss"))),
        base.with_compile(True))]
    for slower, faster in itertools.pairwise(steps):
        assert (faster <= slower * (1 + 1e-12)).all()


def test_cuda_graphs_remove_the_launch_wait():
    """A launch-bound layer (a tiny micro-batch behind 40 µs of host per kernel) waits for its launches unless
    its kernels replay from a CUDA graph."""
    cluster = load_cluster("h100", gpus=8)
    s = Strategy(tp=8, sp=True, gbs=1, seq=512)
    slow = _variant("megatron-core", kernels__host_us_per_kernel=40.0)
    graphs = _variant("megatron-core", kernels__host_us_per_kernel=40.0, kernels__cuda_graphs=True)
    a, b = (evaluate(LLAMA8, cluster, s, stack=x) for x in (slow, graphs))
    assert a.time_breakdown["launch"]["seconds"] > 0 and b.time_breakdown["launch"]["seconds"] == 0
    assert b.step_time_s < a.step_time_s


# ------------------------------------------------------------------------------------------ deterministic mode

def test_deterministic_mode_fills_what_a_layer_allocates():
    """PyTorch's deterministic mode fills every new tensor (torch.utils.deterministic.fill_uninitialized_memory).
    Hand count for a Llama 3.1 8B layer, tp 1, per token: forward the linears' outputs qkv 6144 + attn_out 4096
    + mlp_up 28672 + mlp_down 4096, the attention output 32·128 = 4096, the norms' and residual adds' 4·4096,
    RoPE's q and k (32 + 8)·128 = 5120 and SwiGLU's 14336: 82,944 elements; backward the data gradients 4096 +
    4096 + 4096 + 14336, dq/dk/dv 4096 + 8·256 = 6144 and the element-wise gradients 16384 + 5120 + 14336:
    68,608 elements."""
    seq = 4096
    ctx = _ctx("megatron-core", gpus=8, seq=seq, gbs=8)
    fwd, bwd = compute.allocated_elements(ctx, LayerKind.DENSE)
    assert fwd[0] == 82_944 * seq and bwd[0] == 68_608 * seq
    assert compute.fill_time(ctx, LayerKind.DENSE)[0][0] == 0.0  # megatron-core's default: off


def test_deterministic_flash_backward_runs_at_the_ordered_accumulation_rate():
    """Flash-attention backward with dQ accumulated in a fixed order: 361.3 against 574.7 TFLOP/s
    (Dao-AILab/flash-attention PR #1893, FA3 on H100, hd128 causal 8k); the forward is unchanged."""
    base = _ctx("megatron-core", gpus=8, seq=8192, gbs=8)
    det = Ctx.build(LLAMA8, load_cluster("h100", gpus=8), base.lay,
                    stack=_variant("megatron-core", kernels__deterministic=True))
    (f0, b0), (f1, b1) = compute._attention(base), compute._attention(det)
    assert f1[0] == f0[0]
    assert b1[0] / b0[0] == pytest.approx(574.7 / 361.3)


@pytest.mark.parametrize("kw", [dict(tp=1), dict(tp=4, sp=True), dict(tp=2, pp=2, vpp=2, schedule="interleaved"),
                                dict(tp=1, recompute="full")])
def test_deterministic_mode_is_never_faster(kw):
    """Filling new tensors only adds HBM writes: the same layout is slower in deterministic mode."""
    cluster = load_cluster("h100", gpus=8)
    s = Strategy(gbs=16, seq=4096, **kw)
    fast = evaluate(LLAMA8, cluster, s, stack=load_stack("megatron-core"))
    slow = evaluate(LLAMA8, cluster, s, stack=_variant("megatron-core", kernels__deterministic=True))
    assert slow.step_time_s > fast.step_time_s


def test_mla_rotates_only_its_rope_dimensions():
    """DeepSeek-V2 §2.1.3 (decoupled RoPE): MLA rotates the qk_rope_head_dim = 64 part of each of DeepSeek-V3's
    128 query heads and one 64-wide k_pe shared by all heads, not the 192-wide heads. Eager RoPE moves 20 B per
    rotated element, fused 4 B (compute.EAGER_OPS): over 8,192 tokens at TP 1 the difference is
    16 · 8,192 · (128·64 + 64) = 1,082,130,432 B."""
    v3 = load_model("deepseek-v3")
    cluster = load_cluster("h100", gpus=8)
    lay = Layouts.from_strategies([Strategy(gbs=8, seq=8192)])
    eager, fused = (Ctx.build(v3, cluster, lay, stack=_variant(ANY_STACK, kernels__fused_ops=ops))
                    for ops in (("norm", "activation"), ("norm", "rope", "activation")))
    fp8 = np.zeros(1)
    diff = (compute._elementwise_bytes(eager, LayerKind.DENSE, fp8)
            - compute._elementwise_bytes(fused, LayerKind.DENSE, fp8))
    assert diff[0] == 16 * 8192 * (128 * 64 + 64)


# ------------------------------------------------------------------------------------------ the loss

def test_unfused_cross_entropy_makes_megatrons_passes():
    """Megatron-Core's eager VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py), hand
    count per logit: forward .float() (read 2, write 4), max (4), subtract (4, 4), exp (4, 4), sum (4), divide
    (4, 4) = 38 B in 6 kernels against the fused 10 B in 3; backward multiply by the loss gradient (4, 4) and
    cast to bf16 (4, 2) = 14 B in 3 kernels against 8 B in 2. Llama 3.1 8B at TP 1, one 8,192-token
    micro-batch: 8,192 × 128,256 = 1,050,673,152 logits, 28 B and 6 B more each, at H100's 3.35 TB/s (datasheet)
    times the preset's HBM efficiency, plus 3 and 1 kernel launches."""
    fused = _ctx("megatron-core", seq=8192, gbs=8)
    eager = Ctx.build(LLAMA8, load_cluster("h100", gpus=8), fused.lay,
                      stack=_variant("megatron-core", kernels__fused_ops=("norm", "rope", "activation")))
    a, b = compute.head_time(fused), compute.head_time(eager)
    gpu = fused.cluster.gpu
    bw, launch = gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency, gpu.kernel_launch_us * 1e-6
    logits = 8192 * 128_256
    assert b.elem_f[0] - a.elem_f[0] == pytest.approx(28 * logits / bw + 3 * launch, rel=1e-9)
    assert b.elem_b[0] - a.elem_b[0] == pytest.approx(6 * logits / bw + 1 * launch, rel=1e-9)
    assert (b.gemm_f[0], b.gemm_b[0]) == (a.gemm_f[0], a.gemm_b[0])


def test_deterministic_megatron_runs_the_loss_unfused():
    """Megatron-LM's --deterministic-mode requires cross_entropy_loss_fusion False (megatron/training/
    determinism.py ARG_VALUES_REQUIRED_FOR_DETERMINISM); its CI tests' stack says so, the default stack fuses
    it (NeMo 2 GPTConfig cross_entropy_loss_fusion True), and a compiled torchtitan compiles the loss with
    its blocks while an eager one runs it unfused."""
    det = load_stack(str(data_dir("runs") / "stacks" / "megatron-core-deterministic.yaml"))
    assert det.kernels.deterministic and "loss" not in det.kernels.fused_ops
    assert "loss" in load_stack("megatron-core").kernels.fused_ops
    titan = load_stack("torchtitan")
    assert "loss" not in titan.kernels.fused_ops and titan.memory.loss_compiled
    compiled, eager = (compute.head_time(Ctx.build(LLAMA8, load_cluster("h100", gpus=8),
                                                   _ctx("megatron-core").lay, stack=titan.with_compile(c)))
                       for c in (True, False))
    assert compiled.elem_f[0] < eager.elem_f[0]
