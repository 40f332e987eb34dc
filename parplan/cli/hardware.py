"""`parplan hardware list|show`."""

from __future__ import annotations

from typing import Annotated

import typer

from parplan.cli._options import JsonOpt
from parplan.cli._output import Column, console, fitted_table, kv_table, print_json
from parplan.limits import MAX_GPUS

app = typer.Typer(help="Cluster presets and cluster files.", no_args_is_help=True)



@app.command("list")
def list_hardware(json_out: JsonOpt = False) -> None:
    """List the cluster presets shipped with parplan."""
    from parplan.hardware.presets import load_cluster, preset_names

    clusters = [load_cluster(n) for n in preset_names()]
    if json_out:
        print_json({"clusters": [c.summary() for c in clusters]})
        return
    columns = [Column("name", left=True), Column("GPU", left=True, wrap=True), Column("bf16 TF", "bf16"),
               Column("fp8 TF", "fp8"), Column("HBM GiB", "HBM"), Column("GPUs/node", "/node"),
               Column("scale-up GB/s", "scale-up"), Column("NIC GB/s", "NIC")]
    rows = [[c.name, c.gpu.name.replace("NVIDIA ", "").replace("AMD Instinct ", ""), f"{c.gpu.peak_tflops['bf16']:g}",
             f"{c.gpu.peak_tflops['fp8']:g}" if c.gpu.supports_fp8 else "-", f"{c.gpu.hbm_gib:g}",
             str(c.gpus_per_node), f"{c.scaleup.bandwidth_gbps:g}", f"{c.scaleout.bandwidth_gbps:g}"]
            for c in clusters]
    console.print(fitted_table("Cluster presets (a cluster YAML file also works; --gpus sets the size; TFLOP/s "
                               "dense, GB/s per GPU and direction)", [(columns, rows)]))


@app.command("show")
def show_hardware(
    name: Annotated[str, typer.Argument(help="Preset name or cluster YAML file.")],
    gpus: Annotated[int | None, typer.Option(help="Total GPUs in the job.", min=1, max=MAX_GPUS)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a cluster's GPU, links and where every number comes from."""
    from parplan.hardware.presets import load_cluster

    c = load_cluster(name, gpus=gpus)
    if json_out:
        print_json(c.summary())
        return
    g = c.gpu
    rows = [
        ("cluster", f"{c.name}: {c.description}"),
        ("GPUs", f"{c.gpus} ({c.nodes} nodes of {c.gpus_per_node}; scale-up domain {c.scaleup_domain})"),
        ("GPU", f"{g.name} ({g.arch}, {g.sm_count} SMs)"),
        ("peak TFLOP/s (dense)", ", ".join(f"{k} {v:g}" for k, v in g.peak_tflops.items())),
        ("best GEMM / peak", ", ".join(f"{k} {v:.1%}" for k, v in g.gemm_peak_fraction.items())),
        ("memory", f"{g.hbm_gib:g} GiB at {g.hbm_tbps:g} TB/s"),
        ("flash attention / peak", f"fwd {g.attention_fwd_fraction:.0%}, bwd {g.attention_bwd_fraction:.0%}"),
        ("host", f"{g.host_link_gbps:g} GB/s/dir GPU-host link, {g.host_memory_gbps:g} GB/s of host memory per GPU "
                 "(what offloading moves over)"),
        ("scale-up", f"{c.scaleup.name}: {c.scaleup.bandwidth_gbps:g} GB/s/dir, ring busbw "
                     f"{c.scaleup.busbw_gbps:g}" + (f", all-reduce busbw {c.scaleup.allreduce_busbw_gbps:g}"
                                                    if c.scaleup.allreduce_busbw_gbps else "")
                     + f", ring step {c.scaleup.ring_step_us:g} µs"),
        ("scale-out", f"{c.scaleout.name}: {c.scaleout.bandwidth_gbps:g} GB/s/dir per GPU, achieved "
                      f"{c.scaleout.busbw_gbps:g}, ring step {c.scaleout.ring_step_us:g} µs"),
    ]
    console.print(kv_table(f"Cluster {c.name}", rows))
    if c.measured:
        cells = []
        for key, note in c.measured.items():
            section, _, name = key.partition(".")
            value = getattr(getattr(c, section, None), name, "") if section in ("gpu", "scaleup", "scaleout") else ""
            cells.append([key, f"{value:.4g}" if isinstance(value, float) else str(value), note])
        columns = [Column("field", left=True, wrap=True), Column("value", left=True, wrap=True),
                   Column("how", left=True, wrap=True)]
        console.print(fitted_table("Measured on this system (hardware profile)", [(columns, cells)]))
    if c.sources:
        title = "Assumed from datasheets and published measurements" if c.measured else "Sources"
        cells = [[key, value] for key, value in c.sources.items() if key not in c.measured]
        columns = [Column("field", left=True, wrap=True), Column("source", left=True, wrap=True)]
        console.print(fitted_table(title, [(columns, cells)]))
