"""`parplan models list|show`."""

from __future__ import annotations

from typing import Annotated

import typer

from parplan.cli._options import JsonOpt
from parplan.cli._output import Column, console, fitted_table, human_count, kv_table, print_json

app = typer.Typer(help="Model presets and model files.", no_args_is_help=True)



@app.command("list")
def list_models(json_out: JsonOpt = False) -> None:
    """List the model presets shipped with parplan."""
    from parplan.models.presets import load_model, preset_names

    rows = [load_model(name).summary() for name in preset_names()]
    if json_out:
        print_json({"models": rows})
        return
    columns = [Column("name", left=True), Column("family", left=True, drop=3), Column("params"), Column("active"),
               Column("layers", "L"), Column("hidden", "h", drop=1), Column("heads/kv", "a/kv", drop=2),
               Column("experts")]
    cells = [[str(r["name"]), str(r["family"]), human_count(r["params"]), human_count(r["active_params"]),
              str(r["layers"]), str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}",
              f"{r['experts']} top-{r['top_k']}" if r["experts"] else "-"] for r in rows]
    console.print(fitted_table("Model presets (any HF config.json or parplan YAML file also works)",
                               [(columns, cells)]))


@app.command("show")
def show_model(
    name: Annotated[str, typer.Argument(help="Preset name, HF config.json or parplan YAML file.")],
    json_out: JsonOpt = False,
) -> None:
    """Show a model's dimensions, parameter counts and FLOPs per token."""
    from parplan.models.presets import load_model

    model = load_model(name)
    s = model.summary()
    if json_out:
        print_json(s)
        return
    rows = [
        ("name", s["name"]),
        ("family", s["family"]),
        ("parameters", f"{s['params']:,} ({human_count(s['params'])})"),
        ("active per token", f"{s['active_params']:,} ({human_count(s['active_params'])})"),
        ("embedding + head", f"{s['embedding_params']:,}"),
        ("layers", s["layers"]),
        ("hidden", s["hidden"]),
        ("attention", f"{s['attention']}: {s['heads']} heads, {s['kv_heads']} kv heads, head_dim {s['head_dim']}"),
        ("mlp", f"{'gated' if s['gated_mlp'] else 'plain'}, ffn {s['ffn']}"),
        ("vocab", f"{s['vocab']} ({'tied' if s['tied_embeddings'] else 'untied'} embeddings)"),
        ("norm / positions", f"{s['norm']} / {s['position']} (max {s['max_position']})"),
    ]
    if s["experts"]:
        rows.append(("experts", f"{s['experts']} routed, top-{s['top_k']}, ffn {s['expert_ffn']}, "
                                f"{s['shared_experts']} shared, {s['moe_layers']} MoE layers"))
    if s["mtp_layers"]:
        rows.append(("MTP layers", f"{s['mtp_layers']} ({s['mtp_params']:,} own parameters)"))
    if s["sliding_window"]:
        rows.append(("sliding window", s["sliding_window"]))
    mtp = ", MTP included" if s["mtp_layers"] else ""
    rows.append(("training FLOPs/token", f"{s['training_gflops_per_token_4k']:.1f} GFLOP at seq 4096 "
                                         f"(fwd+bwd, causal attention{mtp})"))
    console.print(kv_table(f"Model {s['name']}", rows))
