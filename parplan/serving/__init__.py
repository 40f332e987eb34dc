"""What it costs to serve a model: prefill, decode, KV cache, batching, disaggregation (``serve explain``), and
the best deployment under latency targets (``serve plan``)."""

from parplan.serving.engines import Engine, load_engine
from parplan.serving.evaluate import ServingEstimate, serve_evaluate
from parplan.serving.plan import ServePlan, serve_plan
from parplan.serving.spec import Deployment, Pool, Precision, Workload

__all__ = [
    "Deployment",
    "Engine",
    "Pool",
    "Precision",
    "ServePlan",
    "ServingEstimate",
    "Workload",
    "load_engine",
    "serve_evaluate",
    "serve_plan",
]
