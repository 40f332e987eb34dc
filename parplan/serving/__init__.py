"""What it costs to serve a model: prefill, decode, KV cache, batching, disaggregation (``serve explain``)."""

from parplan.serving.engines import Engine, load_engine
from parplan.serving.evaluate import ServingEstimate, serve_evaluate
from parplan.serving.spec import Deployment, Pool, Precision, Workload

__all__ = [
    "Deployment",
    "Engine",
    "Pool",
    "Precision",
    "ServingEstimate",
    "Workload",
    "load_engine",
    "serve_evaluate",
]
