"""Fit each engine's routed-expert kernel ceiling (engines.yaml moe_gemm_fraction) to its MoE micro-benchmarks.

    python benchmarks/moe_kernel_fit.py

Per engine, GPU architecture and expert weight format, solves for the share of the GPU's measured dense GEMM
ceiling (efficiency.gemm_ceiling) at which parplan's routed-expert time has zero median log error against
aiconfigurator's measured MoE ops (parplan.serving.moe_kernels; the samples in data/serving/moe_kernels.csv).
Prints, per group, the median absolute error of the time with the dense GEMM ceiling, with the fitted share and
with the shipped table, then the table
engines.yaml carries (groups whose dense ceiling already predicts them as slow as measured keep it). Seconds on 2
cores.
"""

from __future__ import annotations

from parplan.serving.engines import load_engine
from parplan.serving.kernel_fit import median_error
from parplan.serving.moe_kernels import fit_fraction, log_errors, samples, with_fraction


def main() -> None:
    table: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'engine':7s} {'arch':9s} {'format':6s} {'rows':>5s}  {'share':>8s}  median |error|: dense, fitted, "
          "shipped")
    for key, group in sorted(samples().items()):
        name, arch, weights = key
        engine = load_engine(name)
        fraction = fit_fraction(engine, key, group)
        dense = median_error(log_errors(with_fraction(engine, arch, weights, None), group))
        fitted = median_error(log_errors(with_fraction(engine, arch, weights, fraction), group))
        shipped = median_error(log_errors(engine, group))
        shown = "dense" if fraction is None else f"{fraction:.3f}"
        print(f"{name:7s} {arch:9s} {weights:6s} {len(group):5d}  {shown:>8s}  {dense:6.1%}  {fitted:6.1%}  "
              f"{shipped:6.1%}")
        if fraction is not None:
            table.setdefault(name, {}).setdefault(arch, {})[weights] = fraction
    print("\nmoe_gemm_fraction (engines.yaml):")
    for name, arches in table.items():
        inner = (f"{a}: {{{', '.join(f'{w}: {v}' for w, v in f.items())}}}" for a, f in arches.items())
        print(f"  {name}: {{{', '.join(inner)}}}")


if __name__ == "__main__":
    main()
