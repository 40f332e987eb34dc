"""The names users choose from: a layout's categorical settings and the frameworks plans are written for.

Plain tuples with no imports, so that the command line can list them in its help without loading numpy or
the cost model; `parplan.planner.strategy` and `parplan.export` read them from here.
"""

RECOMPUTE = ("none", "selective", "modules", "full")
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev")
PRECISIONS = ("bf16", "fp8")
DISPATCHERS = ("alltoall", "deepep", "deepep-fp8")
"""How MoE tokens travel: alltoall sends every routed copy (Megatron's alltoall dispatcher); deepep sends
one copy per destination node and forwards it over NVLink there (DeepEP, Megatron's flex dispatcher);
deepep-fp8 also dispatches in fp8 (combine stays bf16), as DeepSeek-V3 trained."""
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
"""Each is the module parplan.export.<name>, imported when first used."""
