"""`parplan bench ...`, `parplan hardware import-nccl-tests`: measure, fit, and write a hardware profile.

torch is needed only here (`pip install 'parplan[bench]'`); the planner never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from parplan._input import check_output, exists, read_text
from parplan.cli._options import JsonOpt, int_spec
from parplan.cli._output import Column, console, err_console, fitted_table, print_json
from parplan.errors import ConfigError
from parplan.limits import MAX_GPUS, SPEC_VALUES

if TYPE_CHECKING:
    from parplan.hardware.samples import ProfileSamples

app = typer.Typer(help="Measure this machine (torch): GEMMs, attention, memory, collectives.",
                  no_args_is_help=True)

ClusterBase = Annotated[str, typer.Option("--cluster", "-c", help="Preset the profile starts from (its peaks).")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Profile YAML to create or add the samples to.")]
DeviceOpt = Annotated[str | None, typer.Option(help="torch device (default: cuda when present, else cpu).")]


def _sweep(items: Sequence[Any], run: Callable[[Any], list], label: str, quiet: bool) -> list:
    """Run one measurement per item under a progress bar (on stderr)."""
    out: list = []
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=quiet) as bar:
        task = bar.add_task(label, total=len(items))
        for item in items:
            out += run(item)
            bar.advance(task)
    return out


def _samples(kind: str, items: list, env: dict[str, Any]) -> ProfileSamples:
    from parplan.hardware.samples import ProfileSamples

    return ProfileSamples(date=env["date"], device=env["device"], torch_version=env.get("torch_version"),
                          nccl_version=env.get("nccl_version"), **{kind: tuple(items)})


def _check_out(out: Path | None, env: dict[str, Any] | None = None) -> None:
    """Refuse --out before measuring: a CPU run (its numbers cannot stand for a GPU's, so nothing would be
    fitted or written), a path that cannot be written, or an existing file that is not a readable profile."""
    if out is None:
        return
    if env is not None and env["device"] == "cpu":
        raise ConfigError("a CPU run is not fitted into a GPU profile, so nothing would be written: run on a GPU "
                          "or drop --out", file=str(out))
    check_output(out)
    if exists(out):
        from parplan.hardware.profile import read_profile

        read_profile(out)


def _save(out: Path | None, base: str, profile: ProfileSamples) -> dict[str, Any] | None:
    """Add the samples to the profile at `out` (checked by `_check_out`), refit it, and say what it sets."""
    if out is None:
        return None
    from parplan.hardware.profile import write_profile

    cluster = write_profile(out, base, profile)
    console.print(f"wrote {out}: fitted {', '.join(sorted(cluster.measured)) or 'nothing yet'}", highlight=False,
                  markup=False)
    return cluster.measured


MAX_MESSAGE = 1 << 34
"""Largest collective message the bench sends, bytes (16 GiB: beyond any GPU's share of a real sweep)."""


def _sizes(text: str) -> list[int]:
    """'1K..1G' (powers of two) or a list '4096,65536'; K/M/G = 2^10/2^20/2^30 as in nccl-tests. A malformed
    size, or one outside 1..16G, is a usage error."""
    from parplan.planner.api import parse_doubling_spec

    def parse(token: str) -> int:
        token = token.strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(token[-1:], 1)
        size = float(token.rstrip("KMG")) * scale
        if not 1 <= size <= MAX_MESSAGE:
            raise ValueError(token)
        return int(size)

    try:
        sizes = parse_doubling_spec(text, parse)
    except ValueError:
        raise typer.BadParameter("expected sizes such as 1K..1G or 4096,65536, each in 1..16G",
                                 param_hint="--sizes") from None
    if not sizes:
        raise typer.BadParameter("no size in the range", param_hint="--sizes")
    return sizes


@app.command("gemm")
def bench_gemm(
    cluster: ClusterBase = "h100",
    model: Annotated[str, typer.Option(help="Time this model's per-layer GEMM shapes.")] = "llama3.1-8b",
    tp: Annotated[int, typer.Option(min=1, max=SPEC_VALUES, help="Tensor parallelism the shapes are split by.")] = 1,
    tokens: Annotated[str, typer.Option(metavar="LIST", callback=int_spec(1, 2**20),
                                        help="Micro-batch token counts (list).")] = "2048,4096,8192",
    dtype: Annotated[str, typer.Option(help="bf16, fp16, fp8, tf32 (list).")] = "bf16",
    repeats: Annotated[int, typer.Option(min=1, max=10_000, help="Timed runs per shape.")] = 20,
    device: DeviceOpt = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Time the matrix products the cost model uses and report TFLOP/s against the peak."""
    from parplan.hardware.bench import environment
    from parplan.hardware.bench.gemm import default_gemm_shapes, run_gemm
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.planner.api import parse_int_spec

    spec = load_cluster(cluster)
    dtypes = [d.strip() for d in dtype.split(",")]
    shapes = default_gemm_shapes(load_model(model), tp, list(parse_int_spec(tokens, "tokens") or ()))
    env = environment(device)
    _check_out(out, env)
    on_cpu = env["device"] == "cpu"
    if on_cpu:
        # A CPU cannot stand in for the GPU curve: keep a few small shapes so the run stays short.
        shapes = [s for s in shapes if s[0] * s[1] * s[2] <= 2**30][:4] or shapes[:2]
    samples = _sweep(shapes, lambda shape: run_gemm([shape], dtypes, repeats=repeats, device=device),
                     "GEMM shapes", json_out)
    rows = [{"m": s.m, "n": s.n, "k": s.k, "dtype": s.dtype, "time_us": s.time_us, "tflops": s.tflops,
             "efficiency": None if on_cpu or s.dtype not in spec.gpu.peak_tflops
             else s.tflops / spec.gpu.peak_tflops[s.dtype]} for s in samples]
    measured = _save(out, cluster, _samples("gemm", samples, env))
    if json_out:
        print_json({"device": env["device"], "samples": rows, "measured": measured})
        return
    columns = [Column("m"), Column("n"), Column("k"), Column("dtype"), Column("µs"), Column("TFLOP/s"),
               Column("of peak")]
    cells = [[str(r["m"]), str(r["n"]), str(r["k"]), r["dtype"], f"{r['time_us']:.1f}", f"{r['tflops']:.2f}",
              "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}"] for r in rows]
    console.print(fitted_table(f"GEMM on {env['device']}", [(columns, cells)]))


@app.command("attention")
def bench_attention(
    cluster: ClusterBase = "h100",
    seq: Annotated[str, typer.Option(metavar="LIST", callback=int_spec(1, 2**20),
                                     help="Sequence lengths (list).")] = "1024,2048,4096,8192",
    heads: Annotated[int, typer.Option(min=1, max=1024, help="Attention heads.")] = 32,
    head_dim: Annotated[int, typer.Option(min=1, max=1024, help="Per-head dimension.")] = 128,
    batch: Annotated[int, typer.Option(min=1, max=1024, help="Sequences.")] = 1,
    device: DeviceOpt = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Time scaled_dot_product_attention forward and backward (causal)."""
    from parplan.hardware.bench import environment
    from parplan.hardware.bench.attention import run_attention
    from parplan.hardware.efficiency import FLASH_BACKWARD_FLOPS
    from parplan.hardware.fit import attention_flops
    from parplan.hardware.presets import load_cluster
    from parplan.planner.api import parse_int_spec

    load_cluster(cluster)
    env = environment(device)
    _check_out(out, env)
    lengths = list(parse_int_spec(seq, "seq") or ())
    if env["device"] == "cpu":
        lengths = [s for s in lengths if s <= 1024] or [256]
        heads = min(heads, 4)
    samples = _sweep(lengths, lambda s: run_attention([(batch, heads, s, head_dim)], device=device), "sequences",
                     json_out)
    measured = _save(out, cluster, _samples("attention", samples, env))
    rows = [{"seq": s.seq, "fwd_us": s.fwd_us, "bwd_us": s.bwd_us,
             "fwd_tflops": attention_flops(s) / s.fwd_us / 1e6,
             "bwd_tflops": FLASH_BACKWARD_FLOPS * attention_flops(s) / s.bwd_us / 1e6}
            for s in samples]
    if json_out:
        print_json({"device": env["device"], "samples": rows, "measured": measured})
        return
    columns = [Column("seq"), Column("fwd µs"), Column("bwd µs"), Column("fwd TFLOP/s"), Column("bwd TFLOP/s")]
    cells = [[str(r["seq"]), f"{r['fwd_us']:.1f}", f"{r['bwd_us']:.1f}", f"{r['fwd_tflops']:.2f}",
              f"{r['bwd_tflops']:.2f}"] for r in rows]
    console.print(fitted_table(f"Attention on {env['device']} (heads {heads}, head_dim {head_dim})",
                               [(columns, cells)]))


@app.command("memory")
def bench_memory(
    cluster: ClusterBase = "h100",
    device: DeviceOpt = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Time large copies: achieved memory bandwidth against the datasheet."""
    from parplan.hardware.bench import environment
    from parplan.hardware.bench.memory import run_memory
    from parplan.hardware.presets import load_cluster

    peak = load_cluster(cluster).gpu.hbm_tbps * 1e3
    env = environment(device)
    _check_out(out, env)
    samples = run_memory(device=device) if env["device"] != "cpu" else run_memory([1 << 20, 1 << 24], device=device)
    measured = _save(out, cluster, _samples("memory", samples, env))
    rows = [{"size_bytes": s.size_bytes, "time_us": s.time_us, "gbps": s.gbps,
             "of_datasheet": None if env["device"] == "cpu" else s.gbps / peak} for s in samples]
    if json_out:
        print_json({"device": env["device"], "samples": rows, "measured": measured})
        return
    columns = [Column("bytes"), Column("µs"), Column("GB/s"), Column("of datasheet")]
    cells = [[f"{r['size_bytes']:,}", f"{r['time_us']:.1f}", f"{r['gbps']:.1f}",
              "-" if r["of_datasheet"] is None else f"{r['of_datasheet']:.1%}"] for r in rows]
    console.print(fitted_table(f"Memory copy on {env['device']}", [(columns, cells)]))


def _collective_table(title: str, samples: list) -> Table:
    columns = [Column("collective", left=True), Column("ranks"), Column("per node", "/node"), Column("bytes"),
               Column("µs"), Column("algbw GB/s", "algbw"), Column("busbw GB/s", "busbw")]
    cells = [[s.collective, str(s.ranks), str(s.ranks_per_node), f"{s.size_bytes:,}", f"{s.time_us:.1f}",
              f"{s.algbw_gbps:.2f}", f"{s.busbw_gbps:.2f}"] for s in samples]
    return fitted_table(title, [(columns, cells)])


def _collective_rows(samples: list) -> list[dict[str, Any]]:
    return [{"collective": s.collective, "ranks": s.ranks, "ranks_per_node": s.ranks_per_node,
             "size_bytes": s.size_bytes, "time_us": s.time_us, "algbw_gbps": s.algbw_gbps,
             "busbw_gbps": s.busbw_gbps, "in_place": s.in_place} for s in samples]


@app.command("comm")
def bench_comm(
    cluster: ClusterBase = "h100",
    collectives: Annotated[str, typer.Option(help="all_reduce, all_gather, reduce_scatter, all_to_all, "
                                                  "send_recv (list).")] = "all_reduce,all_gather",
    sizes: Annotated[str | None, typer.Option(help="1K..1G or a list (default 1K..1G on GPUs, 1K..512K on CPU).")]
    = None,
    nproc: Annotated[int | None, typer.Option(min=2, max=1024,
                                              help="Processes on this node (default: GPUs, or 2 on CPU).")]
    = None,
    backend: Annotated[str | None, typer.Option(help="nccl or gloo (default: nccl with GPUs).")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """All-reduce, all-gather, reduce-scatter, all-to-all and send/recv over torchrun processes (nccl-tests
    conventions for algbw/busbw). For several nodes, run it on every node with torchrun's rendezvous."""
    from parplan.hardware.bench import environment
    from parplan.hardware.bench.comm import run_comm
    from parplan.hardware.presets import load_cluster

    if backend not in (None, "nccl", "gloo"):
        raise typer.BadParameter("must be nccl or gloo", param_hint="--backend")
    names = [c.strip() for c in collectives.split(",")]
    message_sizes = _sizes(sizes) if sizes else None
    load_cluster(cluster)
    env = environment()
    _check_out(out, env)
    samples = run_comm(names, message_sizes, nproc_per_node=nproc, backend=backend)
    measured = _save(out, cluster, _samples("collectives", samples, env))
    if json_out:
        print_json({"device": env["device"], "samples": _collective_rows(samples), "measured": measured})
        return
    console.print(_collective_table(f"Collectives ({backend or 'auto'}) on {env['device']}", samples))


def import_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files.")],
    cluster: ClusterBase = "h100",
    collective: Annotated[str | None, typer.Option(help="When the log does not name it (all_reduce, ...).")] = None,
    ranks: Annotated[int | None, typer.Option(min=1, max=MAX_GPUS, help="When the log does not list its devices.")]
    = None,
    ranks_per_node: Annotated[int | None, typer.Option(min=1, max=MAX_GPUS, help="GPUs per node in the run.")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Parse nccl-tests logs (every format generation) into samples, fit α and busbw, write a profile."""
    from parplan.hardware.fit import fit_collectives
    from parplan.hardware.nccl_tests import nccl_version, parse_nccl_tests
    from parplan.hardware.presets import load_cluster
    from parplan.hardware.samples import ProfileSamples

    load_cluster(cluster)
    _check_out(out)
    samples = []
    version = None
    for log in logs:
        text = read_text(log, errors="replace")
        samples += parse_nccl_tests(text, source=str(log), collective=collective, ranks=ranks,
                                    ranks_per_node=ranks_per_node)
        version = version or nccl_version(text)
    import datetime

    profile = ProfileSamples(date=datetime.date.today().isoformat(), device=f"nccl-tests logs ({len(logs)})",
                             nccl_version=version, collectives=tuple(samples))
    measured = _save(out, cluster, profile)
    fits = fit_collectives(samples)
    doc = {"samples": len(samples), "fits": [{"collective": k[0], "ranks": k[1], "ranks_per_node": k[2],
                                              "alpha_us": f.alpha_us, "busbw_gbps": f.busbw_gbps,
                                              "rms_rel_error": f.rms_rel_error} for k, f in fits.items()],
           "measured": measured}
    if json_out:
        print_json(doc)
        return
    columns = [Column("collective", left=True), Column("ranks"), Column("per node", "/node"), Column("α µs"),
               Column("busbw GB/s", "busbw"), Column("rms error", "rms")]
    cells = [[f["collective"], str(f["ranks"]), str(f["ranks_per_node"]), f"{f['alpha_us']:.1f}",
              f"{f['busbw_gbps']:.1f}", f"{f['rms_rel_error']:.1%}"] for f in doc["fits"]]
    console.print(fitted_table(f"{len(samples)} samples from {len(logs)} log(s): α-β fits", [(columns, cells)]))
