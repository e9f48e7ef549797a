#!/usr/bin/env python3
"""touchstone's FlashInfer external adapter: FlashInfer's CUDA kernels (JIT-built with the host's
nvcc) for RMSNorm and fused add + RMSNorm, RoPE, SiLU/GELU-and-mul, and single-sequence decode
and prefill attention, over the protocol of docs/external-backends.md. It needs a GPU, torch,
the flashinfer-python wheel and apache-tvm-ffi (its JIT bindings).

Each op maps a golden case onto FlashInfer's entry point as a serving engine calls it:

- rmsnorm: flashinfer.norm.rmsnorm; rmsnorm_residual: fused_add_rmsnorm (in place: the residual
  becomes the sum, the input the normalised row). FLASHINFER_USE_CUDA_NORM=1 is set: the JIT CUDA
  norm kernels, not the CuTe DSL ones (nvidia-cutlass-dsl is not installed); FlashInfer calls the
  two functionally equivalent.
- rope: apply_rope_pos_ids (frequencies computed inside the kernel from rope_theta) for plain
  cases; a case with per-frequency divisors (Llama 3, YaRN, LongRoPE) or an attention factor goes
  through apply_rope_with_cos_sin_cache (vLLM's and SGLang's entry point) over a cos/sin table
  computed in float64 and rounded to fp32 once, so that the kernel is judged, not the table.
  TOUCHSTONE_FLASHINFER_ROPE=cache sends every case through the table.
- swiglu, geglu: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul over [gate, up] concatenated as
  FlashInfer's input layout wants them (the concatenation is not timed: a model's fused gate/up
  projection writes that layout).
- attention_decode: single_decode_with_kv_cache per sequence (the cache's first cache_lens rows,
  NHD), with tensor cores when more than 4 query heads share a KV head (vLLM's rule); attention_prefill: single_prefill_with_kv_cache per batch row. window_left is the window
  minus one (FlashInfer counts the keys to the left of the query), logits_soft_cap the cap.
  FlashInfer dispatches head dims 64, 128 and 256 (and 512 on some paths); others are
  unsupported by name. The prefill backend is TOUCHSTONE_FLASHINFER_PREFILL_BACKEND (default
  fa2: FA3's JIT build takes minutes a configuration; "auto" picks FA3 on Hopper).
- sample: FlashInfer's top-k / top-p samplers with its own Philox stream (sample's docstring);
  the sampling suite judges them as samplers with their own random numbers.
"""

import importlib.metadata
import os
import sys

os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from protocol import Unsupported, serve  # noqa: E402
from torchio import TorchIO  # noqa: E402

import flashinfer  # noqa: E402
from flashinfer import activation, norm, rope as fi_rope, sampling as fi_sampling  # noqa: E402

DEVICE = "cuda"
IO = TorchIO(DEVICE)
get, put = IO.get, IO.put
ROPE_MODE = os.environ.get("TOUCHSTONE_FLASHINFER_ROPE", "auto")
PREFILL_BACKEND = os.environ.get("TOUCHSTONE_FLASHINFER_PREFILL_BACKEND", "fa2")
HEAD_DIMS = (64, 128, 256)


def same_dtype_weight(x, w, op):
    if w.dtype != x.dtype:
        raise Unsupported("%s with an fp32 weight (Gemma's 1 + w): FlashInfer takes the weight in the input's dtype "
                          "(gemma_rmsnorm adds the 1 itself)" % op)


def rmsnorm(p, i, o):
    x, w = get(i["x"]), get(i["weight"])
    same_dtype_weight(x, w, "rmsnorm")
    x2 = x.reshape(-1, x.shape[-1])
    put(o["out"], norm.rmsnorm(x2, w, p["eps"]).reshape(x.shape))


def rmsnorm_residual(p, i, o):
    """fused_add_rmsnorm(input, residual): residual += input, then input = rmsnorm(residual) * w;
    in a time request the launches run in place on the same buffers, as an engine's do."""
    x, r, w = get(i["x"]), get(i["residual"]), get(i["weight"])
    same_dtype_weight(x, w, "rmsnorm_residual")
    if not IO.timing:
        x, r = x.clone(), r.clone()
    x2, r2 = x.reshape(-1, x.shape[-1]), r.reshape(-1, r.shape[-1])
    norm.fused_add_rmsnorm(x2, r2, w, p["eps"])
    put(o["sum"], r)
    put(o["out"], x)


def rope(p, i, o):
    q, k = get(i["q"]), get(i["k"])
    if q.shape[-1] not in HEAD_DIMS:
        # apply_rope_pos_ids refuses them; apply_rope_with_cos_sin_cache does not, and faults
        # (misaligned address) at head_size 80 with rotary_dim 24, poisoning the context
        raise Unsupported("rope with head_dim %d: FlashInfer's RoPE kernels dispatch head dims %s"
                          % (q.shape[-1], HEAD_DIMS))
    r, base = p["rope_dim"], p["freq_base"]
    table = ROPE_MODE == "cache" or any(n in i for n in ("freq_divisor", "long_divisor")) or \
        p.get("attention_factor", 1.0) != 1.0
    pos = get(i["positions"])
    if not table:
        qo, ko = fi_rope.apply_rope_pos_ids(q, k, pos, rotary_dim=r, interleave=False, rope_theta=base)
    else:
        cache = IO.memo(("cos-sin", i["positions"]["path"]), lambda: cos_sin_cache(p, i))
        t, h, d = q.shape
        qo, ko = fi_rope.apply_rope_with_cos_sin_cache(pos, q.reshape(t, -1), k.reshape(t, -1), d, cache, is_neox=True)
        qo, ko = qo.reshape(q.shape), ko.reshape(k.shape)
    put(o["q_out"], qo)
    put(o["k_out"], ko)


def cos_sin_cache(p, i):
    """[max position + 1, rope_dim]: cos then sin of every position up to the case's largest,
    each frequency divided by its divisor (the long divisors from long_from on), times the
    attention factor: float64, rounded once to fp32."""
    r, base = p["rope_dim"], p["freq_base"]
    pos = IO.host(i["positions"]).astype(np.int64)
    n = int(pos.max()) + 1
    inv = base ** (-2.0 * np.arange(r // 2) / r)
    div = np.ones((n, r // 2))
    if "freq_divisor" in i:
        div[:] = np.load(i["freq_divisor"]["path"]).astype(np.float64)
    if "long_divisor" in i:
        div[p["long_from"]:] = np.load(i["long_divisor"]["path"]).astype(np.float64)
    theta = np.arange(n, dtype=np.float64)[:, None] * inv[None, :] / div
    a = p.get("attention_factor", 1.0)
    table = np.concatenate([np.cos(theta) * a, np.sin(theta) * a], axis=-1).astype(np.float32)
    return torch.from_numpy(table).to(DEVICE)


def gate_up(i):
    g, u = get(i["gate"]), get(i["up"])
    return IO.memo(("gate-up", i["gate"]["path"]), lambda: torch.cat([g, u], dim=-1))


def swiglu(p, i, o):
    put(o["out"], activation.silu_and_mul(gate_up(i)))


def geglu(p, i, o):
    f = activation.gelu_tanh_and_mul if p["gelu"] == "tanh" else activation.gelu_and_mul
    put(o["out"], f(gate_up(i)))


def attention_args(p, op, head_dim):
    if head_dim not in HEAD_DIMS:
        raise Unsupported("%s with head_dim %d: FlashInfer dispatches head dims %s" % (op, head_dim, HEAD_DIMS))
    window = p.get("window") or 0
    return dict(sm_scale=p["scale"], window_left=window - 1 if window else -1,
                logits_soft_cap=p.get("softcap") or None)


def tensor_cores(n_heads, n_kv_heads):
    """vLLM's rule for FlashInfer's decode: the tensor-core (prefill) kernel when more than 4
    query heads share a KV head; the CUDA-core decode kernel dispatches group sizes 1, 2, 3, 4
    and 8 only (Qwen2.5's 7 is refused)."""
    return n_heads // n_kv_heads > 4


def workspace():
    return torch.empty(128 << 20, dtype=torch.uint8, device=DEVICE)


def i32(values):
    return torch.tensor(np.asarray(values, dtype=np.int64), dtype=torch.int32, device=DEVICE)


def pages(lens, page_size, table=None):
    """FlashInfer's paged-KV description of sequences of lens: indptr, page indices (the rows of
    table, or page b for sequence b when each sequence is one page) and the last page's fill."""
    indptr, indices, last = [0], [], []
    for b, n in enumerate(lens):
        k = max(1, -(-int(n) // page_size))
        indices += list(table[b, :k]) if table is not None else [b]
        indptr.append(len(indices))
        last.append(int(n) - (k - 1) * page_size)
    return i32(indptr), i32(indices), i32(last)


def plan_decode(lens, page_size, n_heads, n_kv_heads, head_dim, dtype, args, table=None):
    """A BatchDecodeWithPagedKVCacheWrapper planned for the batch, as an engine plans it once a
    step for all layers."""
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), kv_layout="NHD",
                                                      use_tensor_cores=tensor_cores(n_heads, n_kv_heads))
    indptr, indices, last = pages(lens, page_size, table)
    w.plan(indptr, indices, last, n_heads, n_kv_heads, head_dim, page_size, q_data_type=dtype, kv_data_type=dtype, **args)
    return w


def plan_prefill_ragged(q_lens, kv_lens, n_heads, n_kv_heads, head_dim, dtype, causal, args):
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace(), kv_layout="NHD", backend=PREFILL_BACKEND)
    w.plan(i32(np.concatenate([[0], np.cumsum(q_lens)])), i32(np.concatenate([[0], np.cumsum(kv_lens)])),
           n_heads, n_kv_heads, head_dim, causal=causal, q_data_type=dtype, kv_data_type=dtype, **args)
    return w


def plan_prefill_paged(q_starts, kv_lens, page_size, table, n_heads, n_kv_heads, head_dim, dtype, args):
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(), kv_layout="NHD", backend=PREFILL_BACKEND)
    indptr, indices, last = pages(kv_lens, page_size, table)
    w.plan(i32(q_starts), indptr, indices, last, n_heads, n_kv_heads, head_dim, page_size, causal=True,
           q_data_type=dtype, kv_data_type=dtype, **args)
    return w


def attention_decode(p, i, o):
    """The contiguous cache as a paged one of one page a sequence (page_size = the cache's
    length): BatchDecodeWithPagedKVCacheWrapper, one launch for the batch."""
    q, kc, vc = get(i["q"]), get(i["k_cache"]), get(i["v_cache"])
    args = attention_args(p, "attention_decode", q.shape[-1])
    lens = IO.host(i["cache_lens"])
    w = IO.memo(("plan", i["cache_lens"]["path"]), lambda: plan_decode(
        lens, kc.shape[1], q.shape[1], kc.shape[2], q.shape[2], q.dtype, args))
    put(o["out"], w.run(q, (kc, vc)))


def attention_decode_paged(p, i, o):
    q, kc, vc = get(i["q"]), get(i["k_cache"]), get(i["v_cache"])
    args = attention_args(p, "attention_decode_paged", q.shape[-1])
    lens, table = IO.host(i["cache_lens"]), IO.host(i["block_table"])
    w = IO.memo(("plan", i["cache_lens"]["path"]), lambda: plan_decode(
        lens, kc.shape[1], q.shape[1], kc.shape[2], q.shape[2], q.dtype, args, table))
    put(o["out"], w.run(q, (kc, vc)))


def attention_prefill(p, i, o):
    """The batch's equal-length sequences as ragged ones: BatchPrefillWithRaggedKVCacheWrapper."""
    q, k, v = get(i["q"]), get(i["k"]), get(i["v"])
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    args = attention_args(p, "attention_prefill", d)
    w = IO.memo(("plan", i["q"]["path"]), lambda: plan_prefill_ragged(
        [sq] * b, [sk] * b, h, hkv, d, q.dtype, bool(p["causal"]), args))
    out = w.run(q.reshape(b * sq, h, d), k.reshape(b * sk, hkv, d), v.reshape(b * sk, hkv, d))
    put(o["out"], out.reshape(q.shape))


def attention_prefill_paged(p, i, o):
    """Chunked prefill over the paged pool: BatchPrefillWithPagedKVCacheWrapper, causal with the
    prefix offset (FlashInfer aligns a sequence's queries with the end of its keys)."""
    q, kc, vc = get(i["q"]), get(i["k_cache"]), get(i["v_cache"])
    args = attention_args(p, "attention_prefill_paged", q.shape[-1])
    starts, lens, table = IO.host(i["q_starts"]), IO.host(i["kv_lens"]), IO.host(i["block_table"])
    w = IO.memo(("plan", i["q_starts"]["path"]), lambda: plan_prefill_paged(
        starts, lens, kc.shape[1], table, q.shape[1], kc.shape[2], q.shape[2], q.dtype, args))
    put(o["out"], w.run(q, (kc, vc)))


def int64_bits(v):
    """A uint64 as the int64 with its bits (FlashInfer's bindings take the Philox key and offset
    as 64-bit integers)."""
    v %= 1 << 64
    return v - (1 << 64) if v >= 1 << 63 else v


def sample(p, i, o):
    """FlashInfer's samplers as vLLM's FlashInfer path calls them: top_k_top_p_sampling_from_logits
    over logits / T when both filters are on (its radix top-k fast path at k <= 256 over a
    vocabulary of 65536 or more), top_k_sampling_from_probs or top_p_sampling_from_probs over
    FlashInfer's softmax with the temperature when one is, sampling_from_logits (Gumbel-max)
    over logits / T when neither. A top_k at or past the vocabulary is off. Philox key: the
    seed; offset: the step times 2^16, so that each step's draws read their own window of
    every row's subsequence (a rejection round or a Gumbel vector takes a few numbers of it).
    Greedy is unsupported: FlashInfer has no argmax kernel (engines take torch.argmax)."""
    put(o["tokens"], draw(get(i["logits"]), p))


def draw(logits, p):
    """sample's tokens of fp32 logits [rows, vocab] on the device."""
    if p["temperature"] == 0:
        raise Unsupported("temperature 0: FlashInfer has no greedy kernel (serving engines take torch.argmax)")
    t, k, top_p = p["temperature"], p["top_k"], p["top_p"]
    if k >= logits.shape[1]:
        k = 0
    rng = dict(deterministic=True, seed=int64_bits(p["seed"]), offset=int64_bits(p["step"] << 16))
    if k and top_p < 1:
        tokens = fi_sampling.top_k_top_p_sampling_from_logits(logits / t, k, top_p, **rng)
    elif k:
        tokens = fi_sampling.top_k_sampling_from_probs(fi_sampling.softmax(logits, temperature=t), k, **rng)
    elif top_p < 1:
        tokens = fi_sampling.top_p_sampling_from_probs(fi_sampling.softmax(logits, temperature=t), top_p, **rng)
    else:
        tokens = fi_sampling.sampling_from_logits(logits / t, **rng)
    return tokens


OPS = {f.__name__: f for f in (rmsnorm, rmsnorm_residual, rope, swiglu, geglu, attention_decode, attention_decode_paged,
                               attention_prefill, attention_prefill_paged, sample)}


if __name__ == "__main__":
    version = importlib.metadata.version("flashinfer-python")
    serve("flashinfer", "%s-torch-%s" % (version, torch.__version__), OPS, ["f16", "bf16"], IO.runner(OPS),
          timer=IO)
