"""Bounds on the sizes and counts an input may state, in one module that loads nothing heavy, so that the
command line checks its options against the very bounds the specs and the planner apply.

The upper bounds only refuse the absurd (a billion GPUs or layers would hang the cost model or exhaust memory),
with the reason, up front; every real run lies far inside them.
"""

from parplan.models.spec import RANGES

MAX_GPUS = 2**24
"""Most GPUs a cluster may hold: 80 times the largest built (about 200,000 GPUs)."""
MAX_PLAN_GPUS = 2**20
"""Most GPUs `plan` searches layouts for (a larger cluster is a valid input, refused by the search up front): five
times the largest cluster built, and what the search's grid enumeration is sized for."""
MAX_BATCH = 2**24
"""Most sequences in a global (or micro-) batch: a thousand times DeepSeek-V3's 15,360."""
MAX_SEQ = RANGES["max_position"][1]
"""Longest sequence, tokens: the longest position range a model may declare."""
SPEC_VALUES = 4096
"""Most values one list or range option may stand for (a range of every pipeline depth to 128 has 128)."""
MAX_MTP = 64
"""Most speculative tokens drafted per step: each is kept only if all before it were, so with an acceptance a < 1
a chain adds less than a / (1 − a) tokens per step; far beyond tens of drafts nothing changes but the cost. The
bound refuses only the absurd (a billion drafts would hang the step model)."""
MAX_BATCH_WAIT_ITERS = 10_000
"""Most steps a serving deployment may hold new prompts for (TensorRT-LLM batch_wait_timeout_iters, and
attention_dp_config timeout_iters and batching_wait_iters): over a hundred and fifty times the largest published
setting (50 and 60 in InferenceX's TensorRT-LLM recipes); only the absurd is refused. It bounds SGLang's
--scheduler-recv-interval too (decode steps between polls for new requests; 30 in InferenceX's recipes)."""
MAX_RATE = 1e9
"""Most requests per second a serving workload may state: only the absurd is refused (a rate that overflows the
queueing arithmetic)."""
MAX_SERVE_GPUS = 4096
"""Most GPUs `serve plan` searches one deployment over. Its search counts replicas and disaggregated worker pairs
one by one, so time and memory grow with the GPU count (4,096 GPUs: about 30 s and a few hundred MiB on 2 cores;
16,384 exhausted 24 GiB), and a larger fleet is replicas of a smaller deployment anyway."""
