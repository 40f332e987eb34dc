"""Continuous batching with chunked prefill, in steady state: TTFT, TPOT and throughput of an aggregated
attention rank serving a closed loop of requests (each finished request replaced at once, as aiperf's
concurrency mode does) or an open-loop arrival rate.

A request prefills its P = isl·(1 − prefix hit) tokens over n_p = ⌈P / K⌉ steps (K: the engine's token budget
per step, less the decode tokens where the budget counts them; one step when the engine does not chunk), then
decodes OSL − 1 more tokens, one per step (more with speculative decoding). With R requests resident,
x = R / (n_p + (OSL − 1)/τ) requests finish per step (τ: tokens per decode step); their prompts add x·P
prefill tokens per step, carried by a share f of the steps ("mixed" steps of c tokens each; engines that do not
mix run a prefill batch and then the decode batch) while the rest only decode. A decoding sequence waits for the
steps of its span, which carry the prompts of the other requests only: its own prompt, and those of its burst
prefilled before it, were done before its first token (in TTFT). Of the R requests, (β_R + 1)/2 (β_R: the burst
size below) are thus not prefilled during its span, so its steps carry prefill a share f_s = f·(R − (β_R + 1)/2)/R
of the time, and

    TPOT = (f_s·t_mix + (1 − f_s)·t_dec) / τ        (one request alone: TPOT = t_dec).

Under attention DP the MoE layers join the dp ranks of a stage in every step, so a step lasts as long as its
slowest rank: it carries prefill whenever any rank does. Each rank admits its own requests, so a share
1 − (1 − f)^dp of the steps carry prefill (f_s on the sequence's own rank), as SGLang's PrefillDelayer describes
("when all DP ranks are at full capacity and one rank finishes a request, starting a prefill causes other ranks to
idle": sgl-project/sglang python/sglang/srt/managers/prefill_delayer.py @1f77e43).

Requests that finish together are replaced together, so prompts arrive in bursts: a share β of the requests
in flight arrive with a request (the engine's burst knob where steps mix prefill and decode; all of them, β = 1,
where the engine runs prefill first and pauses decoding, which keeps the loop phase-locked as long as requests that
start together finish together: where the client draws their output lengths they finish over a spread of steps,
and the knob applies there too), and the burst is prefilled first come, first served in steps of the budget. A
new request waits half a step to be scheduled, then for its burst's steps up to its own: n_p (the last chunk
carrying only what is left of the prompt), or (burst tokens / step tokens + 1)/2 on average when the burst needs
more steps than its prompt.
Where the deployment turns on TensorRT-LLM's batch waiting, a new prompt is held while others decode, until
enough prompts gather or a number of steps pass (batch_wait below), and those held go as one burst. Its
attention-DP balance holds prompts until every DP rank has one, or a number of steps pass (dp_balance below):
then all ranks prefill in the same steps, and a step carries prefill only as often as one rank's prompts need.
Where the scheduler polls for new requests only every N decode steps (SGLang's --scheduler-recv-interval), a
request that arrives while others decode waits for the next poll, (N − 1)/2 decode steps more on average; a step
that carries prefill is followed by a poll at once, so only the share of steps that only decode is spaced out. A
closed loop's arrival finds the others decoding, unless the loop is phase-locked (then the whole set is replaced
at once on an idle rank); an open loop's finds the rank busy as often as it holds a request; a request that queues
for a slot was polled long before one frees. Drawn lengths unlock the loop as far as they spread a lockstep group's
ends: over W decode steps a 1/W share of it ends together, never less than the engine's share (InferenceX's clients
draw over a fifth of the output, hundreds of steps: the engine's share).
Little's law closes the loop: throughput X = R / latency, and the C − R requests that find no slot (the KV
cache or the engine's max running requests being full), or that the prefill budget cannot absorb, queue:
TTFT = C/X − (OSL − 1)·TPOT.
With pipeline parallelism the rank keeps pp micro-batches in flight; a step is one pass of a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.serving.spec import BatchWait, DpBalance
from parplan.serving.step import StepModel, StepTime


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """Steady state of one attention rank (arrays over deployments), seconds unless noted."""

    ttft: np.ndarray
    tpot: np.ndarray
    throughput: np.ndarray
    """Requests completed per second by one attention rank."""
    running: np.ndarray
    """Requests resident (decoding or prefilling) on one attention rank."""
    decode_batch: np.ndarray
    """Sequences in a decode step."""
    mixed_share: np.ndarray
    """Share of steps that carry prefill tokens (on any rank of an attention-DP group: the group waits for it)."""
    rank_mixed_share: np.ndarray
    """Share of steps that carry this rank's own prefill tokens."""
    queue: np.ndarray
    """Seconds a request waits before it is admitted (no KV space, or the prefill budget is full)."""
    decode_step: StepTime
    mixed_step: StepTime


def burst_share(share: float | np.ndarray, open_loop: bool) -> float | np.ndarray:
    """Share of the others in flight that arrive with a request: a closed loop's `share` (an engine's knob: those
    that finished with the request it replaces were replaced with it), none in an open loop (independent
    arrivals)."""
    return 0.0 if open_loop else share


def burst_size(share: float | np.ndarray, in_flight: np.ndarray) -> np.ndarray:
    """Requests arriving together with a request: itself and a `share` of the others in flight (burst_share)."""
    return 1.0 + share * np.maximum(np.asarray(in_flight, dtype=float) - 1.0, 0.0)


def held_wait(burst: np.ndarray, arrivals: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean steps a prompt waits when a burst is held `steps` steps while `arrivals` prompts a step join it (the
    burst waits L steps, a prompt joining j steps in waits L − j): (burst·L + arrivals·L²/2) / (burst + arrivals·L);
    and the prompts then released together, burst + arrivals·L."""
    joining = arrivals * steps
    return (burst * steps + joining * steps / 2.0) / (burst + joining), burst + joining


def batch_wait(wait: BatchWait | None, burst: np.ndarray, arrivals: np.ndarray, decode_tokens: np.ndarray,
               prompt: np.ndarray, budget: float, applies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode steps a new prompt is held on average under TensorRT-LLM's batch waiting, and the prompts that then
    go together (the burst it makes). A hold starts when a burst arrives with none held: it lasts until the held
    prompts and the `decode_tokens` of a step reach ratio × budget, as `arrivals` prompts a step accumulate,
    or until `iters` steps have passed: L = min(iters, ((ratio·budget − decode_tokens) / prompt − burst) / arrivals),
    and the mean wait is held_wait's. `applies`: where prompts are held at all (other requests decoding, attention
    DP off: BatchWait)."""
    if wait is None or not wait.holds:
        return np.zeros_like(burst), burst
    short = np.maximum((wait.ratio * budget - decode_tokens) / prompt - burst, 0.0)
    steps = np.where(applies, np.minimum(wait.iters, short / np.maximum(arrivals, 1e-30)), 0.0)
    return held_wait(burst, arrivals, steps)


def harmonic(n: np.ndarray) -> np.ndarray:
    """H_n = 1 + 1/2 + … + 1/n (0 for n < 1), elementwise over whole numbers."""
    n = np.maximum(np.asarray(n, dtype=float), 0.0)
    table = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1.0, float(np.max(n, initial=0.0)) + 1.0))))
    return table[n.astype(np.int64)]


def dp_balance(balance: DpBalance | None, burst: np.ndarray, arrivals: np.ndarray, dp: np.ndarray,
               applies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode steps a new prompt is held on average under TensorRT-LLM's attention-DP balance, and the prompts each
    rank then prefills together (its burst). Each of the dp ranks gains `arrivals` prompts a step; a hold starts
    when one rank has a burst and lasts until every other rank has a prompt too, the latest of dp − 1 waits of
    mean 1/arrivals steps each: H_{dp−1} / arrivals steps (H: the harmonic number, for exponential waits), then
    batching_wait_iters more; or until timeout_iters steps have passed. The group gains dp·arrivals prompts a step
    meanwhile, so the mean wait is held_wait's with dp·arrivals, and each rank prefills 1/dp of the prompts
    released, in the same step as the others. `applies`: where prompts are held at all (attention DP on, other
    requests decoding: DpBalance)."""
    if balance is None or not balance.holds:
        return np.zeros_like(burst), burst
    synced = harmonic(dp - 1.0) / np.maximum(arrivals, 1e-30)
    steps = np.where(synced < balance.timeout_iters, synced + balance.batching_wait_iters, balance.timeout_iters)
    held, released = held_wait(burst, dp * arrivals, np.where(applies, steps, 0.0))
    return held, np.where(applies, released / dp, burst)


def prefill_steps(prompt: np.ndarray, budget: np.ndarray, chunked: bool) -> np.ndarray:
    """Steps one prompt's prefill takes: ⌈P / budget⌉ when the engine chunks, else one."""
    return np.ceil(prompt / np.maximum(budget, 1.0)) if chunked else np.ones_like(prompt)


def aggregated(sm: StepModel, *, isl: np.ndarray, osl: np.ndarray, prompt: np.ndarray, concurrency: np.ndarray,
               max_running: np.ndarray, chunk: float, spec: float = 1.0, tokens_per_step: float = 1.0,
               open_loop: bool = False, osl_spread: np.ndarray | float = 0.0) -> PhaseResult:
    """Closed-loop steady state of an aggregated attention rank with `concurrency` requests in flight.

    isl/osl: tokens per request; prompt: tokens it prefills (after prefix-cache hits); max_running: requests
    the rank can hold (KV cache, engine cap); chunk: the engine's token budget per step; spec: tokens a
    decoding sequence adds to a step (1 + drafts); tokens_per_step: output tokens a sequence gains per step;
    osl_spread: output tokens between the shortest and the longest request (Traffic.osl_spread)."""
    pp = sm.lay.pp
    eng = sm.engine
    running = np.minimum(concurrency, max_running)
    decode_steps = np.maximum(osl - 1, 0) / tokens_per_step
    # First pass at the steps a request lives for, to know the decode tokens a step carries.
    n_p = prefill_steps(prompt, chunk, eng.chunked_prefill)
    decoding = running * decode_steps / (n_p + decode_steps)
    budget = chunk - (decoding * spec if eng.budget_counts_decode else 0.0)
    budget = np.maximum(budget, chunk / 8.0)
    # An unchunked prompt longer than the budget still runs in one step; the budget then holds one prompt.
    budget = np.where(eng.chunked_prefill, budget, np.maximum(budget, prompt))
    n_p = prefill_steps(prompt, budget, eng.chunked_prefill)
    per_step = running / (n_p + decode_steps)
    capped = np.minimum(per_step, budget / prompt)
    # An engine that does not mix prefill into decode steps runs prefill first (SGLang's get_next_batch_to_run
    # runs a new prefill batch whenever one can be formed, decode only when none can): every request of a burst
    # starts decoding in the same step, and one whose output lengths spread over W decode steps ends a 1/W share
    # of it per step and is replaced so; below one step the closed loop stays phase-locked and the whole set in
    # flight arrives as one burst. Mixed steps prefill a burst over several steps while decoding goes on, which
    # staggers the replacements: there, as for a wide spread, only a share (the knob) stays together.
    locked = np.minimum(1.0, 1.0 / np.maximum(osl_spread / tokens_per_step, 1.0))
    together = eng.knobs.burst if eng.mixed_batches else np.maximum(eng.knobs.burst, locked)
    burst = burst_size(burst_share(together, open_loop), running)
    decode_batch = capped * decode_steps
    held, burst = batch_wait(eng.batch_wait, burst, capped, decode_batch * spec, prompt, chunk,
                             (sm.lay.dp == 1) & (running > 1))
    balanced = (sm.lay.dp > 1) & (running > 1) & (eng.dp_balance is not None)
    balance_held, burst = dp_balance(eng.dp_balance, burst, capped, sm.lay.dp, balanced)
    held = held + balance_held
    # A rank prefills at least one whole prompt in a step that carries any (a balanced release that timed out
    # before every rank had one leaves some ranks fewer than one on average).
    tokens = np.minimum(budget, prompt * np.maximum(np.maximum(burst, capped), np.where(balanced, 1.0, 0.0)))
    share = np.minimum(1.0, capped * prompt / tokens)
    # The prefill a decoding sequence waits for is that of the other requests: its own prompt, and those of its
    # burst prefilled before it ((burst − 1)/2 on average), are done before its first token (in TTFT).
    others = np.clip((running - (burst + 1.0) / 2.0) / np.maximum(running, 1.0), 0.0, 1.0)
    # Under attention DP the MoE layers synchronise the dp ranks of a stage: a step lasts as long as its slowest
    # rank, so it carries prefill whenever any rank does (each rank admits its own requests).
    sync = sm.lay.dp if sm.model.moe is not None else np.ones_like(sm.lay.dp)
    idle = (1.0 - share) ** np.maximum(sync - 1.0, 0.0)
    step_share = 1.0 - (1.0 - share) * idle
    span_share = 1.0 - (1.0 - share * others) * idle
    # Balanced ranks prefill in the same steps: a release every (burst per rank) / arrivals steps on average, and
    # more than one step where a rank's release outgrows the budget.
    aligned = np.maximum(share, np.minimum(1.0, capped / np.maximum(burst, 1e-30)))
    step_share = np.where(balanced, aligned, step_share)
    span_share = np.where(balanced, aligned * others, span_share)
    # A request's prompt is done after its own chunks, or, in a burst larger than one step holds, after the
    # steps before it in the burst: (steps of the burst + 1) / 2 on average.
    own_steps = np.maximum(n_p, (burst * prompt / tokens + 1.0) / 2.0)
    ctx = isl + (osl - 1) / 2.0
    prefix = isl - prompt
    pf_keys = prefix + prompt / 2.0
    dec = sm.step(decode_batch / pp, ctx, 0.0, 0.0, 0.0, spec=spec)

    def with_prefill(n_pf: np.ndarray, keys: np.ndarray, seqs: np.ndarray) -> tuple[StepTime, np.ndarray]:
        """The step that carries n_pf prefill tokens per stage, and the time it adds to a decode step's: the
        decode batch rides along where the engine mixes them, else a prefill batch runs on its own, then the
        decode batch."""
        if eng.mixed_batches:
            both = sm.step(decode_batch / pp, ctx, n_pf, keys, seqs, spec=spec, mixed=True)
            return both, both.total
        alone = sm.step(0.0, 0.0, n_pf, keys, seqs, mixed=True)
        return alone, alone.total + dec.total

    mix, mix_total = with_prefill(tokens / pp, pf_keys, tokens / prompt / pp)
    mean_step = step_share * mix_total + (1.0 - step_share) * dec.total
    tpot = (span_share * mix_total + (1.0 - span_share) * dec.total) / tokens_per_step
    # A chunked prompt's last chunk carries only what is left of it: a prompt just over the budget (8,192 tokens
    # beside a few decode tokens in vLLM's 8,192-token budget) ends in a short step, not a second full one.
    prefill = own_steps * mix_total
    if eng.chunked_prefill and np.any(n_p > 1):
        rest = prompt - (n_p - 1.0) * budget
        last = with_prefill(rest / pp, prefix + prompt - rest / 2.0, 1.0 / pp)[1]
        prefill = np.where((n_p > 1) & (n_p >= own_steps), (n_p - 1.0) * mix_total + last, prefill)
    # A request that arrives while others decode waits for the scheduler's next poll (Engine.recv_interval): the
    # others in flight of a closed loop, or, for an open loop's arrival, any request the rank holds; none where
    # requests queue for a slot (they were polled long before one frees).
    busy = np.clip(running - (0.0 if open_loop else 1.0), 0.0, 1.0)
    # A locked loop (prefill first, equal lengths) replaces its whole set at once, on a rank that decodes nothing.
    busy = np.where(open_loop | (together < 1.0), busy, 0.0)
    polled = np.where(concurrency > running, 0.0, (eng.recv_interval - 1.0) / 2.0 * (1.0 - step_share) * busy)
    own = eng.knobs.request_ms * 1e-3 + 0.5 * mean_step + prefill + (held + polled) * dec.total
    decode_time = np.maximum(osl - 1, 0) * tpot
    throughput = np.minimum(running / (own + decode_time), capped / mean_step)
    in_flight_time = np.divide(concurrency, throughput, out=np.full_like(throughput, np.inf), where=throughput > 0)
    ttft = np.maximum(own, in_flight_time - decode_time)
    return PhaseResult(ttft=ttft, tpot=tpot, throughput=throughput, running=running, decode_batch=decode_batch,
                       mixed_share=step_share, rank_mixed_share=share,
                       queue=ttft - own, decode_step=dec, mixed_step=mix)
