"""A corpus of hostile inputs: every input kind and command, as a new user or a careless script meets them.

Each `Case` is one command line, the input files it reads (written into a fresh folder), the exit code the
README promises (0 ok, 1 input error naming the file and field, 2 usage error, 3 no feasible plan) and a
fragment of the message. tests/test_hostile.py runs every case in-process through `parplan.cli.main` and
also checks what holds for all of them: no traceback, no "internal error", with --json exactly one JSON
document on stdout on success and nothing on failure, and no output file left behind by a failure.

Adding an input kind (a stack file, a serving data file): write a `<kind>_cases()` function that returns
Cases built from a valid base document with one defect each (the `mutations` helper does the per-field
matrix, `file_level_cases` the encoding, size, nesting and path defects), and add it to `KINDS`.

Placeholders in `Case.args`: `{f}` is the primary input file (written from `Case.content` with
`Case.suffix`), `{tmp}` the case's folder (where `Case.files` are written too).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from parplan._resources import data_dir

NAN = float("nan")
INF = float("inf")


@dataclass(frozen=True)
class Raw:
    """A token written as is into a JSON or YAML document (1e400, NaN, a 5,000-digit integer)."""

    text: str


@dataclass(frozen=True)
class Case:
    kind: str
    """The input kind the case attacks ('hf', 'model-yaml', 'cluster', 'runs', 'plan', ...)."""
    name: str
    """What is wrong, unique within the kind."""
    args: tuple[str, ...]
    """The command line, with the {f} and {tmp} placeholders."""
    code: int
    """Expected exit code."""
    fragment: str = ""
    """Expected in stderr when the command fails, in stdout when it succeeds."""
    content: str | bytes | None = None
    """The primary input file's content (None: no file written)."""
    suffix: str = ".yaml"
    files: dict[str, str | bytes] = field(default_factory=dict)
    """More files written into the case's folder, by name."""
    absent: tuple[str, ...] = ()
    """Paths (with placeholders) that must not exist once the command has run: no partial output."""
    requires: str = ""
    """A module the case needs (torch for bench); the case is skipped without it."""

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"


# ------------------------------------------------------------------------------------------- documents

def _walk_raw(value: Any, tokens: list[str]) -> Any:
    if isinstance(value, Raw):
        tokens.append(value.text)
        return f"@@RAW{len(tokens) - 1}@@"
    if isinstance(value, dict):
        return {k: _walk_raw(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk_raw(v, tokens) for v in value]
    return value


def dump_json(doc: Any) -> str:
    """JSON text of `doc`; NaN and Infinity as Python's json writes them, Raw tokens as given."""
    tokens: list[str] = []
    text = json.dumps(_walk_raw(doc, tokens), indent=1)
    for i, token in enumerate(tokens):
        text = text.replace(f'"@@RAW{i}@@"', token)
    return text


def dump_yaml(doc: Any) -> str:
    """YAML text of `doc` (NaN and inf as .nan and .inf), Raw tokens as given."""
    tokens: list[str] = []
    text = yaml.safe_dump(_walk_raw(doc, tokens), sort_keys=False)
    for i, token in enumerate(tokens):
        text = text.replace(f"'@@RAW{i}@@'", token).replace(f"@@RAW{i}@@", token)
    return text


def set_path(doc: Any, path: str, value: Any) -> Any:
    """A deep copy of `doc` with the dotted `path` set to `value` (a missing mapping on the way is created;
    the value `DELETE` removes the key)."""
    doc = json.loads(json.dumps(doc))
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return doc


DELETE = object()

BAD_COUNTS: tuple[tuple[str, Any, str], ...] = (
    ("zero", 0, ">= "),
    ("negative", -1, ">= "),
    ("fraction", 2.5, "whole number"),
    ("string", "8", "expected an integer"),
    ("bool", True, "expected an integer"),
    ("list", [8], "expected an integer"),
    ("mapping", {"value": 8}, "expected an integer"),
    ("nan", Raw("NaN"), "finite"),
    ("infinity", Raw("Infinity"), "finite"),
    ("overflow", Raw("1e400"), "finite"),
    ("absurd", 10**30, "beyond any real count"),
    ("huge", Raw("1e12"), "<="),
)
"""Values no count accepts (JSON spelling), the name of the defect and a fragment of the rule."""

BAD_COUNTS_YAML: tuple[tuple[str, Any, str], ...] = (
    ("zero", 0, ">= "),
    ("negative", -3, ">= "),
    ("fraction", 2.5, "whole number"),
    ("string", "eight", "expected an integer"),
    ("bool", True, "expected an integer"),
    ("yes", Raw("yes"), "expected an integer"),
    ("list", [8], "expected an integer"),
    ("null-mapping", {"a": None}, "expected an integer"),
    ("nan", Raw(".nan"), "finite"),
    ("inf", Raw("-.inf"), "finite"),
    ("overflow", Raw("1.0e400"), "finite"),
    ("exp-string", Raw("1e3"), "expected an integer"),  # YAML 1.1 reads 1e3 as a string
    ("absurd", 10**30, "beyond any real count"),
    ("date", Raw("2024-01-01"), "expected an integer"),
)
"""The same for YAML, where spellings differ (.nan, yes, dates)."""

BAD_REALS: tuple[tuple[str, Any, str], ...] = (
    ("zero", 0, "positive"),
    ("negative", -80, "positive"),
    ("string", "80GB", "expected a number"),
    ("bool", False, "expected a number"),
    ("list", [80], "expected a number"),
    ("nan", Raw(".nan"), "finite"),
    ("inf", Raw(".inf"), "finite"),
    ("overflow", Raw("1.0e400"), "finite"),
    ("absurd", 1e300, "must be positive"),
)
"""Values no physical quantity of a cluster file accepts (YAML spelling)."""


def mutations(kind: str, base: Any, paths: Iterable[str], bad: Iterable[tuple[str, Any, str]],
              args: tuple[str, ...], dump: Callable[[Any], str], suffix: str,
              shown: Callable[[str], str] = lambda p: p) -> list[Case]:
    """One case per (path, bad value): exit 1 naming the field (as `shown` spells the path)."""
    out = []
    for path in paths:
        for name, value, rule in bad:
            out.append(Case(kind, f"{path}={name}", args, 1, f"field '{shown(path)}'",
                            dump(set_path(base, path, value)), suffix))
            del rule  # the rule's wording is checked by the cases below; here: the field is named
    return out


def file_level_cases(kind: str, args: tuple[str, ...], suffix: str, valid: str, *, mapping: bool = True,
                     yaml_like: bool = True) -> list[Case]:
    """Defects of the file itself, whatever it holds: encodings, binary, size, nesting, YAML alias bombs,
    the wrong top-level type, paths that are not files."""
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        bomb += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    cases = [
        Case(kind, "valid", args, 0, "", valid, suffix),
        Case(kind, "bom", args, 0, "", "\ufeff" + valid, suffix),
        Case(kind, "crlf", args, 0, "", valid.replace("\n", "\r\n"), suffix),
        Case(kind, "empty", args, 1, f"input{suffix}", "", suffix),
        Case(kind, "utf16", args, 1, "UTF-16", valid.encode("utf-16"), suffix),
        Case(kind, "utf16-no-bom", args, 1, "binary", valid.encode("utf-16-le"), suffix),
        Case(kind, "utf32", args, 1, "UTF-32", valid.encode("utf-32"), suffix),
        Case(kind, "latin1", args, 1, "not UTF-8", ("# caf\xe9\n" + valid).encode("latin-1"), suffix),
        Case(kind, "binary", args, 1, "binary", bytes(range(256)) * 8, suffix),
        Case(kind, "nul-inside", args, 1, "NUL", valid.encode()[:10] + b"\x00" + valid.encode()[10:], suffix),
        Case(kind, "too-large", args, 1, "refused", valid + ("#" + "x" * 99 + "\n") * 90_000, suffix),
        Case(kind, "deep-json", args, 1, f"input{suffix}", "[" * 50_000 + "]" * 50_000, suffix),
        Case(kind, "deep-nesting", args, 1, "deeper than", "[" * 40 + "1" + "]" * 40, suffix),
        Case(kind, "missing", tuple(a.replace("{f}", "{tmp}/nowhere" + suffix) for a in args), 1, "nowhere" + suffix),
        Case(kind, "directory", tuple(a.replace("{f}", "{tmp}") for a in args), 1, "directory"),
        Case(kind, "device", tuple(a.replace("{f}", "/dev/null") for a in args), 1, "/dev/null"),
        Case(kind, "proc", tuple(a.replace("{f}", "/proc/self/status") for a in args), 1, "status"),
        Case(kind, "name-too-long", tuple(a.replace("{f}", "{tmp}/" + "n" * 5000 + suffix) for a in args), 1,
             "nnnn"),
    ]
    if yaml_like:
        cases += [
            Case(kind, "alias-bomb", args, 1, "more than", bomb, suffix),
            Case(kind, "recursive-alias", args, 1, f"input{suffix}", "a: &a [1, *a]\n", suffix),
            Case(kind, "python-tag", args, 1, f"input{suffix}", "a: !!python/object:os.system [ls]\n", suffix),
            Case(kind, "two-documents", args, 1, f"input{suffix}", "a: 1\n---\nb: 2\n", suffix),
            Case(kind, "tab-indent", args, 1, "YAML", "a:\n\tb: 1\n", suffix),
            Case(kind, "huge-int", args, 1, f"input{suffix}", "a: " + "9" * 5000 + "\n", suffix),
        ]
    if mapping:
        cases += [
            Case(kind, "scalar-top", args, 1, f"input{suffix}", "42\n", suffix),
            Case(kind, "list-top", args, 1, f"input{suffix}", "[1, 2, 3]\n", suffix),
        ]
        if yaml_like:
            cases.append(Case(kind, "bool-key", args, 1, f"input{suffix}", "on: 1\n", suffix))
    return cases


# ---------------------------------------------------------------------------------------- model files

def _hf(name: str) -> dict[str, Any]:
    return json.loads((data_dir("models") / f"{name}.json").read_text())


HF_BASES = {"llama": "llama3.1-8b", "mistral": "mistral-7b", "qwen2": "qwen2.5-7b", "qwen3": "qwen3-8b",
            "mixtral": "mixtral-8x7b", "qwen2_moe": "qwen1.5-moe-a2.7b", "qwen3_moe": "qwen3-30b-a3b",
            "gpt_oss": "gpt-oss-120b", "deepseek_v2": "deepseek-v2-lite", "deepseek_v3": "deepseek-v3",
            "gpt2": "gpt2"}
"""model_type -> the shipped preset whose config.json is the valid base document."""

HF_COUNTS = {
    "llama": ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "intermediate_size", "max_position_embeddings", "head_dim"),
    "qwen3": ("head_dim", "num_key_value_heads"),
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": ("num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step"),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "gpt_oss": ("num_local_experts", "sliding_window"),
    "deepseek_v2": ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                    "moe_layer_freq", "n_group", "topk_group"),
    "deepseek_v3": ("q_lora_rank", "n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"),
    "gpt2": ("n_embd", "n_layer", "n_head", "n_positions", "n_inner"),
}
"""Integer keys of each family attacked with every BAD_COUNTS value."""

ZERO_OK = {"q_lora_rank", "n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers", "qk_nope_head_dim",
           "qk_rope_head_dim",
           "shared_expert_intermediate_size"}
"""Keys for which 0 is valid (a plain query projection, no shared experts, no dense or MTP layers)."""


def hf_cases() -> list[Case]:
    show = ("models", "show", "{f}")
    explain = ("explain", "-m", "{f}", "-c", "h100", "-n", "8")
    out: list[Case] = []
    for family, keys in HF_COUNTS.items():
        base = _hf(HF_BASES[family])
        for key in keys:
            bad = [b for b in BAD_COUNTS if not (b[1] == 0 and key in ZERO_OK)]
            out += [Case(c.kind, f"{family}.{c.name}", c.args, c.code, c.fragment, c.content, c.suffix)
                    for c in mutations("hf", base, [key], bad, show, dump_json, ".json")]
    llama, dsv3, qmoe, gpt2 = _hf("llama3.1-8b"), _hf("deepseek-v3"), _hf("qwen3-30b-a3b"), _hf("gpt2")
    rules = [
        ("kv-heads-do-not-divide", set_path(llama, "num_key_value_heads", 3), "num_key_value_heads"),
        ("hidden-below-heads", set_path(llama, "hidden_size", 16), "hidden_size"),
        ("top-k-above-experts", set_path(qmoe, "num_experts_per_tok", 129), "num_experts_per_tok"),
        ("topk-group-above-groups", set_path(dsv3, "topk_group", 9), "topk_group"),
        ("groups-do-not-divide-experts", set_path(dsv3, "n_group", 7), "n_group"),
        ("group-limit-below-top-k", set_path(set_path(dsv3, "topk_group", 1), "num_experts_per_tok", 64),
         "num_experts_per_tok"),
        ("moe-layer-freq-zero", set_path(dsv3, "moe_layer_freq", 0), "moe_layer_freq"),
        ("model-type-list", set_path(llama, "model_type", ["llama"]), "model_type"),
        ("model-type-number", set_path(llama, "model_type", 7), "model_type"),
        ("model-type-missing", set_path(llama, "model_type", DELETE), "model_type"),
        ("rope-scaling-string", set_path(llama, "rope_scaling", "llama3"), "rope_scaling"),
        ("rope-theta-negative", set_path(llama, "rope_theta", -1), "rope_theta"),
        ("rope-theta-nan", set_path(llama, "rope_theta", Raw("NaN")), "rope_theta"),
        ("rope-theta-string", set_path(llama, "rope_theta", "1e4"), "rope_theta"),
        ("rope-type-number", set_path(llama, "rope_scaling.rope_type", 3), "rope_scaling.rope_type"),
        ("dropout-above-one", set_path(gpt2, "attn_pdrop", 2.0), "attn_pdrop"),
        ("dropout-negative", set_path(gpt2, "resid_pdrop", -0.1), "resid_pdrop"),
        ("dropout-nan", set_path(gpt2, "resid_pdrop", Raw("NaN")), "resid_pdrop"),
        ("tie-embeddings-string", set_path(llama, "tie_word_embeddings", "yes"), "tie_word_embeddings"),
        ("hidden-act-number", set_path(llama, "hidden_act", 1), "hidden_act"),
        ("dtype-number", set_path(llama, "torch_dtype", 16), "torch_dtype"),
        ("attention-bias-number", set_path(llama, "attention_bias", 1), "attention_bias"),
        ("mlp-only-layers-strings", set_path(qmoe, "mlp_only_layers", ["0"]), "mlp_only_layers[0]"),
        ("mlp-only-layers-negative", set_path(qmoe, "mlp_only_layers", [-1]), "mlp_only_layers[0]"),
        ("mlp-only-layers-scalar", set_path(qmoe, "mlp_only_layers", 3), "mlp_only_layers"),
        ("layer-types-wrong-length", set_path(_hf("gpt-oss-120b"), "layer_types", ["full_attention"]), "layer_types"),
        ("layer-types-scalar", set_path(_hf("gpt-oss-120b"), "layer_types", "full_attention"), "layer_types"),
        ("use-sliding-window-string", set_path(set_path(llama, "sliding_window", 4096), "use_sliding_window", "no"),
         "use_sliding_window"),
        ("sliding-window-negative", set_path(_hf("mistral-7b"), "sliding_window", -4096), "sliding_window"),
        ("text-config-bad", {"model_type": "llava", "text_config": set_path(llama, "hidden_size", 0)},
         "text_config.hidden_size"),
        ("layers-1e9", set_path(llama, "num_hidden_layers", Raw("1e9")), "num_hidden_layers"),
        ("layers-1e12", set_path(llama, "num_hidden_layers", 10**12), "num_hidden_layers"),
        ("hidden-1e9", set_path(llama, "hidden_size", 10**9), "hidden_size"),
        ("vocab-1e12", set_path(llama, "vocab_size", 10**12), "vocab_size"),
        ("experts-1e9", set_path(qmoe, "num_experts", 10**9), "num_experts"),
    ]
    out += [Case("hf", name, explain, 1, f"field '{key}'", dump_json(doc), ".json") for name, doc, key in rules]
    valid = [
        ("wrapped-in-text-config", {"model_type": "llava", "text_config": llama}),
        ("counts-written-as-floats", set_path(llama, "hidden_size", 4096.0)),
        ("first-k-dense-beyond-layers", set_path(dsv3, "first_k_dense_replace", 61)),
        ("one-layer", set_path(llama, "num_hidden_layers", 1)),
        ("mqa", set_path(llama, "num_key_value_heads", 1)),
        ("null-optional-keys", set_path(set_path(llama, "head_dim", None), "rope_scaling", None)),
        ("unknown-keys-ignored", set_path(llama, "some_future_key", {"x": [1, 2]})),
        ("deepest-layers", set_path(llama, "num_hidden_layers", 10_000)),
    ]
    out += [Case("hf", name, explain, 0, "step time", dump_json(doc), ".json") for name, doc in valid]
    out += [
        Case("hf", "unsupported-type", explain, 1, "unsupported model_type 'bert'", '{"model_type": "bert"}', ".json"),
        Case("hf", "top-level-list", explain, 1, "JSON object", "[1, 2]", ".json"),
        Case("hf", "unknown-suffix", ("models", "show", "{f}"), 1, "expected a .json", "{}", ".txt"),
        Case("hf", "trailing-comma", explain, 1, "not valid JSON", '{"model_type": "llama",}', ".json"),
    ]
    out += file_level_cases("hf-file", show, ".json", json.dumps(llama), yaml_like=False)
    return out


YAML_MODEL = {
    "name": "tiny", "hidden": 256, "layers": 4, "vocab": 1000, "max_position": 4096,
    "attention": {"heads": 8, "kv_heads": 2},
    "mlp": {"ffn": 512},
    "moe": {"experts": 8, "top_k": 2, "expert_ffn": 128, "shared_experts": 1, "layer_freq": 1},
}
YAML_MLA = {
    "hidden": 512, "layers": 4, "vocab": 1000,
    "attention": {"heads": 8, "mla": {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
                                      "qk_rope_head_dim": 16, "v_head_dim": 32}},
    "mlp": {"ffn": 1024},
}


def model_yaml_cases() -> list[Case]:
    show = ("models", "show", "{f}")
    explain = ("explain", "-m", "{f}", "-c", "h100", "-n", "8")
    counts = ("hidden", "layers", "vocab", "max_position", "attention.heads", "attention.kv_heads",
              "attention.head_dim", "attention.sliding_window", "mlp.ffn", "moe.experts", "moe.top_k",
              "moe.expert_ffn", "moe.layer_freq", "moe.n_group")
    out = mutations("model-yaml", YAML_MODEL, counts, BAD_COUNTS_YAML, show, dump_yaml, ".yaml")
    out += mutations("model-yaml", YAML_MLA, ("attention.mla.kv_lora_rank", "attention.mla.v_head_dim"),
                     BAD_COUNTS_YAML[:4], show, dump_yaml, ".yaml")
    wrong = [
        ("unknown-top-key", set_path(YAML_MODEL, "hiden", 5), "hiden"),
        ("unknown-attention-key", set_path(YAML_MODEL, "attention.head", 8), "attention.head"),
        ("unknown-moe-key", set_path(YAML_MODEL, "moe.topk", 2), "moe.topk"),
        ("attention-scalar", set_path(YAML_MODEL, "attention", 8), "attention"),
        ("mlp-list", set_path(YAML_MODEL, "mlp", [512]), "mlp"),
        ("moe-string", set_path(YAML_MODEL, "moe", "yes"), "moe"),
        ("mla-list", set_path(YAML_MLA, "attention.mla", [1]), "attention.mla"),
        ("hidden-missing", set_path(YAML_MODEL, "hidden", DELETE), "hidden"),
        ("heads-missing", set_path(YAML_MODEL, "attention.heads", DELETE), "attention.heads"),
        ("norm-unknown", set_path(YAML_MODEL, "norm", "batchnorm"), "norm"),
        ("norm-number", set_path(YAML_MODEL, "norm", 1), "norm"),
        ("position-unknown", set_path(YAML_MODEL, "position", "sinusoid"), "position"),
        ("tied-string", set_path(YAML_MODEL, "tied_embeddings", "no way"), "tied_embeddings"),
        ("gated-number", set_path(YAML_MODEL, "mlp.gated", 1), "mlp.gated"),
        ("rope-theta-zero", set_path(YAML_MODEL, "rope_theta", 0), "rope_theta"),
        ("rope-theta-nan", set_path(YAML_MODEL, "rope_theta", Raw(".nan")), "rope_theta"),
        ("name-list", set_path(YAML_MODEL, "name", ["a"]), "name"),
        ("kv-heads-do-not-divide", set_path(YAML_MODEL, "attention.kv_heads", 3), "attention.kv_heads"),
        ("top-k-above-experts", set_path(YAML_MODEL, "moe.top_k", 9), "moe.top_k"),
        ("topk-group-above-groups", set_path(set_path(YAML_MODEL, "moe.n_group", 2), "moe.topk_group", 3),
         "moe.topk_group"),
        ("hidden-not-multiple-of-heads", set_path(YAML_MODEL, "hidden", 250), "attention.head_dim"),
        ("sliding-layers-above-layers", set_path(set_path(YAML_MODEL, "attention.sliding_window", 128),
                                                 "attention.sliding_layers", 9), "attention.sliding_layers"),
        ("mtp-negative", set_path(YAML_MODEL, "mtp_layers", -1), "mtp_layers"),
        ("shared-ffn-negative", set_path(YAML_MODEL, "moe.shared_ffn", -5), "moe.shared_ffn"),
        ("first-k-dense-negative", set_path(YAML_MODEL, "moe.first_k_dense", -1), "moe.first_k_dense"),
        ("mla-qk-dims-zero", set_path(set_path(YAML_MLA, "attention.mla.qk_nope_head_dim", 0),
                                      "attention.mla.qk_rope_head_dim", 0), "attention.head_dim"),
        ("layers-1e9", set_path(YAML_MODEL, "layers", 10**9), "layers"),
    ]
    out += [Case("model-yaml", name, explain, 1, f"field '{key}'", dump_yaml(doc)) for name, doc, key in wrong]
    valid = [
        ("moe", YAML_MODEL), ("mla", YAML_MLA), ("dense", set_path(YAML_MODEL, "moe", DELETE)),
        ("layer-freq-beyond-layers", set_path(YAML_MODEL, "moe.layer_freq", 9)),
        ("sliding-window", set_path(YAML_MODEL, "attention.sliding_window", 128)),
        ("markup-in-name", set_path(YAML_MODEL, "name", "[/]x[bold")),
    ]
    out += [Case("model-yaml", name, explain, 0, "step time", dump_yaml(doc)) for name, doc in valid]
    out += [
        Case("model-yaml", "markup-in-name-plan", ("plan", "-m", "{f}", "-c", "h100", "-n", "8", "--gbs", "8"), 0,
             "[/]x[bold", dump_yaml(set_path(YAML_MODEL, "name", "[/]x[bold"))),
        Case("model-yaml", "tex-in-name-plot", (*explain, "--plot", "{tmp}/p.png"), 0, "wrote",
             dump_yaml(set_path(YAML_MODEL, "name", "$\\frac{$")), absent=("{tmp}/p.png.tmp",)),
    ]
    out += file_level_cases("model-yaml-file", show, ".yaml", dump_yaml(YAML_MODEL))
    return out


# ---------------------------------------------------------------------------------------- cluster files

def _preset_cluster() -> dict[str, Any]:
    return yaml.safe_load((data_dir("hardware") / "h100.yaml").read_text())


def cluster_cases() -> list[Case]:
    show = ("hardware", "show", "{f}")
    explain = ("explain", "-m", "llama3.1-8b", "-c", "{f}", "-n", "16", "--tp", "8")
    full = _preset_cluster()
    override = {"name": "mine", "base": "h100"}
    reals = ("gpu.hbm_gib", "gpu.hbm_tbps", "gpu.peak_tflops.bf16", "scaleup.bandwidth_gbps",
             "scaleup.busbw_gbps", "scaleout.bandwidth_gbps", "scaleout.busbw_gbps")
    out = mutations("cluster", override, reals, BAD_REALS, show, dump_yaml, ".yaml")
    out += mutations("cluster", full, ("gpu.sm_count", "node.gpus_per_node", "node.scaleup_domain"),
                     BAD_COUNTS_YAML[:6], show, dump_yaml, ".yaml")
    wrong = [
        ("fraction-above-one", set_path(override, "gpu.hbm_efficiency", 1.5), "gpu.hbm_efficiency"),
        ("gemm-fraction-zero", set_path(override, "gpu.gemm_peak_fraction.bf16", 0), "gpu.gemm_peak_fraction.bf16"),
        ("attention-fraction-nan", set_path(override, "gpu.attention_fwd_fraction", Raw(".nan")),
         "gpu.attention_fwd_fraction"),
        ("latency-negative", set_path(override, "scaleout.ring_step_us", -14.0), "scaleout.ring_step_us"),
        ("nvls-latency-inf", set_path(override, "scaleup.nvls_us", Raw(".inf")), "scaleup.nvls_us"),
        ("unknown-dtype", set_path(override, "gpu.peak_tflops.int4", 5000), "gpu.peak_tflops"),
        ("bf16-missing", set_path(full, "gpu.peak_tflops.bf16", DELETE), "gpu.peak_tflops.bf16"),
        ("peak-tflops-list", set_path(override, "gpu.peak_tflops", [989]), "gpu.peak_tflops"),
        ("tile-wrong-length", set_path(override, "gpu.gemm_tile", [128]), "gpu.gemm_tile"),
        ("tile-zero", set_path(override, "gpu.gemm_tile", [0, 256]), "gpu.gemm_tile"),
        ("domain-not-multiple", set_path(full, "node.scaleup_domain", 12), "node.scaleup_domain"),
        ("gpus-fraction", set_path(full, "gpus", 8.7), "gpus"),
        ("gpus-zero", set_path(full, "gpus", 0), "gpus"),
        ("gpus-absurd", set_path(full, "gpus", 10**9), "gpus"),
        ("unknown-top-key", set_path(override, "nodes", 4), "nodes"),
        ("unknown-node-key", set_path(full, "node.gpus", 8), "node.gpus"),
        ("unknown-gpu-key", set_path(override, "gpu.hbm", 80), "gpu.hbm"),
        ("name-missing", set_path(full, "name", DELETE), "name"),
        ("name-list", set_path(full, "name", ["x"]), "name"),
        ("gpu-missing", set_path(full, "gpu", DELETE), "gpu"),
        ("gpu-scalar", set_path(override, "gpu", 5), "gpu"),
        ("node-list", set_path(full, "node", [8, 8]), "node"),
        ("sources-list", set_path(override, "sources", ["x"]), "sources"),
        ("sources-value-number", set_path(override, "sources", {"gpu.hbm": 3}), "sources.gpu.hbm"),
        ("calibration-scale-zero", set_path(override, "calibration.compute_scale", 0), "calibration.compute_scale"),
        ("calibration-cost-one", set_path(override, "calibration.nic_overlap_cost", 1.0),
         "calibration.nic_overlap_cost"),
        ("calibration-unknown", set_path(override, "calibration.speed", 2), "calibration.speed"),
        ("description-number", set_path(override, "description", 5), "description"),
    ]
    out += [Case("cluster", name, explain, 1, f"field '{key}'", dump_yaml(doc)) for name, doc, key in wrong]
    out += [
        Case("cluster", "base-unknown", explain, 1, "unknown cluster 'h1000'",
             dump_yaml(set_path(override, "base", "h1000"))),
        Case("cluster", "base-list", explain, 1, "field 'base'", dump_yaml(set_path(override, "base", ["h100"]))),
        Case("cluster", "override-valid", explain, 0, "step time", dump_yaml(override)),
        Case("cluster", "markup-everywhere", show, 0, "[/]name", dump_yaml(
            {**override, "name": "[/]name", "description": "[red]", "sources": {"[/]": "[/]"}})),
        Case("cluster", "full-valid", explain, 0, "step time", dump_yaml(full)),
        Case("cluster", "fits-garbage-ignored", show, 0, "mine",
             dump_yaml(set_path(override, "fits.gemm", {"sets": 5}))),
        Case("cluster", "tiny-but-valid-numbers", explain, 0, "step time",
             dump_yaml(set_path(set_path(override, "scaleout.bandwidth_gbps", 1e-3), "scaleout.busbw_gbps", 1e-3))),
    ]
    out += file_level_cases("cluster-file", show, ".yaml", dump_yaml(override))
    return out


# ------------------------------------------------------------------------------------------- runs files

RUN = {
    "id": "mine", "group": "me", "tier": "A", "source": "my cluster", "cluster": "h100", "gpus": 8,
    "model": "llama3.1-8b", "strategy": {"tp": 8, "pp": 1, "zero": 1, "sp": True, "recompute": "selective"},
    "batch": {"gbs": 64, "seq": 4096}, "precision": "bf16",
    "measured": {"tokens_per_s_per_gpu": 3000.0, "peak_memory_gib": 40.0, "peak_memory_kind": "allocated"},
}


def _runs(run: dict[str, Any]) -> str:
    return dump_yaml([run])


def runs_cases() -> list[Case]:
    validate = ("validate", "--data", "{f}")
    out = [Case(c.kind, c.name, c.args, c.code, c.fragment, dump_yaml([yaml.safe_load(c.content)]), c.suffix)
           for c in mutations("runs", RUN, ("gpus", "batch.gbs", "batch.seq", "strategy.tp", "strategy.mbs"),
                              BAD_COUNTS_YAML[:7], validate, dump_yaml, ".yaml", shown=lambda p: f"mine.{p}")]
    wrong = [
        ("throughput-zero", set_path(RUN, "measured.tokens_per_s_per_gpu", 0), "mine.measured.tokens_per_s_per_gpu"),
        ("throughput-nan", set_path(RUN, "measured.tokens_per_s_per_gpu", Raw(".nan")),
         "mine.measured.tokens_per_s_per_gpu"),
        ("throughput-string", set_path(RUN, "measured.tokens_per_s_per_gpu", "fast"),
         "mine.measured.tokens_per_s_per_gpu"),
        ("memory-negative", set_path(RUN, "measured.peak_memory_gib", -1), "mine.measured.peak_memory_gib"),
        ("memory-rank-unknown", set_path(RUN, "measured.memory_rank", "first"), "mine.measured.memory_rank"),
        ("measured-missing", set_path(RUN, "measured", DELETE), "mine.measured"),
        ("measured-list", set_path(RUN, "measured", [1]), "mine.measured"),
        ("precision-fp32", set_path(RUN, "precision", "fp32"), "mine.precision"),
        ("dropout-string", set_path(RUN, "dropout", "yes please"), "mine.dropout"),
        ("unknown-run-key", set_path(RUN, "gpu_count", 8), "mine.gpu_count"),
        ("unknown-strategy-key", set_path(RUN, "strategy.pipeline", 2), "mine.strategy.pipeline"),
        ("strategy-sp-string", set_path(RUN, "strategy.sp", "on"), "mine.strategy.sp"),
        ("strategy-schedule-unknown", set_path(RUN, "strategy.schedule", "gpipe"), "mine.strategy"),
        ("strategy-zero-five", set_path(RUN, "strategy.zero", 5), "mine.strategy.zero"),
        ("strategy-gbs-misplaced", set_path(RUN, "strategy.gbs", 64), "mine.strategy"),
        ("strategy-dp-contradicts", set_path(RUN, "strategy.dp", 3), "mine.strategy.dp"),
        ("model-missing", set_path(RUN, "model", DELETE), "mine.model"),
        ("model-unknown", set_path(RUN, "model", "llama9-1t"), "mine.model"),
        ("model-number", set_path(RUN, "model", 8), "mine.model"),
        ("cluster-unknown", set_path(RUN, "cluster", "h1000"), "mine.cluster"),
        ("unknown-list-of-numbers", set_path(RUN, "unknown", [1, 2]), "mine.unknown[0]"),
        ("layout-invalid", set_path(RUN, "strategy.tp", 3), "mine"),
        ("batch-extra-key", set_path(RUN, "batch.mbs", 1), "mine.batch.mbs"),
        ("id-list", set_path(RUN, "id", ["x"]), "#0.group"),
    ]
    out += [Case("runs", name, validate, 1, f"field '{key}'", _runs(doc)) for name, doc, key in wrong
            if name != "id-list"]
    out += [
        Case("runs", "id-list-named-by-position", validate, 1, "field '#0.id'", _runs(set_path(RUN, "id", ["x"]))),
        Case("runs", "preset-model", validate, 0, "mine", _runs(RUN)),
        Case("runs", "markup-in-id", validate, 0, "[/]x", _runs(set_path(RUN, "id", "[/]x"))),
        Case("runs", "nul-in-model-path", validate, 1, "field 'mine.model'", _runs(RUN).replace(
            "model: llama3.1-8b", 'model: "x\\0y.json"')),
        Case("runs", "nul-in-cluster", validate, 1, "field 'mine.cluster'", _runs(RUN).replace(
            "cluster: h100", 'cluster: "h\\0"')),
        Case("runs", "model-file-beside", validate, 0, "mine", _runs(set_path(RUN, "model", "m.json")),
             files={"models/m.json": json.dumps(_hf("llama3.1-8b"))}),
        Case("runs", "model-file-broken", validate, 1, "m.json", _runs(set_path(RUN, "model", "m.json")),
             files={"models/m.json": "{"}),
        Case("runs", "entry-not-mapping", validate, 1, "field '#0'", "- 5\n"),
        Case("runs", "top-mapping", validate, 1, "list of runs", dump_yaml(RUN)),
        Case("runs", "empty-list", validate, 0, "", "[]\n"),
        Case("runs", "calibrate-bad-runs", ("calibrate", "--runs", "{f}", "--cluster", "h100"), 1,
             "field 'mine.gpus'", _runs(set_path(RUN, "gpus", -8))),
    ]
    out += file_level_cases("runs-file", validate, ".yaml", _runs(RUN), mapping=False)
    return out


# ------------------------------------------------------------------------------------------ saved plans

PLAN = {"model_source": "llama3.1-8b", "cluster_source": "h100", "gpus": 8,
        "strategy": {"tp": 8, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "vpp": 1, "zero": 1, "sp": True,
                     "recompute": "none", "mbs": 1, "gbs": 64, "seq": 4096, "schedule": "1f1b",
                     "precision": "bf16", "dp": 1, "microbatches": 64}}


def plan_cases() -> list[Case]:
    export = ("export", "{f}", "-f", "megatron")
    out = mutations("plan", PLAN, ("gpus", "strategy.tp", "strategy.mbs", "strategy.gbs", "strategy.seq"),
                    BAD_COUNTS, export, dump_json, ".json")
    wrong = [
        ("strategy-list", set_path(PLAN, "strategy", [8]), "strategy"),
        ("strategy-missing", set_path(PLAN, "strategy", DELETE), "strategy"),
        ("gpus-missing", set_path(PLAN, "gpus", DELETE), "gpus"),
        ("model-missing", set_path(PLAN, "model_source", DELETE), "model"),
        ("model-number", set_path(PLAN, "model_source", 5), "model_source"),
        ("cluster-list", set_path(PLAN, "cluster_source", ["h100"]), "cluster_source"),
        ("schedule-unknown", set_path(PLAN, "strategy.schedule", "gpipe"), "strategy"),
        ("sp-string", set_path(PLAN, "strategy.sp", "on"), "strategy.sp"),
        ("zero-nine", set_path(PLAN, "strategy.zero", 9), "strategy.zero"),
        ("plans-empty", {"plans": []}, "plans"),
        ("plans-scalar", {"plans": 5}, "plans"),
        ("plans-entry-scalar", {"plans": [5]}, "plans[0]"),
    ]
    out += [Case("plan", name, export, 1, f"field '{key}'", dump_json(doc), ".json") for name, doc, key in wrong]
    out += [
        Case("plan", "valid", export, 0, "--tensor-model-parallel-size 8", dump_json(PLAN), ".json"),
        Case("plan", "valid-in-plans", export, 0, "--tensor-model-parallel-size 8", dump_json({"plans": [PLAN]}),
             ".json"),
        Case("plan", "index-out-of-range", (*export, "--index", "3"), 1, "out of range",
             dump_json({"plans": [PLAN]}), ".json"),
        Case("plan", "invalid-layout", export, 1, "does not divide the 8 GPUs",
             dump_json(set_path(PLAN, "strategy.tp", 3)), ".json"),
        Case("plan", "unknown-model", export, 1, "unknown model", dump_json(set_path(PLAN, "model_source", "gpt9")),
             ".json"),
    ]
    out += file_level_cases("plan-file", export, ".json", dump_json(PLAN), yaml_like=False)
    return out


# ----------------------------------------------------------------------------------- expert-count files

def expert_count_cases() -> list[Case]:
    args = ("explain", "-m", "mixtral-8x7b", "-c", "h100", "-n", "8", "--ep", "8", "--expert-load", "{f}")
    row = "10,20,30,40,50,60,70,80\n"
    out = [
        Case("expert-counts", "csv-valid", args, 0, "imbalance", row, ".csv"),
        Case("expert-counts", "csv-two-layers", args, 0, "imbalance", row * 2, ".csv"),
        Case("expert-counts", "csv-word", args, 1, "not a number", "10,x,30,40,50,60,70,80\n", ".csv"),
        Case("expert-counts", "csv-negative", args, 1, ">= 0", "10,-20,30,40,50,60,70,80\n", ".csv"),
        Case("expert-counts", "csv-nan", args, 1, "finite", "10,nan,30,40,50,60,70,80\n", ".csv"),
        Case("expert-counts", "csv-inf", args, 1, "finite", "10,inf,30,40,50,60,70,80\n", ".csv"),
        Case("expert-counts", "csv-overflow", args, 1, "finite", "10,1e400,30,40,50,60,70,80\n", ".csv"),
        Case("expert-counts", "csv-short-row", args, 1, "experts per row", "10,20\n", ".csv"),
        Case("expert-counts", "csv-ragged", args, 1, "first row", row + "1,2,3\n", ".csv"),
        Case("expert-counts", "csv-empty", args, 1, "input.csv", "", ".csv"),
        Case("expert-counts", "csv-all-zero", args, 1, "input.csv", "0,0,0,0,0,0,0,0\n", ".csv"),
        Case("expert-counts", "csv-field-over-limit", args, 1, "not valid CSV", "1" * 200_000 + "\n", ".csv"),
        Case("expert-counts", "csv-open-quote", args, 1, "not a number", '"1,2\n', ".csv"),
        Case("expert-counts", "json-valid", args, 0, "imbalance", json.dumps({"counts": [[1] * 8]}), ".json"),
        Case("expert-counts", "json-strings", args, 1, "not a number", json.dumps([["a"] * 8]), ".json"),
        Case("expert-counts", "json-nan", args, 1, "finite", "[" + ",".join(["NaN"] * 8) + "]", ".json"),
        Case("expert-counts", "json-nested", args, 1, "expected a list of counts", json.dumps([[1] * 8, 5]), ".json"),
        Case("expert-counts", "json-no-counts", args, 1, "field 'counts'", json.dumps({"count": [1] * 8}), ".json"),
        Case("expert-counts", "json-empty-list", args, 1, "non-empty", "[]", ".json"),
        Case("expert-counts", "json-mapping-rows", args, 1, "input.json", json.dumps([{"a": 1}] * 8), ".json"),
        Case("expert-counts", "yaml-valid", args, 0, "imbalance", "counts: [1, 2, 3, 4, 5, 6, 7, 8]\n", ".yaml"),
        Case("expert-counts", "yaml-bools", args, 1, "not a number", "[" + ",".join(["yes"] * 8) + "]\n", ".yaml"),
        Case("expert-counts", "wrong-suffix", args, 1, "expected a .csv", row, ".txt"),
        Case("expert-counts", "dense-model", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                              "--expert-load", "{f}"), 2, "no experts", row, ".csv"),
        Case("expert-counts", "zipf-word", (*args[:-1], "zipf:steep"), 2, "zipf"),
        Case("expert-counts", "zipf-nan", (*args[:-1], "zipf:nan"), 2, "zipf"),
        Case("expert-counts", "zipf-negative", (*args[:-1], "zipf:-1"), 2, "zipf"),
        Case("expert-counts", "missing-file", (*args[:-1], "{tmp}/nowhere.csv"), 1, "nowhere.csv"),
    ]
    out += file_level_cases("expert-counts-file", args, ".yaml", "counts: [1, 2, 3, 4, 5, 6, 7, 8]\n",
                            mapping=False)
    return out


# -------------------------------------------------------------------------------------- nccl-tests logs

def _nccl_log() -> str:
    path = Path(__file__).parent / "data" / "nccl_samples" / "h200_2node_16gpu_all_reduce_nccl2.30.txt"
    return path.read_text()


def nccl_cases() -> list[Case]:
    args = ("hardware", "import-nccl-tests", "{f}")
    log = _nccl_log()
    header = "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 8\n"
    row = ("   1048576   262144   float   sum   -1   45.06   23.27   40.73   0   44.90   23.35   40.87   0\n"
           "   2097152   524288   float   sum   -1   55.06   38.09   66.66   0   55.01   38.12   66.71   0\n")
    out = [
        Case("nccl-log", "valid", args, 0, "all_reduce", log, ".txt"),
        Case("nccl-log", "valid-json", (*args, "--json"), 0, '"samples"', log, ".txt"),
        Case("nccl-log", "no-rows", args, 1, "no nccl-tests data rows", "hello\nworld\n", ".txt"),
        Case("nccl-log", "header-only", args, 1, "no nccl-tests data rows", header, ".txt"),
        Case("nccl-log", "no-collective", args, 1, "which collective", row, ".txt"),
        Case("nccl-log", "two-rows", args, 0, "all_reduce", header + row, ".txt"),
        Case("nccl-log", "nan-times", args, 1, "no nccl-tests data rows",
             header + row.replace("45.06", "nan").replace("44.90", "nan").replace("55.0", "nan"), ".txt"),
        Case("nccl-log", "negative-times", args, 1, "no nccl-tests data rows",
             header + row.replace("45.06", "-45.06").replace("44.90", "-44.90").replace("55.0", "-55.0"), ".txt"),
        Case("nccl-log", "inf-bandwidth", args, 0, "all_reduce", header + row.replace("40.73", "inf"), ".txt"),
        Case("nccl-log", "huge-size", args, 1, "2 or more message sizes", header + row.replace("1048576", "9" * 30, 1),
             ".txt"),
        Case("nccl-log", "unknown-collective-option", (*args, "--collective", "gather"), 1, "unknown collective",
             log, ".txt"),
        Case("nccl-log", "ranks-zero", (*args, "--ranks", "0"), 2, "--ranks", log, ".txt"),
        Case("nccl-log", "latin1-noise", args, 0, "all_reduce", log.encode() + "\n# h\xf4te\n".encode("latin-1"),
             ".txt"),
        Case("nccl-log", "binary", args, 1, "binary", bytes(range(256)) * 4, ".txt"),
        Case("nccl-log", "utf16", args, 1, "UTF-16", log.encode("utf-16"), ".txt"),
        Case("nccl-log", "directory", ("hardware", "import-nccl-tests", "{tmp}"), 1, "directory"),
        Case("nccl-log", "missing", ("hardware", "import-nccl-tests", "{tmp}/none.txt"), 1, "none.txt"),
        Case("nccl-log", "too-large", args, 1, "refused", log + "#" * (9 * 2**20), ".txt"),
        Case("nccl-log", "out-into-bad-profile", (*args, "--out", "{tmp}/p.yaml"), 1, "p.yaml", log, ".txt",
             files={"p.yaml": "measurements: [1, 2]\n"}),
        Case("nccl-log", "out-profile-binary", (*args, "--out", "{tmp}/p.yaml"), 1, "binary", log, ".txt",
             files={"p.yaml": b"\x00\x01"}),
        Case("nccl-log", "out-profile-bad-sample", (*args, "--out", "{tmp}/p.yaml"), 1, "time_us", log, ".txt",
             files={"p.yaml": "measurements:\n  date: x\n  device: y\n  gemm: [{m: 1, n: 1, k: 1, dtype: bf16, "
                              "time_us: -1, tflops: 1, device: x}]\n"}),
        Case("nccl-log", "out-written", (*args, "--out", "{tmp}/new.yaml"), 0, "all_reduce", log, ".txt"),
        Case("nccl-log", "out-is-directory", (*args, "--out", "{tmp}"), 1, "directory", log, ".txt"),
        Case("nccl-log", "out-missing-folder", (*args, "--out", "{tmp}/no/p.yaml"), 1, "does not exist", log, ".txt",
             absent=("{tmp}/no",)),
        Case("nccl-log", "out-proc", (*args, "--out", "/proc/p.yaml"), 1, "cannot write", log, ".txt"),
        Case("nccl-log", "out-json-pure", (*args, "--out", "{tmp}/new.yaml", "--json"), 0, '"measured"', log, ".txt"),
        Case("nccl-log", "cluster-unknown", (*args, "--cluster", "h1000"), 1, "unknown cluster", log, ".txt"),
    ]
    return out


# ---------------------------------------------------------------------------------------- command line

def cli_cases() -> list[Case]:
    plan_n = ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n")
    plan = (*plan_n, "8", "--gbs", "64")
    explain = ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8")
    scale = ("scale", "-m", "gpt2", "-c", "h100", "-n", "8..16", "--gbs", "64")
    usage = [
        ("plan-tp-zero", (*plan, "--tp", "0"), "--tp"),
        ("plan-mbs-zero", (*plan, "--mbs", "0"), "--mbs"),
        ("plan-pp-negative", (*plan, "--pp", "-2"), "--pp"),
        ("plan-tp-word", (*plan, "--tp", "eight"), "--tp"),
        ("plan-tp-huge-range", (*plan, "--tp", "1..1000000000"), "--tp"),
        ("plan-tp-empty-range", (*plan, "--tp", "8..1"), "--tp"),
        ("plan-tp-empty-list", (*plan, "--tp", ","), "--tp"),
        ("plan-zero-four", (*plan, "--zero", "4"), "--zero"),
        ("plan-zero-negative", (*plan, "--zero", "-1"), "--zero"),
        ("plan-redundant-negative", (*plan, "--redundant-experts", "-8"), "--redundant-experts"),
        ("plan-max-tp-zero", (*plan, "--max-tp", "0"), "--max-tp"),
        ("plan-max-pp-huge", (*plan, "--max-pp", "1000000000"), "--max-pp"),
        ("plan-tokens-negative", (*plan, "--tokens", "-1e12"), "--tokens"),
        ("plan-tokens-nan", (*plan, "--tokens", "nan"), "--tokens"),
        ("plan-tokens-inf", (*plan, "--tokens", "inf"), "--tokens"),
        ("plan-tokens-overflow", (*plan, "--tokens", "1e400"), "--tokens"),
        ("plan-days-negative", (*plan, "--tokens", "1e12", "--days", "-5"), "--days"),
        ("plan-days-zero", (*plan, "--tokens", "1e12", "--days", "0"), "--days"),
        ("plan-days-without-tokens", (*plan, "--days", "5"), "--days"),
        ("plan-within-negative", (*plan, "--within", "-0.1"), "--within"),
        ("plan-within-nan", (*plan, "--within", "nan"), "--within"),
        ("plan-memory-fraction-nan", (*plan, "--max-memory-fraction", "nan"), "--max-memory-fraction"),
        ("plan-memory-fraction-two", (*plan, "--max-memory-fraction", "2"), "--max-memory-fraction"),
        ("plan-top-zero", (*plan, "--top", "0"), "--top"),
        ("plan-gbs-zero", (*plan_n, "8", "--gbs", "0"), "--gbs"),
        ("plan-gbs-float", (*plan_n, "8", "--gbs", "6.4"), "--gbs"),
        ("plan-gbs-absurd", (*plan_n, "8", "--gbs", "1" + "0" * 30), "--gbs"),
        ("plan-gpus-fraction", (*plan_n, "8.7", "--gbs", "64"), "--gpus"),
        ("plan-gpus-zero", (*plan_n, "0", "--gbs", "64"), "--gpus"),
        ("plan-gpus-range-from-zero", (*plan_n, "0..8", "--gbs", "64"), "--gpus"),
        ("plan-gpus-negative-range", (*plan_n, "-1..8", "--gbs", "64"),
         "--gpus"),
        ("plan-gpus-1e9", (*plan_n, "1000000000", "--gbs", "64"), "--gpus"),
        ("plan-gpus-empty-range", (*plan_n, "16..8", "--gbs", "64"), "--gpus"),
        ("plan-seq-zero", (*plan, "--seq", "0"), "--seq"),
        ("plan-seq-absurd", (*plan, "--seq", "10000000000000"), "--seq"),
        ("plan-objective-unknown", (*plan, "--objective", "speed"), "--objective"),
        ("plan-sp-maybe", (*plan, "--sp", "maybe"), "--sp"),
        ("plan-recompute-unknown", (*plan, "--recompute", "some"), "--recompute"),
        ("plan-schedule-unknown", (*plan, "--schedule", "gpipe"), "--schedule"),
        ("plan-precision-unknown", (*plan, "--precision", "fp4"), "--precision"),
        ("plan-dispatch-unknown", (*plan, "--dispatch", "nvshmem"), "--dispatch"),
        ("plan-framework-unknown", (*plan, "--framework", "jax"), "--framework"),
        ("plan-emit-unknown", (*plan, "--emit", "jax"), "--emit"),
        ("plan-unknown-option", (*plan, "--tensor-parallel", "8"), "--tensor-parallel"),
        ("explain-tp-zero", (*explain, "--tp", "0"), "--tp"),
        ("explain-zero-four", (*explain, "--zero", "4"), "--zero"),
        ("explain-mbs-negative", (*explain, "--mbs", "-1"), "--mbs"),
        ("explain-gpus-zero", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "0"), "--gpus"),
        ("explain-gpus-fraction", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8.7"), "--gpus"),
        ("explain-tp-absurd", (*explain, "--tp", "99999999999999999999"), "--tp"),
        ("explain-recompute-unknown", (*explain, "--recompute", "some"), "--recompute"),
        ("explain-schedule-unknown", (*explain, "--schedule", "gpipe"), "--schedule"),
        ("explain-attention-unknown", (*explain, "--attention", "sparse"), "--attention"),
        ("explain-p2p-on-1f1b", (*explain, "--no-p2p-overlap"), "--no-p2p-overlap"),
        ("explain-expert-load-zipf-word", ("explain", "-m", "mixtral-8x7b", "-c", "h100", "-n", "8", "--ep", "8",
                                           "--expert-load", "zipf:x"), "--expert-load"),
        ("scale-gbs-zero", ("scale", "-m", "gpt2", "-c", "h100", "-n", "8", "--gbs", "0"), "--gbs"),
        ("scale-memory-fraction-inf", (*scale, "--max-memory-fraction", "inf"), "--max-memory-fraction"),
        ("scale-gpus-word", ("scale", "-m", "gpt2", "-c", "h100", "-n", "many", "--gbs", "8"), "--gpus"),
        ("hardware-show-gpus-zero", ("hardware", "show", "h100", "--gpus", "0"), "--gpus"),
        ("hardware-show-gpus-fraction", ("hardware", "show", "h100", "--gpus", "8.5"), "--gpus"),
        ("export-index-negative", ("export", "x.json", "-f", "megatron", "--index", "-1"), "--index"),
        ("export-format-unknown", ("export", "x.json", "-f", "jax"), "--format"),
        ("bench-sizes-overflow", ("bench", "comm", "--sizes", "1e400..1G"), "--sizes"),
        ("bench-sizes-zero", ("bench", "comm", "--sizes", "0..1G"), "--sizes"),
        ("bench-nproc-one", ("bench", "comm", "--nproc", "1"), "--nproc"),
        ("bench-tokens-word", ("bench", "gemm", "--tokens", "many"), "--tokens"),
        ("bench-seq-zero", ("bench", "attention", "--seq", "0"), "--seq"),
        ("bench-repeats-zero", ("bench", "gemm", "--repeats", "0"), "--repeats"),
        ("bench-backend-unknown", ("bench", "comm", "--backend", "mpi", "--sizes", "1K"), "--backend"),
        ("nonsense-command", ("frobnicate",), "frobnicate"),
        ("models-show-no-name", ("models", "show"), "NAME"),
    ]
    out = [Case("cli", name, args, 2, hint) for name, args, hint in usage]
    out += [
        Case("cli", "version", ("--version",), 0, "parplan "),
        Case("cli", "help", ("plan", "--help"), 0, "--gbs INTEGER"),
        Case("cli", "help-no-bool", ("explain", "--help"), 0, "--sp / --no-sp"),
        Case("cli", "unknown-model", ("models", "show", "llama3.1-8bb"), 1, "did you mean 'llama3.1-8b'"),
        Case("cli", "unknown-cluster", (*plan[:4], "h1000", *plan[5:]), 1, "unknown cluster 'h1000'"),
        Case("cli", "model-path-missing", ("models", "show", "{tmp}/m.json"), 1, "no such file"),
        Case("cli", "fp8-on-a100", ("plan", "-m", "llama3.1-8b", "-c", "a100-80gb", "-n", "8", "--gbs", "64",
                                    "--precision", "fp8"), 1, "fp8"),
        Case("cli", "no-feasible-plan", ("plan", "-m", "llama3.1-405b", "-c", "h100", "-n", "8", "--gbs", "8"), 3,
             "GiB"),
        Case("cli", "explain-invalid-layout", (*explain, "--tp", "3"), 1, "does not divide the 8 GPUs"),
        Case("cli", "explain-dense-ep", (*explain, "--ep", "2"), 1, "ep=2"),
        Case("cli", "explain-layers-below-stages", ("explain", "-m", "gpt2", "-c", "h100", "-n", "16", "--pp", "16",
                                                   "--vpp", "2", "--gbs", "64"), 1, "virtual stages"),
        Case("cli", "validate-unknown-tier", ("validate", "--tier", "Z"), 0, "all"),
        Case("cli", "bench-device-typo", ("bench", "memory", "--device", "gpu0"), 1, "unknown device",
             requires="torch"),
        Case("cli", "bench-device-meta", ("bench", "attention", "--device", "meta", "--seq", "64"), 1, "meta",
             requires="torch"),
        Case("cli", "bench-cuda-absent", ("bench", "memory", "--device", "cuda:64"), 1, "cuda:64", requires="torch"),
        Case("cli", "bench-dtype-unknown", ("bench", "gemm", "--device", "cpu", "--dtype", "int4", "--model", "gpt2",
                                            "--tokens", "16"), 1, "unknown dtype", requires="torch"),
        Case("cli", "bench-cpu-out", ("bench", "memory", "--device", "cpu", "--out", "{tmp}/p.yaml"), 1, "CPU run",
             absent=("{tmp}/p.yaml",), requires="torch"),
    ]
    return out


# ------------------------------------------------------------------------------------------ output paths

def output_cases() -> list[Case]:
    explain = ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8")
    scale = ("scale", "-m", "gpt2", "-c", "h100", "-n", "8..16", "--gbs", "64")
    export = ("export", "{f}", "-f", "megatron")
    plan = dump_json(PLAN)
    runs = _runs(RUN)
    return [
        Case("output", "plot-docx", (*explain, "--plot", "{tmp}/out.docx"), 1, "'.docx'", absent=("{tmp}/out.docx",)),
        Case("output", "plot-directory", (*explain, "--plot", "{tmp}"), 1, "directory", absent=("{tmp}.png",)),
        Case("output", "plot-missing-folder", (*explain, "--plot", "{tmp}/no/x.png"), 1, "does not exist",
             absent=("{tmp}/no",)),
        Case("output", "plot-under-a-file", (*explain, "--plot", "{tmp}/f.txt/x.png"), 1, "not a folder",
             files={"f.txt": "x"}),
        Case("output", "plot-proc", (*explain, "--plot", "/proc/x.png"), 1, "cannot write"),
        Case("output", "plot-name-too-long", (*explain, "--plot", "{tmp}/" + "p" * 5000 + ".png"), 1, "pppp"),
        Case("output", "export-out-name-too-long", (*export, "--out", "{tmp}/" + "o" * 5000), 1, "oooo", plan, ".json"),
        Case("output", "plot-device", (*explain, "--plot", "/dev/null"), 1, "not a regular file"),
        Case("output", "plot-no-suffix", (*explain, "--plot", "{tmp}/chart"), 0, "chart"),
        Case("output", "plot-svg", (*explain, "--plot", "{tmp}/chart.svg"), 0, "chart.svg"),
        Case("output", "plot-json-pure", (*explain, "--plot", "{tmp}/chart.png", "--json"), 0, '"step_time_s"'),
        Case("output", "scale-plot-docx", (*scale, "--plot", "{tmp}/s.docx"), 1, "'.docx'", absent=("{tmp}/s.docx",)),
        Case("output", "scale-plot-directory", (*scale, "--plot", "{tmp}"), 1, "directory"),
        Case("output", "export-out-is-file", (*export, "--out", "{tmp}/f.txt"), 1, "not a folder", plan, ".json",
             files={"f.txt": "x"}),
        Case("output", "export-out-under-file", (*export, "--out", "{tmp}/f.txt/launch"), 1, "not a folder", plan,
             ".json", files={"f.txt": "x"}),
        Case("output", "export-out-proc", (*export, "--out", "/proc/launch"), 1, "cannot write", plan, ".json"),
        Case("output", "export-out-new-folder", (*export, "--out", "{tmp}/a/b"), 0, "wrote", plan, ".json"),
        Case("output", "export-out-json-pure", (*export, "--out", "{tmp}/a", "--json"), 0, '"written_to"', plan,
             ".json"),
        Case("output", "export-refused-writes-nothing", (*export, "--out", "{tmp}/launch"), 1, "does not divide",
             dump_json(set_path(PLAN, "strategy.tp", 3)), ".json", absent=("{tmp}/launch",)),
        Case("output", "calibrate-out-directory", ("calibrate", "--runs", "{f}", "--cluster", "h100", "--out", "{tmp}"),
             1, "directory", runs),
        Case("output", "calibrate-out-missing-folder", ("calibrate", "--runs", "{f}", "--cluster", "h100", "--out",
                                                        "{tmp}/no/c.yaml"), 1, "does not exist", runs),
        Case("output", "calibrate-out-written", ("calibrate", "--runs", "{f}", "--cluster", "h100", "--out",
                                                 "{tmp}/c.yaml"), 0, "wrote", runs),
        Case("output", "calibrate-bad-run-writes-nothing", ("calibrate", "--runs", "{f}", "--cluster", "h100",
                                                            "--out", "{tmp}/c.yaml"), 1, "field 'mine'",
             _runs(set_path(RUN, "strategy.tp", 3)), absent=("{tmp}/c.yaml",)),
    ]


# ------------------------------------------------------------------------------------------ stack files

STACK = {"name": "mine", "base": "torchtitan", "description": "my torchtitan fork",
         "kernels": {"compile": True, "host_us_per_kernel": 6.0}}
"""A user stack file: a preset and the facts that differ."""


def _preset_stack() -> dict[str, Any]:
    return yaml.safe_load((data_dir("stacks") / "megatron-core.yaml").read_text())


def stack_cases() -> list[Case]:
    show = ("stacks", "show", "{f}")
    explain = ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--tp", "8", "--zero", "2", "--stack", "{f}")
    full = _preset_stack()
    reals = ("kernels.host_us_per_kernel", "kernels.compute_scale", "communication.zero3_bucket_params")
    out = mutations("stack", STACK, reals, [b for b in BAD_REALS if b[0] not in ("zero",)], show, dump_yaml,
                    ".yaml")
    wrong = [
        ("compute-scale-zero", set_path(STACK, "kernels.compute_scale", 0), "kernels.compute_scale"),
        ("compute-scale-huge", set_path(STACK, "kernels.compute_scale", 1e9), "kernels.compute_scale"),
        ("grad-bytes-three", set_path(STACK, "communication.grad_reduce_bytes", 3), "communication.grad_reduce_bytes"),
        ("grad-bytes-float", set_path(STACK, "communication.grad_reduce_bytes", 2.0),
         "communication.grad_reduce_bytes"),
        ("grad-bytes-huge", set_path(STACK, "communication.grad_reduce_bytes", 10**30),
         "communication.grad_reduce_bytes"),
        ("compile-string", set_path(STACK, "kernels.compile", "yes please"), "kernels.compile"),
        ("attention-unknown", set_path(STACK, "kernels.attention", "fa9"), "kernels.attention"),
        ("fused-ops-string", set_path(STACK, "kernels.fused_ops", "norm"), "kernels.fused_ops"),
        ("fused-ops-unknown", set_path(STACK, "kernels.fused_ops", ["everything"]), "kernels.fused_ops"),
        ("zero-fraction", set_path(STACK, "runs.zero", [1.5]), "runs.zero"),
        ("zero-four", set_path(STACK, "runs.zero", [4]), "runs.zero"),
        ("schedule-unknown", set_path(STACK, "runs.schedules", ["gpipe"]), "runs.schedules"),
        ("parallelism-dp", set_path(STACK, "runs.parallelism", ["dp"]), "runs.parallelism"),
        ("exporter-unknown", set_path(STACK, "runs.exporter", "jax"), "runs.exporter"),
        ("exporter-version-unknown", set_path(STACK, "runs.exporter", "torchtitan@9.9"), "runs.exporter"),
        ("recompute-blocks", set_path(STACK, "recompute.full", "blocks:1.5"), "recompute.full"),
        ("recompute-kind-list", set_path(STACK, "recompute.full", ["full"]), "recompute.full"),
        ("recompute-name-unknown", set_path(STACK, "recompute.some", "full"), "recompute.some"),
        ("recompute-none-recomputes", set_path(STACK, "recompute.none", "full"), "recompute.none"),
        ("unknown-top-key", set_path(STACK, "kernel", {}), "kernel"),
        ("unknown-kernels-key", set_path(STACK, "kernels.speed", 2), "kernels.speed"),
        ("section-scalar", set_path(STACK, "kernels", 5), "kernels"),
        ("name-list", set_path(STACK, "name", ["x"]), "name"),
        ("base-number", set_path(STACK, "base", 5), "base"),
        ("description-list", set_path(STACK, "description", [1]), "description"),
        ("source-number", set_path(STACK, "sources", {"kernels.compile": 5}), "sources.kernels.compile"),
        ("fit-date", set_path(STACK, "fit", {"date": Raw("2024-01-01")}), "fit.date"),
        ("fit-prior-string", set_path(STACK, "fit", {"prior": {"compute_scale": "x"}}), "fit.prior.compute_scale"),
        ("fit-prior-unknown-knob", set_path(STACK, "fit", {"prior": {"speed": 1.0}}), "fit.prior.speed"),
        ("fit-runs-number", set_path(STACK, "fit", {"runs": 5}), "fit.runs"),
        ("fit-run-error-nan", set_path(STACK, "fit", {"runs": {"r": {"before": Raw(".nan"), "after": 0.1}}}),
         "fit.runs.r.before"),
        ("full-missing-section", set_path(full, "runs", DELETE), "runs"),
        ("full-missing-field", set_path(full, "kernels.attention", DELETE), "kernels.attention"),
    ]
    out += [Case("stack", name, show, 1, f"field '{key}'", dump_yaml(doc)) for name, doc, key in wrong]
    out += [
        Case("stack", "valid-explain", explain, 0, "step time", dump_yaml(STACK)),
        Case("stack", "valid-json", (*show, "--json"), 0, '"name": "mine"', dump_yaml(STACK)),
        Case("stack", "full-valid", show, 0, "mine", dump_yaml({**full, "name": "mine"})),
        Case("stack", "base-unknown", show, 1, "did you mean 'torchtitan'",
             dump_yaml(set_path(STACK, "base", "torchtitn"))),
        Case("stack", "base-upper-case", show, 0, "mine", dump_yaml(set_path(STACK, "base", "TorchTitan"))),
        Case("stack", "markup-in-name", show, 0, "[/]x", dump_yaml(set_path(STACK, "name", "[/]x"))),
        Case("stack", "explain-compile-without-path", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                                       "--stack", "{f}", "--compile"), 2, "no compile path",
             dump_yaml(set_path(STACK, "kernels.compile_scope", "none"))),
        Case("stack", "plan-on-stack-file", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8",
                                             "--tp", "8", "--stack", "{f}", "--json"), 0, '"plans"', dump_yaml(STACK)),
        Case("stack", "runs-stack-file-beside", ("validate", "--data", "{f}"), 0, "mine",
             _runs(set_path(set_path(RUN, "stack", "mystack"), "strategy.zero", 2)),
             files={"stacks/mystack.yaml": dump_yaml(STACK)}),
        Case("stack", "runs-stack-file-broken", ("validate", "--data", "{f}"), 1, "field 'mine.stack'",
             _runs(set_path(RUN, "stack", "mystack")),
             files={"stacks/mystack.yaml": dump_yaml(set_path(STACK, "kernels.compute_scale", Raw(".nan")))}),
        Case("stack", "runs-stack-unknown", ("validate", "--data", "{f}"), 1, "did you mean 'torchtitan'",
             _runs(set_path(RUN, "stack", "torchtitn"))),
        Case("stack", "runs-stack-number", ("validate", "--data", "{f}"), 1, "field 'mine.stack'",
             _runs(set_path(RUN, "stack", 5))),
        Case("stack", "runs-compile-string", ("validate", "--data", "{f}"), 1, "field 'mine.compile'",
             _runs(set_path(RUN, "compile", "on"))),
        Case("stack", "runs-compile-without-path", ("validate", "--data", "{f}"), 1, "field 'mine.stack'",
             _runs(set_path(RUN, "compile", True))),
        Case("stack", "calibrate-stack-out-directory", ("calibrate", "--stack", "{f}", "--out", "{tmp}"), 1,
             "directory", dump_yaml(STACK)),
        Case("stack", "calibrate-stack-no-runs", ("calibrate", "--stack", "{f}", "--runs", "{tmp}/r.yaml"), 1,
             "no tier A or B runs", dump_yaml(STACK), files={"r.yaml": _runs(RUN)}),
    ]
    out += file_level_cases("stack-file", show, ".yaml", dump_yaml(STACK))
    return out


# ---------------------------------------------------------------------------------- serving data files

def _serving_csv() -> tuple[list[str], list[str]]:
    """The header and first row of the shipped measured-rows CSV."""
    import csv

    with open(data_dir("serving") / "serving_measured.csv", newline="") as f:
        rows = csv.reader(f)
        return next(rows), next(rows)


def _csv(header: list[str], row: list[str]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerow(row)
    return out.getvalue()


def _published() -> dict[str, Any]:
    entries = yaml.safe_load((data_dir("serving") / "published_serving.yaml").read_text())
    return next(e for e in entries if e["id"] == "sglang_ep_h100_prefill_isl4096")


def serving_data_cases() -> list[Case]:
    validate = ("validate", "--serving", "{f}")
    header, row = _serving_csv()
    valid = _csv(header, row)

    def cell(column: str, value: str) -> str:
        changed = list(row)
        changed[header.index(column)] = value
        return _csv(header, changed)

    def without(column: str) -> str:
        i = header.index(column)
        return _csv(header[:i] + header[i + 1:], row[:i] + row[i + 1:])

    out = [Case("serving-csv", f"missing-{c}", validate, 1, f"field '{c}'", without(c), ".csv")
           for c in ("isl", "osl", "backend", "mode", "model_path", "tp_size", "silicon_ttft_ms")]
    bad_cells = [("isl", "0"), ("isl", "-5"), ("isl", "nan"), ("isl", "1.5"), ("isl", "many"), ("osl", "inf"),
                 ("silicon_ttft_ms", "0"), ("silicon_ttft_ms", "nan"), ("silicon_tpot_ms", "-1"),
                 ("backend", "vlm"), ("mode", "both"), ("gemm_quant_mode", "fp9"), ("tp_size", "0"),
                 ("tp_size", "x"), ("model_path", "")]
    out += [Case("serving-csv", f"{c}={v or 'empty'}", validate, 1, f"field '{c}'", cell(c, v), ".csv")
            for c, v in bad_cells]
    out += [
        Case("serving-csv", "valid", (*validate, "--json"), 0, '"rows"', valid, ".csv"),
        Case("serving-csv", "header-only", validate, 0, "", _csv(header, row)[:valid.index("\n") + 1], ".csv"),
        Case("serving-csv", "field-over-csv-limit", validate, 1, "not valid CSV",
             cell("silicon_data_source", "x" * 200_000), ".csv"),
        Case("serving-csv", "tp-absurd-row-refused", (*validate, "--json"), 0, '"error": "field', cell(
            "tp_size", "99999999999999999999"), ".csv"),
        Case("serving-csv", "unknown-system-row-refused", (*validate, "--json"), 0, "no cluster preset",
             cell("system", "tpu_v9"), ".csv"),
        Case("serving-csv", "wrong-suffix", ("validate", "--serving", "{f}"), 1, "expected a .csv", valid, ".txt"),
        Case("serving-csv", "file-without-serving", ("validate", "{f}"), 2, "FILE", valid, ".csv"),
    ]
    out += [c for c in file_level_cases("serving-csv-file", validate, ".csv", valid, mapping=False, yaml_like=False)
            if c.name not in ("deep-json", "deep-nesting")]  # nesting means nothing in CSV
    entry = _published()
    wrong = [("workload.isl", 0), ("workload.isl", Raw(".nan")), ("workload.isl", 10**30), ("workload.isl", "x"),
             ("workload.tokens_per_gpu", 1e300), ("measured.input_tok_s_per_node", -5),
             ("measured.input_tok_s_per_node", Raw(".inf")), ("gpu", [1]), ("layout", 5), ("precision", "fp8")]
    out += [Case("serving-yaml", f"{path}={value.text if isinstance(value, Raw) else value}", validate, 1,
                 f"field '{path}'", dump_yaml([set_path(entry, path, value)])) for path, value in wrong]
    out += [
        Case("serving-yaml", "valid", validate, 0, "input_tok_s_per_node", dump_yaml([entry])),
        Case("serving-yaml", "id-missing", validate, 1, "field 'id'", dump_yaml([set_path(entry, "id", DELETE)])),
        Case("serving-yaml", "id-number", validate, 1, "field 'id'", dump_yaml([set_path(entry, "id", 5)])),
        Case("serving-yaml", "entry-scalar", validate, 1, "entry 1", "- 5\n"),
        Case("serving-yaml", "gpu-unknown-refused", (*validate, "--json"), 0, "no cluster preset",
             dump_yaml([set_path(entry, "gpu.type", "h999")])),
        Case("serving-yaml", "kind-unknown-refused", (*validate, "--json"), 0, "does not reproduce",
             dump_yaml([set_path(entry, "kind", "weird")])),
    ]
    out += file_level_cases("serving-yaml-file", validate, ".yaml", dump_yaml([entry]), mapping=False)
    return out


# ------------------------------------------------------------------------------------ serve and stacks CLI

def serve_cli_cases() -> list[Case]:
    explain = ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--concurrency", "8")
    moe = ("serve", "explain", "-m", "qwen3-30b-a3b", "-c", "h100", "--concurrency", "8", "--tp", "2")
    plan = ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--mode", "aggregated")
    usage = [
        ("explain-isl-zero", (*explain, "--isl", "0"), "--isl"),
        ("explain-osl-negative", (*explain, "--osl", "-1"), "--osl"),
        ("explain-isl-absurd", (*explain, "--isl", "10000000000000"), "--isl"),
        ("explain-isl-past-context", (*explain, "--isl", "1000000"), "--isl"),
        ("explain-tp-zero", (*explain, "--tp", "0"), "--tp"),
        ("explain-tp-absurd", (*explain, "--tp", "1000000000000"), "--tp"),
        ("explain-workers-times-tp-absurd", (*explain, "--tp", "8", "--workers", "16777216"), "--workers"),
        ("explain-batch-zero", (*explain, "--batch", "0"), "--batch"),
        ("explain-concurrency-zero", (*explain, "--concurrency", "0"), "--concurrency"),
        ("explain-concurrency-and-rate", (*explain, "--rate", "5"), "--concurrency"),
        ("explain-rate-nan", ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--rate", "nan"), "--rate"),
        ("explain-rate-inf", ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--rate", "inf"), "--rate"),
        ("explain-rate-negative", ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--rate", "-2"), "--rate"),
        ("explain-prefix-one", (*explain, "--prefix-hit", "1"), "--prefix-hit"),
        ("explain-prefix-nan", (*explain, "--prefix-hit", "nan"), "--prefix-hit"),
        ("explain-range-ratio-zero", (*explain, "--range-ratio", "0"), "--range-ratio"),
        ("explain-range-ratio-nan", (*explain, "--range-ratio", "nan"), "--range-ratio"),
        ("explain-acceptance-two", (*explain, "--mtp", "1", "--acceptance", "2"), "--acceptance"),
        ("explain-mtp-absurd", (*explain, "--mtp", "100000000"), "--mtp"),
        ("explain-mtp-negative", (*explain, "--mtp", "-1"), "--mtp"),
        ("explain-chunk-zero", (*explain, "--chunk-tokens", "0"), "--chunk-tokens"),
        ("explain-chunk-float", (*explain, "--chunk-tokens", "1e3"), "--chunk-tokens"),
        ("explain-engine-typo", (*explain, "--engine", "vlm"), "did you mean 'vllm'"),
        ("explain-precision-unknown", (*explain, "--precision", "fp9"), "--precision"),
        ("explain-precision-part-unknown", (*explain, "--precision", "gemm=fp8,attn=fp8"), "--precision"),
        ("explain-kv-unknown", (*explain, "--kv-cache", "fp9"), "--kv-cache"),
        ("explain-a2a-unknown", (*explain, "--a2a", "nccl"), "--a2a"),
        ("explain-prefill-alone", (*explain, "--prefill", "tp=1"), "--prefill"),
        ("explain-prefill-word", (*explain, "--prefill", "tp=x", "--decode", "tp=1"), "--prefill"),
        ("explain-prefill-unknown-key", (*explain, "--prefill", "gpus=8", "--decode", "tp=1"), "--prefill"),
        ("explain-decode-absurd", (*explain, "--prefill", "tp=1", "--decode", "tp=99999999999999999999"),
         "--decode"),
        ("explain-redundant-negative", (*explain, "--redundant-experts", "-1"), "--redundant-experts"),
        ("plan-gpus-zero", ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "0"), "--gpus"),
        ("plan-gpus-absurd", ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "1000000000"), "--gpus"),
        ("plan-gpus-beyond-serving", ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16384"), "4,096"),
        ("plan-gpus-range-beyond-serving", ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "1..65536"),
         "--gpus"),
        ("plan-ttft-negative", (*plan, "--ttft-ms", "-5"), "--ttft-ms"),
        ("plan-tpot-nan", (*plan, "--tpot-ms", "nan"), "--tpot-ms"),
        ("plan-mode-unknown", (*plan[:-2], "--mode", "split"), "--mode"),
        ("plan-engine-typo", (*plan, "--engine", "sglng"), "did you mean 'sglang'"),
        ("plan-emit-unknown", (*plan, "--emit", "triton"), "--emit"),
        ("plan-emit-other-engine", (*plan, "--engine", "vllm", "--emit", "sglang"), "--emit"),
        ("plan-precision-unknown", (*plan, "--precision", "fp9"), "--precision"),
        ("plan-max-pp-zero", (*plan, "--max-pp", "0"), "--max-pp"),
        ("plan-top-absurd", (*plan, "--top", "1000000"), "--top"),
        ("plan-redundant-negative", (*plan, "--redundant-experts", "-4"), "--redundant-experts"),
        ("plan-concurrency-and-rate", (*plan, "--concurrency", "8", "--rate", "5"), "--rate"),
        ("plan-isl-zero", (*plan, "--isl", "0"), "--isl"),
        ("plan-mtp-absurd", (*plan, "--mtp", "1000"), "--mtp"),
        ("stacks-show-no-name", ("stacks", "show"), "NAME"),
        ("stacks-unknown-subcommand", ("stacks", "edit"), "edit"),
        ("plan-time-limit-zero", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8",
                                  "--time-limit", "0"), "--time-limit"),
        ("plan-time-limit-nan", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8",
                                 "--time-limit", "nan"), "--time-limit"),
        ("scale-time-limit-negative", ("scale", "-m", "gpt2", "-c", "h100", "-n", "8..16", "--gbs", "64",
                                       "--time-limit", "-1"), "--time-limit"),
        ("validate-time-limit-inf", ("validate", "--rank", "--time-limit", "inf"), "--time-limit"),
        ("explain-recompute-blocks-above-one", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                                "--recompute", "blocks:1.5"), "--recompute"),
        ("explain-recompute-blocks-word", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                           "--recompute", "blocks:half"), "--recompute"),
        ("explain-dp-replicate-zero", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                       "--dp-replicate", "0"), "--dp-replicate"),
        ("export-format-version-unknown", ("export", "x.json", "-f", "torchtitan@9.9"), "--format"),
        ("plan-framework-version-unknown", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8",
                                            "--framework", "megatron@v0"), "--framework"),
        ("calibrate-neither", ("calibrate",), "--cluster"),
        ("calibrate-cluster-without-runs", ("calibrate", "--cluster", "h100"), "--runs"),
        ("validate-file-without-serving", ("validate", "x.csv"), "FILE"),
    ]
    out = [Case("serve-cli", name, args, 2, hint) for name, args, hint in usage]
    out += [
        Case("serve-cli", "explain-valid-json", (*explain, "--json"), 0, '"ttft_ms"'),
        Case("serve-cli", "explain-huge-fleet", ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--tp", "8",
                                                 "--workers", "2000000", "--concurrency", "16000000"), 0, "TTFT"),
        Case("serve-cli", "explain-fits-80-columns", explain, 0, "TTFT"),
        Case("serve-cli", "explain-tp-not-dividing-heads", (*explain, "--tp", "3"), 1, "must divide the 32"),
        Case("serve-cli", "explain-pp-not-dividing-layers", (*explain, "--pp", "5"), 1, "must divide the 32 layers"),
        Case("serve-cli", "explain-ep-on-dense", (*explain, "--tp", "2", "--moe-ep", "2"), 1, "dense model"),
        Case("serve-cli", "explain-ep-not-dividing-experts", (*moe, "--moe-ep", "2", "--redundant-experts", "1"),
             1, "must divide the 128 experts"),
        Case("serve-cli", "explain-moe-ep-not-dividing-gpus", (*explain, "--moe-ep", "3"), 1, "must divide"),
        Case("serve-cli", "explain-fp8-on-a100", ("serve", "explain", "-m", "llama3.1-8b", "-c", "a100-80gb",
                                                  "--concurrency", "8", "--precision", "fp8"), 1, "fp8"),
        Case("serve-cli", "explain-unknown-model", ("serve", "explain", "-m", "llama9", "-c", "h100",
                                                    "--concurrency", "8"), 1, "unknown model"),
        Case("serve-cli", "explain-model-file-broken", ("serve", "explain", "-m", "{f}", "-c", "h100",
                                                        "--concurrency", "8"), 1, "input.json", "{", ".json"),
        Case("serve-cli", "plan-valid-json", (*plan, "--json"), 0, '"plans"'),
        Case("serve-cli", "plan-emit-json-pure", (*plan, "--emit", "vllm", "--json"), 0, '"launch"'),
        Case("serve-cli", "plan-table", plan, 0, "best deployments"),
        Case("serve-cli", "plan-sizes", ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "1..4",
                                         "--mode", "aggregated", "--rate", "2"), 0, "Best deployment per GPU"),
        Case("serve-cli", "plan-unreachable-targets", (*plan, "--ttft-ms", "0.001"), 3, "TTFT"),
        Case("serve-cli", "validate-serving-json", ("validate", "--serving", "--json"), 0, '"by_engine"'),
        Case("serve-cli", "validate-serving-missing-file", ("validate", "--serving", "{tmp}/none.csv"), 1,
             "no such file"),
        Case("serve-cli", "stacks-list", ("stacks", "list"), 0, "megatron-core"),
        Case("serve-cli", "stacks-list-json", ("stacks", "list", "--json"), 0, '"stacks"'),
        Case("serve-cli", "stacks-show-typo", ("stacks", "show", "megatron"), 1, "did you mean 'megatron-core'"),
        Case("serve-cli", "stacks-show-missing-file", ("stacks", "show", "{tmp}/s.yaml"), 1, "no such file"),
        Case("serve-cli", "stacks-show-directory", ("stacks", "show", "{tmp}/d.yaml"), 1, "directory",
             files={"d.yaml/x": "x"}),
        Case("serve-cli", "stacks-show-name-too-long", ("stacks", "show", "{tmp}/" + "s" * 5000 + ".yaml"), 1,
             "ssss"),
        Case("serve-cli", "stacks-show-no-compile", ("stacks", "show", "maxtext", "--no-compile"), 2,
             "always runs compiled"),
        Case("serve-cli", "explain-stack-typo", ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8",
                                                 "--stack", "torchtitn"), 1, "did you mean 'torchtitan'"),
        Case("serve-cli", "explain-dualpipe-on-megatron", ("explain", "-m", "deepseek-v3", "-c", "h800", "-n",
                                                           "2048", "--pp", "16", "--ep", "64", "--gbs", "15360",
                                                           "--schedule", "dualpipe", "--precision", "fp8"), 1,
             "megatron-core"),
        Case("serve-cli", "plan-time-limit-json", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs",
                                                   "8", "--time-limit", "1e-9", "--json"), 0, '"complete": false'),
        Case("serve-cli", "plan-compile-on-deepseek", ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs",
                                                       "8", "--stack", "deepseek", "--compile"), 2, "--compile"),
        Case("serve-cli", "validate-stack-typo", ("validate", "--group", "korthikanti22", "--stack", "fdsp"), 1,
             "did you mean 'fsdp'"),
    ]
    return out


KINDS: tuple[Callable[[], list[Case]], ...] = (hf_cases, model_yaml_cases, cluster_cases, runs_cases, plan_cases,
                                               expert_count_cases, nccl_cases, cli_cases, output_cases,
                                               stack_cases, serving_data_cases, serve_cli_cases)
"""Every builder; a new input kind adds its own."""


def all_cases() -> list[Case]:
    cases = [case for build in KINDS for case in build()]
    ids = [c.id for c in cases]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"duplicate case ids: {sorted(duplicates)}"
    assert all(math.isfinite(c.code) for c in cases)
    return cases
