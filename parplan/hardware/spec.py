"""What it runs on: GPU, node and cluster descriptions.

Conventions (``reference/hardware.md``): TFLOP/s are dense (no 2:4 sparsity); link bandwidths are GB/s
(1e9 B/s) **per GPU per direction**; "busbw" is nccl-tests' bus bandwidth (PERFORMANCE.md). Every preset
number carries its source in the preset file's `sources` table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from parplan._mapping import require
from parplan.limits import MAX_GPUS

DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32")
GPU_ARCHES = ("ampere", "hopper", "blackwell", "cdna3")
"""GPU architectures (GPUSpec.arch): what the engines' kernel facts are keyed by (serving/engines.py)."""
_HUGE = 1e9
"""Upper bound of every hardware quantity in its unit (TFLOP/s, GB/s, GiB, µs): a million times today's
GPUs and links, so only the absurd is refused, and products of such numbers stay finite."""


def _positive(value: float | None, optional: bool = False) -> bool:
    return (optional and value is None) or (value is not None and 0 < value <= _HUGE)


def _non_negative(value: float | None, optional: bool = False) -> bool:
    return (optional and value is None) or (value is not None and 0 <= value <= _HUGE)


def _fraction(value: float) -> bool:
    return 0 < value <= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUSpec:
    name: str
    """Marketing name, e.g. 'NVIDIA H100 SXM5 80GB'."""
    arch: str
    """One of GPU_ARCHES: which generation of the engines' kernels runs on it (Engine.moe_gemm_fraction,
    gdn_prefill_fraction)."""
    sm_count: int
    """Streaming multiprocessors (compute units on AMD); sets GEMM wave quantisation."""
    peak_tflops: dict[str, float]
    """Dense tensor-core peak per dtype, TFLOP/s; a dtype the GPU lacks is absent."""
    hbm_gib: float
    """Memory capacity, GiB."""
    hbm_tbps: float
    """Memory bandwidth, TB/s (1e12 B/s)."""
    hbm_efficiency: float = 0.85
    """Fraction of hbm_tbps that memory-bound kernels reach."""
    gemm_peak_fraction: dict[str, float] = field(default_factory=dict)
    """Best measured GEMM throughput / peak per dtype, reached at `gemm_best_shape`: MAMF's (ml-engineering), or
    where it measured none a figure from the serving engines' collectors' best GEMMs (data/hardware/SOURCES.md)."""
    gemm_best_shape: tuple[int, int, int] = (4096, 4096, 4096)
    """M, N, K at which gemm_peak_fraction was measured; the curve's ceiling is backed out of it."""
    gemm_tile: tuple[int, int] = (128, 256)
    """Output tile (rows, columns) of the GEMM kernels, for tile and wave quantisation."""
    gemm_tile_overhead_us: float = 3.0
    """Time per tile outside the K loop (epilogue store of the bf16 tile at the SM's share of HBM
    bandwidth, pipeline fill), microseconds."""
    kernel_launch_us: float = 4.0
    """Fixed cost of every kernel on the GPU (launch, ramp-up and tail), microseconds: cuBLAS reaches
    1006 TFLOP/s on a 2048³ bf16 GEMM on B200 where the tile model alone gives 1301 (pyptx.dev
    performance page); the 4 µs difference is this overhead."""
    attention_fwd_fraction: float = 0.6
    """Flash-attention forward throughput / bf16 peak at long sequence."""
    attention_bwd_fraction: float = 0.45
    """Flash-attention backward throughput / bf16 peak at long sequence (FLOPs counted as 2.5× forward)."""
    attention_kernel_fwd: dict[str, float] = field(default_factory=dict)
    """Forward throughput / bf16 peak at long sequence of flash-attention kernel generations slower than this
    GPU's best (stacks.spec.ATTENTION_KERNELS, e.g. {fa2: 0.35} on Hopper); a kernel not listed runs at
    attention_fwd_fraction."""
    attention_kernel_bwd: dict[str, float] = field(default_factory=dict)
    """Backward counterpart of attention_kernel_fwd (FLOPs counted as 2.5× forward)."""
    attention_half_seq: int = 650
    """Sequence length at which flash attention reaches half of its long-sequence throughput, tokens."""
    host_link_gbps: float = 64.0
    """GPU-to-host bandwidth per direction, GB/s (PCIe 5.0 x16 unless the preset says otherwise): what offloading
    optimizer states or activations to host memory moves over."""
    host_memory_gbps: float = 77.0
    """Host DRAM bandwidth of one GPU's share of the node's CPUs, GB/s: what a CPU optimizer step streams over
    (default: a DGX H100's two 8-channel DDR5-4800 sockets, 614 GB/s, over 8 GPUs)."""

    def __post_init__(self) -> None:
        unknown = [key for key in (*self.peak_tflops, *self.gemm_peak_fraction) if key not in DTYPES]
        require([
            ("peak_tflops", not unknown,
             f"unknown dtype '{unknown[0] if unknown else ''}'; known: {', '.join(DTYPES)}"),
            ("arch", self.arch in GPU_ARCHES, f"expected one of {', '.join(GPU_ARCHES)}, got {self.arch!r}"),
            ("peak_tflops.bf16", "bf16" in self.peak_tflops, "bf16 peak is required"),
            *((f"peak_tflops.{k}", _positive(v), f"must be positive (at most {_HUGE:g}), got {v!r}")
              for k, v in self.peak_tflops.items()),
            *((f"gemm_peak_fraction.{k}", _fraction(v), f"must lie in (0, 1], got {v!r}")
              for k, v in self.gemm_peak_fraction.items()),
            ("sm_count", 1 <= self.sm_count <= 2**20, f"must lie in 1..{2**20:,}, got {self.sm_count!r}"),
            ("hbm_gib", _positive(self.hbm_gib), f"must be positive, got {self.hbm_gib!r}"),
            ("hbm_tbps", _positive(self.hbm_tbps), f"must be positive, got {self.hbm_tbps!r}"),
            ("hbm_efficiency", _fraction(self.hbm_efficiency), f"must lie in (0, 1], got {self.hbm_efficiency!r}"),
            ("gemm_best_shape", all(1 <= v <= 2**24 for v in self.gemm_best_shape), "must be positive sizes"),
            ("gemm_tile", all(1 <= v <= 2**16 for v in self.gemm_tile), "must be positive sizes"),
            ("gemm_tile_overhead_us", _non_negative(self.gemm_tile_overhead_us), "must be >= 0"),
            ("kernel_launch_us", _non_negative(self.kernel_launch_us), "must be >= 0"),
            ("attention_fwd_fraction", _fraction(self.attention_fwd_fraction), "must lie in (0, 1]"),
            ("attention_bwd_fraction", _fraction(self.attention_bwd_fraction), "must lie in (0, 1]"),
            ("attention_half_seq", 0 <= self.attention_half_seq <= 2**30, "must lie in 0..2^30 tokens"),
        ])

    @property
    def supports_fp8(self) -> bool:
        return "fp8" in self.peak_tflops

    @property
    def supports_fp4(self) -> bool:
        """FP4 tensor cores (Blackwell NVFP4/MXFP4); elsewhere 4-bit weights are dequantised for the GEMM."""
        return "fp4" in self.peak_tflops


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One level of the network as seen by one GPU."""

    name: str
    """e.g. 'NVLink4 + NVSwitch' or '400G NDR InfiniBand'."""
    bandwidth_gbps: float
    """Line rate per GPU per direction, GB/s."""
    busbw_gbps: float
    """Achieved ring bus bandwidth for large messages (nccl-tests busbw), GB/s."""
    allreduce_busbw_gbps: float | None = None
    """All-reduce bus bandwidth when the switch reduces in-network (NVLS/SHARP); None = ring."""
    ring_step_us: float = 3.4
    """Latency of one ring step over this link, microseconds (NCCL 2.30 tuning.cc hwLat, Simple protocol:
    NVLink 3.4, PCIe 5.7, network 14.0)."""
    tree_step_us: float = 4.0
    """Latency of one tree level over this link, microseconds (NCCL hwLat Tree/Simple: NVLink 4.0, net 14.0)."""
    nvls_us: float | None = None
    """Latency of an in-switch (NVLS) reduction over this link, microseconds (NCCL: NVLink 25, net 18)."""
    per_peer_gbps: float | None = None
    """Full-mesh fabrics (MI300X xGMI): bandwidth to one peer, GB/s; a group of g GPUs gets (g-1)×."""
    one_shot_allreduce: bool = True
    """Whether the serving engines' own one-shot all-reduce kernels (peer-to-peer writes into every rank's buffer)
    run over this link: over NVLink and xGMI they do; over PCIe vLLM and SGLang turn them off beyond two GPUs
    (vllm custom_all_reduce.py: 'not supported on more than two PCIe-only GPUs'), so a TP all-reduce of more than
    two is NCCL's (StepModel.all_reduce)."""
    symmetric_memory: bool = True
    """Whether the GPUs of one domain map each other's memory over this link (NVLink symmetric memory, VMM handles
    over the NVLink fabric): the one-sided MoE all-to-all runs only then ('This works within a single NVLink domain',
    TensorRT-LLM blog18; hardware.nvlink_alltoall); over PCIe the MoE exchange is NCCL's."""

    def __post_init__(self) -> None:
        require([
            ("bandwidth_gbps", _positive(self.bandwidth_gbps), f"must be positive, got {self.bandwidth_gbps!r}"),
            ("busbw_gbps", _positive(self.busbw_gbps), f"must be positive, got {self.busbw_gbps!r}"),
            ("allreduce_busbw_gbps", _positive(self.allreduce_busbw_gbps, optional=True), "must be positive"),
            ("per_peer_gbps", _positive(self.per_peer_gbps, optional=True), "must be positive"),
            ("ring_step_us", _non_negative(self.ring_step_us), f"must be >= 0, got {self.ring_step_us!r}"),
            ("tree_step_us", _non_negative(self.tree_step_us), f"must be >= 0, got {self.tree_step_us!r}"),
            ("nvls_us", _non_negative(self.nvls_us, optional=True), "must be >= 0"),
        ])


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """The few global knobs that `parplan calibrate` fits to a user's measured steps (defaults: priors)."""

    compute_scale: float = 1.0
    """Multiplies every GEMM and attention efficiency (1.0 = the measured-kernel curves as they are)."""
    nvlink_overlap_cost: float = 0.15
    """Share of compute throughput lost while NVLink communication overlaps it (Calculon's processor_usage
    for NVLink tiers, systems/*.json)."""
    nic_overlap_cost: float = 0.15
    """Same for communication over the NIC. NCCL drives cross-node collectives with SM kernels too (one CTA
    per channel, the data staged through HBM), so the share is the NVLink one: DeepSeek-V3 §3.2.2 gives 20 of
    the H800's 132 SMs (15%) to communication kernels. (Calculon's 2% for InfiniBand tiers left fms-fsdp's
    and MaxText's FSDP traffic free.)"""

    def __post_init__(self) -> None:
        require([
            ("compute_scale", 0.01 <= self.compute_scale <= 100, f"must lie in 0.01..100, got {self.compute_scale!r}"),
            ("nvlink_overlap_cost", 0 <= self.nvlink_overlap_cost < 1, "must lie in [0, 1)"),
            ("nic_overlap_cost", 0 <= self.nic_overlap_cost < 1, "must lie in [0, 1)"),
        ])


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    description: str
    gpu: GPUSpec
    gpus: int
    """Total GPUs in the job."""
    gpus_per_node: int
    """GPUs per server (a GB200 NVL72 tray holds 4)."""
    scaleup_domain: int
    """GPUs that reach each other over the scale-up fabric (8 for HGX, 72 for GB200 NVL72)."""
    scaleup: LinkSpec
    """NVLink / xGMI inside the scale-up domain."""
    scaleout: LinkSpec
    """NIC per GPU between scale-up domains."""
    calibration: Calibration = field(default_factory=Calibration)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Field path -> where the number comes from."""
    measured: dict[str, str] = field(default_factory=dict, compare=False)
    """Field path -> the measurement that set it (hardware profiles); other numbers are the preset's."""
    source: str = field(default="", compare=False)
    """Preset name or file path."""

    def __post_init__(self) -> None:
        require([
            ("gpus", 1 <= self.gpus <= MAX_GPUS, f"must lie in 1..{MAX_GPUS:,}, got {self.gpus!r}"),
            ("node.gpus_per_node", 1 <= self.gpus_per_node <= 2**16,
             f"must lie in 1..{2**16:,}, got {self.gpus_per_node!r}"),
            ("node.scaleup_domain", 1 <= self.scaleup_domain <= MAX_GPUS
             and self.scaleup_domain % self.gpus_per_node == 0,
             f"must be a positive multiple of gpus_per_node ({self.gpus_per_node}), got {self.scaleup_domain!r}"),
        ], file=self.source or None)

    def with_gpus(self, gpus: int) -> ClusterSpec:
        """The same cluster with another total GPU count (`--gpus N`)."""
        return dataclasses.replace(self, gpus=gpus)

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def multi_node_nvlink(self) -> bool:
        """Whether the scale-up domain spans servers (MNNVL: a GB200/GB300 NVL72 rack of 4-GPU trays), which is
        what engines test before taking their rack-scale kernels."""
        return self.scaleup_domain > self.gpus_per_node

    def summary(self) -> dict[str, object]:
        g = self.gpu
        return {
            "name": self.name,
            "description": self.description,
            "gpu": g.name,
            "arch": g.arch,
            "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "scaleup_domain": self.scaleup_domain,
            "peak_tflops": dict(g.peak_tflops),
            "gemm_peak_fraction": dict(g.gemm_peak_fraction),
            "hbm_gib": g.hbm_gib,
            "hbm_tbps": g.hbm_tbps,
            "sm_count": g.sm_count,
            "scaleup": dataclasses.asdict(self.scaleup),
            "scaleout": dataclasses.asdict(self.scaleout),
            "calibration": dataclasses.asdict(self.calibration),
            "sources": dict(self.sources),
            "measured": dict(self.measured),
        }
