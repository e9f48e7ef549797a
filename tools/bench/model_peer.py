"""Hugging Face transformers peer for `touchstone bench-model`.

Loads a model set's checkpoint with transformers in fp16 with eager attention on the GPU and
times exactly what the Go side times, with CUDA events, in the same run on the same GPU:

- prefill: one forward of the prompt from an empty cache, logits of the last position only
  (`logits_to_keep=1`, what generation computes), median over the repeats;
- decode: one forward of one token through the KV cache (DynamicCache), logits of that token,
  median over every step of every repeat.

The token ids come from the Go side (stdin), so both run the same sequence.

    python3 tools/bench/model_peer.py < request.json

Request: {"model_dir", "prompt_ids", "decode_ids", "warmup", "repeats", "device"}.
stdout carries exactly one JSON object; progress goes to stderr.
"""

import json
import statistics
import sys

import torch


def log(*args):
    print("model_peer:", *args, file=sys.stderr, flush=True)


def main():
    req = json.load(sys.stdin)
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache

    device = torch.device(req["device"])
    torch.cuda.set_device(device)
    model = AutoModelForCausalLM.from_pretrained(
        req["model_dir"], dtype=torch.float16, attn_implementation="eager", local_files_only=True)
    model.to(device).eval()
    log("loaded", req["model_dir"], "on", torch.cuda.get_device_name(device))

    prompt = torch.tensor([req["prompt_ids"]], dtype=torch.long, device=device)
    steps = [torch.tensor([[t]], dtype=torch.long, device=device) for t in req["decode_ids"]]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn):
        start.record()
        out = fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop), out

    prefill_times, decode_times = [], []
    with torch.inference_mode():
        for rep in range(req["warmup"] + req["repeats"]):
            cache = DynamicCache(config=model.config)
            ms, out = timed(lambda: model(input_ids=prompt, past_key_values=cache, use_cache=True,
                                          logits_to_keep=1))
            if not torch.isfinite(out.logits).all():
                raise SystemExit("model_peer: non-finite prefill logits")
            if rep >= req["warmup"]:
                prefill_times.append(ms)
            cache = out.past_key_values
            for tok in steps:
                ms, out = timed(lambda: model(input_ids=tok, past_key_values=cache, use_cache=True,
                                              logits_to_keep=1))
                cache = out.past_key_values
                if rep >= req["warmup"]:
                    decode_times.append(ms)

    json.dump({
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device),
        "call": "AutoModelForCausalLM(dtype=float16, attn_implementation='eager'), "
                "forward(logits_to_keep=1) with DynamicCache, torch.inference_mode",
        "prefill_ms": statistics.median(prefill_times),
        "decode_step_ms": statistics.median(decode_times),
        "prefill_times": prefill_times,
        "decode_times": decode_times,
    }, sys.stdout)


if __name__ == "__main__":
    main()
