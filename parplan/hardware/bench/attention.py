"""Attention benchmark: `torch.nn.functional.scaled_dot_product_attention` forward and backward, for
`fit.fit_attention`. torch picks the fused kernel (FlashAttention on recent GPUs), as training does."""

from __future__ import annotations

from collections.abc import Iterable

from parplan.hardware.bench import device_name, require_torch, resolve_device, time_call, torch_dtype
from parplan.hardware.samples import AttentionSample


def run_attention(shapes: Iterable[tuple[int, int, int, int]], *, causal: bool = True, dtype: str = "bf16",
                  repeats: int = 10, warmup: int = 3, device: str | None = None) -> list[AttentionSample]:
    """Time attention on q, k, v of each shape (batch, heads, seq, head_dim); one sample per shape.

    The forward is timed with autograd recording, as in training; the backward is the gradient of q, k
    and v for one forward (kept with retain_graph, so only the backward kernels are timed).
    """
    torch = require_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dev = resolve_device(device)
    name = device_name(dev)
    samples = []
    for batch, heads, seq, head_dim in shapes:
        q, k, v = (torch.randn(batch, heads, seq, head_dim, device=dev, dtype=torch_dtype(dtype),
                               requires_grad=True) for _ in range(3))
        fwd = time_call(lambda q=q, k=k, v=v: sdpa(q, k, v, is_causal=causal), dev, repeats=repeats,
                        warmup=warmup)
        out = sdpa(q, k, v, is_causal=causal)
        grad = torch.randn_like(out)
        bwd = time_call(lambda out=out, grad=grad, inputs=(q, k, v): torch.autograd.grad(
            out, inputs, grad, retain_graph=True), dev, repeats=repeats, warmup=warmup)
        samples.append(AttentionSample(batch=batch, heads=heads, seq=seq, head_dim=head_dim, causal=causal,
                                       fwd_us=fwd * 1e6, bwd_us=bwd * 1e6, device=name, dtype=dtype))
    return samples
