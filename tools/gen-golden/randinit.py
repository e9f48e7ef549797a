"""`python3 tools/gen-golden randinit`: a checkpoint with a real model's shape and transformers' own
random initialisation, for `models --checkpoint` (docs/golden-format.md, "Calibration").

The synthetic sets draw their own weights, scaled so that every tap is O(1) and greedy decoding is
decisive. transformers' initialisation (normal(0, initializer_range) for every linear and
embedding, zero biases, unit norm weights) is the other extreme: a tied head over a 151936-token
vocabulary with logits of std ~0.8, so nearly flat distributions, and a residual stream that grows
over 28 layers. Deep-model tap limits must hold there too; that is what this checkpoint is for:

    python3 tools/gen-golden randinit --preset qwen2.5-1.5b --out /tmp/q15
    python3 tools/gen-golden models --checkpoint /tmp/q15 --name qwen2.5-1.5b-randinit --out /tmp/g
    TOUCHSTONE_GOLDEN=/tmp/g go run ./cmd/touchstone diff qwen2.5-1.5b-randinit

The checkpoint is `Qwen2ForCausalLM(config)` built under torch.manual_seed(seed) (one thread,
ATEN_CPU_CAPABILITY=default, so the draw is the same on every host), converted to fp16 and written
with save_pretrained. --layers and --vocab shrink it where memory or time forbid the real size
(the set name should then say so).
"""

import json
import os

import torch

# The published config.json of Qwen/Qwen2.5-1.5B, less the fields that only matter for provenance
# (transformers_version, torch_dtype: the checkpoint is written in fp16).
QWEN25_15B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 1536,
    "initializer_range": 0.02,
    "intermediate_size": 8960,
    "max_position_embeddings": 131072,
    "max_window_layers": 21,
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

PRESETS = {"qwen2.5-1.5b": ("qwen2", QWEN25_15B)}
DEFAULT_SEED = 20261121


def build(preset, out, seed=DEFAULT_SEED, layers=None, vocab=None):
    """Write the checkpoint into out (created; must not hold a config.json already). Returns the
    config dict used."""
    import transformers
    family, base = PRESETS[preset]
    cfg = dict(base)
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        cfg["max_window_layers"] = min(cfg["max_window_layers"], layers)
    if vocab is not None:
        cfg["vocab_size"] = vocab
        cfg["bos_token_id"] = cfg["eos_token_id"] = vocab - 1
    if os.path.exists(os.path.join(out, "config.json")):
        raise SystemExit("%s already holds a checkpoint" % out)
    os.makedirs(out, exist_ok=True)
    transformers.logging.set_verbosity_error()
    config = transformers.Qwen2Config(**cfg)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model = model.to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "randinit.json"), "w") as f:
        json.dump({"preset": preset, "seed": seed, "layers": layers, "vocab": vocab}, f, indent=2,
                  sort_keys=True)
        f.write("\n")
    return cfg
