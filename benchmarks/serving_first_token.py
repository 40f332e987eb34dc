"""Where the measured rows' fixed first-token time lies: by export, attention kind and engine.

    python benchmarks/serving_first_token.py [--max-concurrency 16]

Predicts the shipped measured rows with each engine's per-request knob (request_ms) at zero, keeps the aggregated
rows measured with few requests in flight (nothing queues there, so TTFT is the request's own time), and prints
the median of measured − predicted TTFT: the time to a first token the modelled steps leave unexplained, which
the knob absorbs. Rows are grouped by the export they come from (aiconfigurator's gap-analysis files, named in
silicon_data_source: cases.GENERATED_SOURCE, or the others), the model's attention kind (MLA or
not) and the engine: an offset that follows the export in every engine is the measurement harness's, one that
follows the attention kind in some engines is the engine's. Seconds on 2 cores.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from parplan.models import load_model
from parplan.serving.calibrate import with_knobs
from parplan.serving.cases import GENERATED_SOURCE, read_measured_csv
from parplan.serving.engines import load_engine
from parplan.serving.spec import ENGINES
from parplan.serving.validate import evaluate_cases, shipped_files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-concurrency", type=int, default=16)
    args = parser.parse_args()
    cases = [c for c in read_measured_csv(shipped_files()[0])
             if c.workload is not None and c.deployment is not None and c.deployment.mode == "aggregated"
             and c.workload.concurrency is not None and c.workload.concurrency <= args.max_concurrency]
    engines = {name: with_knobs(load_engine(name), {"request_ms": 0.0}) for name in ENGINES}
    groups: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    for r in evaluate_cases(cases, engines):
        if r.error is not None:
            continue
        export = "gap-analysis" if GENERATED_SOURCE in r.case.source else "other exports"
        attention = "MLA" if load_model(r.case.model).attention.mla is not None else "GQA/MHA"
        groups[(export, attention, r.case.engine)].append(r.case.measured["ttft_ms"] - r.predicted["ttft_ms"])
    print(f"aggregated rows at <= {args.max_concurrency} requests in flight, request_ms = 0: "
          "measured − predicted TTFT, ms")
    print(f"{'export':15s} {'attention':10s} {'engine':7s} {'rows':>5s} {'median':>8s} {'p25':>7s} {'p75':>7s}")
    for (export, attention, engine), diff in sorted(groups.items()):
        p25, p50, p75 = np.percentile(diff, [25, 50, 75])
        print(f"{export:15s} {attention:10s} {engine:7s} {len(diff):5d} {p50:8.1f} {p25:7.1f} {p75:7.1f}")
    knobs = ", ".join(f"{name} {load_engine(name).knobs.request_ms:.0f} ms" for name in ENGINES)
    print(f"shipped request_ms: {knobs}")


if __name__ == "__main__":
    main()
