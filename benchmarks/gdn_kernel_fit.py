"""Fit each engine's chunked Gated DeltaNet prefill rate (engines.yaml gdn_prefill_fraction) to its micro-benchmarks.

    python benchmarks/gdn_kernel_fit.py

Per engine and GPU architecture, solves for the share of the GPU's bf16 peak at which parplan's GDN prefill time
has zero median log error against aiconfigurator's measured chunked kernels (parplan.serving.gdn_kernels; the samples
in data/serving/gdn_kernels.csv). Prints, per group, the median absolute error of the time at the flash-attention
fraction parplan used before, at the fitted share and with the shipped table, then the table engines.yaml carries.
Seconds on 2 cores.
"""

from __future__ import annotations

from parplan.serving.engines import load_engine
from parplan.serving.gdn_kernels import fit_fraction, log_errors, samples, with_fraction
from parplan.serving.kernel_fit import median_error


def main() -> None:
    table: dict[str, dict[str, float]] = {}
    print(f"{'engine':7s} {'arch':9s} {'rows':>5s}  {'share':>8s}  median |error|: flash fraction, fitted, shipped")
    for key, group in sorted(samples().items()):
        name, arch = key
        engine = load_engine(name)
        fraction = fit_fraction(engine, arch, group)
        flash = median_error(log_errors(with_fraction(engine, arch, None), group))
        fitted = median_error(log_errors(with_fraction(engine, arch, fraction), group))
        shipped = median_error(log_errors(engine, group))
        print(f"{name:7s} {arch:9s} {len(group):5d}  {fraction:8.4f}  {flash:7.1%}  {fitted:6.1%}  {shipped:6.1%}")
        table.setdefault(name, {})[arch] = fraction
    print("\ngdn_prefill_fraction (engines.yaml):")
    for name, arches in table.items():
        print(f"  {name}: {{{', '.join(f'{a}: {v}' for a, v in arches.items())}}}")


if __name__ == "__main__":
    main()
