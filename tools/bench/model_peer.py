"""Hugging Face transformers peers for `touchstone bench-model`.

Loads a model set's checkpoint with transformers in fp16 on the GPU and times exactly what the
Go side times, with CUDA events, in the same run on the same GPU. A quantized checkpoint (one
whose config.json has a quantization_config) is loaded by quant_peer.py instead: transformers'
model with each quantized projection through torch's own quantized GEMM for its format
(cuBLASLt's FP8 GEMMs for FP8, tinygemm's torch._weight_int4pack_mm for AWQ and GPTQ), in the
checkpoint's 16-bit dtype, bf16 for 4-bit weights. Two peers, each loaded on its own (the first
is freed before the second loads):

- "eager": eager attention, DynamicCache, every forward issued from the host under
  torch.inference_mode (what `model.generate` does without a cache implementation or compile);
- "compile": SDPA attention (eager for a soft-capped model: compile_attention), StaticCache, the
  decode step through torch.compile(mode="reduce-overhead", fullgraph=True), i.e. Inductor kernels
  replayed from CUDA graphs (the transformers "static cache + torch.compile" recipe, as gpt-fast does it); prefill
  is the uncompiled forward into the same cache, as `generate` does it.

Each peer reports:

- prefill_ms: one forward of the prompt from an empty cache, logits of the last position only
  (`logits_to_keep=1`, what generation computes), median over the repeats;
- decode_step_ms: one forward of one token through the KV cache, logits of that token, each step
  between its own CUDA events and synchronised, median over every step of every repeat;
- decode_loop_ms_per_token: all the decode steps of one round issued back to back with no
  synchronisation between them, events around the whole loop, divided by the number of steps,
  median over the repeats (host launch overhead can hide behind the GPU's work here);
- compile_s: wall seconds of the compile peer's warm-up rounds, which trigger compilation and
  CUDA-graph capture; they are excluded from every timing (0 for eager, which compiles nothing);
- call: one line saying exactly what ran.

The token ids come from the Go side (stdin), so every side runs the same sequence.

    python3 tools/bench/model_peer.py < request.json

Request: {"model_dir", "prompt_ids", "decode_ids", "warmup", "repeats", "device", "peers", "batch"};
"peers" lists "eager" and/or "compile" and defaults to ["eager"]. "batch" (default 1) is B: with
B > 1, "prompt_ids" is B prompts of one length and "decode_ids" a list of steps of B tokens each
(`touchstone bench-batch`, which sends "batch" and these nested lists for every B, 1 included), every forward runs the B sequences as one [B, T] batch, and the
decode timings are per step of the whole batch. stdout carries exactly one JSON
object: versions and the device, "peers" keyed by peer name, and, when eager ran, its fields at the
top level too (the format before "peers" existed). Progress goes to stderr; a peer that fails
exits non-zero with the reason on stderr.
"""

import json
import statistics
import sys
import time
import traceback

import torch

PEERS = ("eager", "compile")

# CUDA-graph trees run a compiled function once to warm up, record it on the next call and replay
# it after that; three rounds of every step cover that with room to spare, whatever -warmup says.
COMPILE_WARMUP_ROUNDS = 3

# The compiled decode step must give the uncompiled forward's logits up to fp16 rounding of
# differently fused kernels; a cache written at the wrong position gives logits off by their scale.
COMPILE_LOGITS_RTOL = 5e-2

# A quantized checkpoint's compiled step is held to ||compiled - uncompiled||_2 / ||uncompiled||_2
# per decode step instead, by weight format. Quantisation is discontinuous: Inductor fuses the
# norm into the FP8 quantiser without rounding its output to bf16 first (emulate_precision_casts
# is off by default), an activation that moves by an ulp crosses an e4m3 midpoint, and that code
# is 6-12% off, so single logits move by a good share of the largest (4.9 of 50 on
# llama3-tiny-fp8dyn-bf16). Measured on an H100 (2 layers, 16 steps): 4-bit 0.011-0.019 worst
# step; FP8 per channel 0.15 (tiny set; 0.064 with the casts emulated), 0.10 and 0.08 (2-layer
# Llama-3.2-1B and Qwen2.5-0.5B widths); fine-grained FP8 takes the FP8 bound unmeasured (the
# same quantiser, in 1x128 groups). A cache written at the wrong position, a missed layer or
# a stale input give a relative error of order 1: the previous step's logits are 0.43 or more off
# the tiny FP8 set's.
COMPILE_LOGITS_QUANT_REL_RMS = {"awq": 5e-2, "gptq": 5e-2, "fp8-block": 0.25, "fp8-channel": 0.25}


def log(*args):
    print("model_peer:", *args, file=sys.stderr, flush=True)


def fail(msg):
    print("model_peer:", msg, file=sys.stderr, flush=True)
    sys.exit(1)


def check_finite(logits, what):
    if not bool(torch.isfinite(logits).all()):
        fail(f"non-finite {what} logits")


class Timer:
    """CUDA events around fn on the current stream, synchronised on the stop event."""

    def __init__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn):
        self.start.record()
        out = fn()
        self.stop.record()
        self.stop.synchronize()
        return self.start.elapsed_time(self.stop), out


# What quant_peer.load built for a quantized checkpoint, for the call line.
QUANTIZED = {}
# The experts implementation of a mixture-of-experts model, for the call line.
EXPERTS = {}


def load(req, device, attn, experts=None):
    """The set's checkpoint on the device: transformers in fp16, or for a quantized checkpoint
    torch's quantized GEMMs in its projections (quant_peer.py). experts: a mixture of experts'
    experts_implementation (None: transformers' default)."""
    import quant_peer
    from transformers import AutoModelForCausalLM

    if quant_peer.is_quantized(req["model_dir"]):
        model, QUANTIZED["what"] = quant_peer.load(req["model_dir"], attn, device)
        QUANTIZED["format"], _ = quant_peer.quant_format(
            quant_peer.read_config(req["model_dir"])["quantization_config"])
        return model
    QUANTIZED.clear()
    kw = {"experts_implementation": experts} if experts and moe_config(req["model_dir"]) else {}
    model = AutoModelForCausalLM.from_pretrained(
        req["model_dir"], dtype=torch.float16, attn_implementation=attn, local_files_only=True, **kw)
    # A mixture of experts runs transformers' default experts implementation (grouped_mm:
    # torch._grouped_mm over the tokens sorted by expert, where this torch and GPU dispatch it,
    # else its eager loop over the experts) unless experts names another.
    moe = getattr(model.config, "num_local_experts", None) or getattr(model.config, "num_experts", None)
    EXPERTS["impl"] = getattr(model.config, "_experts_implementation", None) if moe else None
    return model.to(device).eval()


def moe_config(model_dir):
    """Whether the checkpoint's config.json is a mixture of experts'."""
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    return bool(cfg.get("num_local_experts") or cfg.get("num_experts"))


def model_call(attn):
    """The call line's account of the loaded model."""
    if "what" in QUANTIZED:
        return "quant_peer.load(attn_implementation=%r): %s" % (attn, QUANTIZED["what"])
    if EXPERTS.get("impl"):
        return "AutoModelForCausalLM(dtype=float16, attn_implementation=%r, experts_implementation=%r)" % (
            attn, EXPERTS["impl"])
    return "AutoModelForCausalLM(dtype=float16, attn_implementation=%r)" % attn


def batched(req):
    """The request's prompts [B][P] and decode steps [N][B] (B = 1 unless "batch" says more)."""
    B = req.get("batch", 1)
    prompts, steps = req["prompt_ids"], req["decode_ids"]
    if "batch" not in req:  # bench-model: one prompt, one token a step
        return [prompts], [[t] for t in steps]
    if (len(prompts) != B or len({len(p) for p in prompts}) != 1
            or any(len(s) != B for s in steps)):
        fail(f"batch {B}: want {B} prompts of one length and steps of {B} tokens each")
    return prompts, steps


def run_eager(req, device, timed):
    from transformers import DynamicCache

    model = load(req, device, "eager")
    log("eager: loaded", req["model_dir"])
    prompts, decode_ids = batched(req)
    prompt = torch.tensor(prompts, dtype=torch.long, device=device)
    steps = [torch.tensor([[t] for t in ids], dtype=torch.long, device=device) for ids in decode_ids]

    def prefill(cache):
        return model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1).logits

    def step(cache, tok):
        return model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1).logits

    def loop(cache):
        for tok in steps:
            logits = step(cache, tok)
        return logits

    prefill_times, decode_times, loop_times = [], [], []
    with torch.inference_mode():
        for rep in range(req["warmup"] + req["repeats"]):
            timed_round = rep >= req["warmup"]
            cache = DynamicCache(config=model.config)
            ms, logits = timed(lambda: prefill(cache))
            check_finite(logits, "eager prefill")
            if timed_round:
                prefill_times.append(ms)
            for tok in steps:
                ms, logits = timed(lambda: step(cache, tok))
                check_finite(logits, "eager decode")
                if timed_round:
                    decode_times.append(ms)
            cache = DynamicCache(config=model.config)
            prefill(cache)
            ms, logits = timed(lambda: loop(cache))
            check_finite(logits, "eager decode loop")
            if timed_round:
                loop_times.append(ms / len(steps))
    del model
    return {
        "call": model_call("eager") + ", "
                "forward(logits_to_keep=1) with DynamicCache, torch.inference_mode",
        "prefill_ms": statistics.median(prefill_times),
        "decode_step_ms": statistics.median(decode_times),
        "decode_loop_ms_per_token": statistics.median(loop_times),
        "compile_s": 0.0,
        "prefill_times": prefill_times,
        "decode_times": decode_times,
        "decode_loop_times": loop_times,
    }


def full_attention_within_window(model, cache_len):
    """Turns a uniform sliding window the cache never reaches into full attention.

    transformers 5.17 gives every layer of such a model (Phi-3: window 2047) a
    StaticSlidingWindowLayer, which counts its length in a Python int and builds the mask from it;
    dynamo guards on that int, so the compiled step recompiles at the next position and then runs
    with the length as a symbolic int (CPU check: 2 graphs; a `cache` held in a global recompiles at
    every position until the recompile limit). While the cache is no longer than the window, the
    sliding mask masks nothing a causal mask does not, so full-attention StaticLayers, which keep
    the length on the device, compute the same logits with one static graph, like the other models.
    Returns the note for "call", empty when nothing changed."""
    cfg = model.config.get_text_config(decoder=True)
    window = getattr(cfg, "sliding_window", None)
    if window is None or getattr(cfg, "layer_types", None) is not None or cache_len > window:
        return ""
    cfg.sliding_window = None
    return (f", config.sliding_window {window} set to None (the {cache_len}-token cache never reaches "
            "it: same attention, one static graph)")


def compile_attention(model_dir):
    """The compile peer's attention: SDPA, but eager for a model with attention soft-capping
    (Gemma 2's attn_logit_softcapping): transformers 5.17's sdpa_attention_forward drops the
    softcap argument without a word, so an SDPA peer would time (and compute) uncapped attention;
    its eager attention caps, and torch.compile fuses it."""
    import json
    import os
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return "eager" if cfg.get("attn_logit_softcapping") is not None else "sdpa"


def run_compile(req, device, timed):
    from torch._dynamo.utils import counters
    from transformers import StaticCache

    attn = compile_attention(req["model_dir"])
    # A mixture of experts under compile: batched_mm (each token's experts' weights gathered by
    # id, batched matmuls: gpt-fast's decode form, which compiles whole). transformers' default,
    # grouped_mm, dispatches torch's grouped GEMM under compile only in bf16; an fp16 model falls
    # back to a loop over the experts' host-side offsets, which a CUDA graph cannot capture.
    model = load(req, device, attn, experts="batched_mm")
    log("compile: loaded", req["model_dir"])
    prompts, decode_ids = batched(req)
    B, n_prompt, n_decode = len(prompts), len(prompts[0]), len(decode_ids)
    cache_len = n_prompt + n_decode
    note = full_attention_within_window(model, cache_len)
    # Device, dtype and head shapes come from the first update (the prefill, uncompiled), which
    # allocates the buffers and marks them static addresses for the CUDA graphs.
    cache = StaticCache(config=model.config, max_cache_len=cache_len)

    # Every input is a device tensor made before any timing. transformers 5.17 has no
    # cache_position argument: the cache writes at its own device-side length and position_ids
    # place the rotary embedding and the mask, as `generate` passes them.
    prompt = torch.tensor(prompts, dtype=torch.long, device=device)
    prompt_pos = torch.arange(n_prompt, dtype=torch.long, device=device).unsqueeze(0).expand(B, -1).contiguous()
    step_ids = [torch.tensor([[t] for t in ids], dtype=torch.long, device=device) for ids in decode_ids]
    step_pos = [torch.full((B, 1), n_prompt + i, dtype=torch.long, device=device) for i in range(n_decode)]

    def prefill():
        return model(input_ids=prompt, position_ids=prompt_pos, past_key_values=cache, use_cache=True,
                     logits_to_keep=1).logits

    def step(input_ids, position_ids):
        return model(input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True,
                     logits_to_keep=1).logits

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)

    def decode(i):
        # Each call is a new CUDA-graph-trees generation: the previous step's logits, which live in
        # the graph's output pool, may be overwritten (nothing keeps them past the next call).
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(step_ids[i], step_pos[i])

    def loop():
        for i in range(n_decode):
            logits = decode(i)
        return logits

    def one_round():
        cache.reset()
        prefill_ms, logits = timed(prefill)
        check_finite(logits, "compile prefill")
        step_ms = []
        for i in range(n_decode):
            ms, logits = timed(lambda: decode(i))
            check_finite(logits, "compile decode")
            step_ms.append(ms)
        cache.reset()
        prefill()
        ms, logits = timed(loop)
        check_finite(logits, "compile decode loop")
        return prefill_ms, step_ms, ms / n_decode

    prefill_times, decode_times, loop_times = [], [], []
    with torch.no_grad():  # as `generate` runs it
        counters.clear()
        # A recompile per step would otherwise fall back to eager silently at the limit.
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            t0 = time.perf_counter()
            for _ in range(max(COMPILE_WARMUP_ROUNDS, req["warmup"])):
                one_round()
            torch.cuda.synchronize(device)
            compile_s = time.perf_counter() - t0
        graphs = counters["stats"]["unique_graphs"]
        skips = counters["inductor"]["cudagraph_skips"]
        if skips:
            fail(f"compile: CUDA graphs skipped {skips} time(s) (TORCH_LOGS=perf_hints says why)")
        log(f"compile: {graphs} graph(s), compile + capture {compile_s:.1f} s")

        # The compiled step against the same step uncompiled, same cache, same inputs.
        cache.reset()
        prefill()
        want = [step(step_ids[i], step_pos[i]).float() for i in range(n_decode)]
        cache.reset()
        prefill()
        got = [decode(i).float() for i in range(n_decode)]
        diff = max((g - w).abs().max().item() for g, w in zip(got, want))
        scale = max(w.abs().max().item() for w in want)
        log(f"compile: max |compiled - uncompiled| decode logit {diff:.3g} (max |logit| {scale:.3g})")
        rel_rms = None
        if "what" in QUANTIZED:
            bound = COMPILE_LOGITS_QUANT_REL_RMS[QUANTIZED["format"]]
            rel_rms = max(((g - w).norm() / w.norm()).item() for g, w in zip(got, want))
            log(f"compile: worst step's ||compiled - uncompiled|| / ||uncompiled|| {rel_rms:.3g} "
                f"(at most {bound:g})")
            if not rel_rms <= bound:
                fail(f"compile: a compiled decode step's logits are off the uncompiled step's by "
                     f"{rel_rms:.3g} of their norm ({QUANTIZED['format']} checkpoint: at most {bound:g})")
        elif not diff <= COMPILE_LOGITS_RTOL * scale:
            fail(f"compile: the compiled decode step's logits are off the uncompiled step's by {diff:.3g} "
                 f"(max |logit| {scale:.3g})")

        # Nothing may compile or capture while timing.
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(req["repeats"]):
                prefill_ms, step_ms, loop_ms = one_round()
                prefill_times.append(prefill_ms)
                decode_times.extend(step_ms)
                loop_times.append(loop_ms)
    del model, cache, compiled
    return {
        "call": model_call(attn) + ", "
                f"StaticCache(max_cache_len={cache_len}) reset before each round{note}, batch {B}; prefill: forward("
                "position_ids, logits_to_keep=1) uncompiled; decode: torch.compile(forward(input_ids, "
                "position_ids, logits_to_keep=1), mode='reduce-overhead', fullgraph=True), Inductor "
                f"defaults, CUDA-graph trees, {graphs} graph(s); torch.no_grad",
        "prefill_ms": statistics.median(prefill_times),
        "decode_step_ms": statistics.median(decode_times),
        "decode_loop_ms_per_token": statistics.median(loop_times),
        "compile_s": compile_s,
        "graphs": graphs,
        "max_abs_logit_diff_vs_uncompiled": diff,
        "max_rel_rms_logit_diff_vs_uncompiled": rel_rms,
        "prefill_times": prefill_times,
        "decode_times": decode_times,
        "decode_loop_times": loop_times,
    }


def main():
    req = json.load(sys.stdin)
    peers = req.get("peers", ["eager"])
    if not isinstance(peers, list) or not peers or any(p not in PEERS for p in peers) or len(set(peers)) != len(peers):
        fail(f"peers must be a non-empty list of distinct names from {list(PEERS)}, got {peers!r}")
    if not req["decode_ids"]:
        fail("decode_ids is empty: nothing to time")
    import transformers

    device = torch.device(req["device"])
    torch.cuda.set_device(device)
    log("device", torch.cuda.get_device_name(device))
    timed = Timer()
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device),
        "peers": {},
    }
    for name in peers:
        try:
            res = run_eager(req, device, timed) if name == "eager" else run_compile(req, device, timed)
        except Exception as e:  # noqa: BLE001 - any failure of a peer is reported and fatal
            traceback.print_exc()
            fail(f"{name}: {type(e).__name__}: {e}")
        torch.cuda.empty_cache()
        result["peers"][name] = res
        log(f"{name}: prefill {res['prefill_ms']:.3f} ms, decode {res['decode_step_ms']:.3f} ms/step, "
            f"loop {res['decode_loop_ms_per_token']:.3f} ms/token")
    if "eager" in result["peers"]:
        eager = result["peers"]["eager"]
        for key in ("call", "prefill_ms", "decode_step_ms", "prefill_times", "decode_times"):
            result[key] = eager[key]
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
