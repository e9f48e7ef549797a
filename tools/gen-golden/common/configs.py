"""Every model configuration, in one place: the published config.json of the real checkpoints
(PUBLISHED_ROPE: those whose RoPE tables the scaled `rope` kernel cases use too), the tiny variants
of the committed tier, and the table of model sets (ModelSpec: name, family, tier, config, decode
steps, margin epsilon, dtype). A new model set is a row of MODELS here (and its config, if new).
Also the dimensions a forward reads from a config (dims). Plain Python: no torch, no transformers.
"""

import re
from collections import namedtuple

# A model set's dtype (params.dtype: what the engine runs it in, what its synthetic checkpoint
# stores and what its calibration rounds to) and config.json's torch_dtype for it.
DTYPES = ("f16", "bf16")
CONFIG_DTYPE = {"f16": "float16", "bf16": "bfloat16"}
COMMITTED, FULL = "committed", "full"

# ---------------------------------------------------------------------------------------------
# Configs. The full-size ones are the published config.json files of the real checkpoints
# (Qwen/Qwen2.5-0.5B, microsoft/Phi-3-mini-4k-instruct, openai-community/gpt2,
# meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B, microsoft/Phi-3.5-mini-instruct,
# Qwen/Qwen2.5-7B-Instruct with its model card's YaRN rope_scaling) with the fields
# that only matter for remote code or provenance dropped (_name_or_path, auto_map,
# transformers_version) and torch_dtype set to what the synthetic checkpoint stores (float16; the
# bf16 sets' copies, bf16_config, bfloat16).
# Field names follow the hub files (rope_theta at the top level, GPT-2's n_embd/n_layer/...);
# transformers 5.17 maps them onto its config classes (rope_theta -> rope_parameters).

QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

PHI3_MINI_4K = {
    "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "model_type": "phi3",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 32064,
}

GPT2_124M = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "torch_dtype": "float16",
    "vocab_size": 50257,
}


# Llama 3 (meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B): Qwen2's layout without biases, RoPE
# scaled with rope_type llama3 (three frequency bands around the original 8192-token context).
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128256,
}

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128256,
}

# Qwen2.5-7B-Instruct with the YaRN recipe of its model card added (the hub config has no
# rope_scaling; the card's uses the old "type" key): factor 4 over the original 32768 positions.
QWEN_YARN4 = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
QWEN25_7B_YARN = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_scaling": QWEN_YARN4,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}

# mistralai/Mistral-7B-v0.1: Llama's layers (model_type mistral, MistralForCausalLM) with a
# 4096-key sliding window in every layer, GQA 4:1, an untied head.
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 32000,
}

# Qwen/Qwen3-4B: Qwen2's layout without q/k/v biases, an RMSNorm over each query and key head
# (q_norm, k_norm) before RoPE, and head_dim 128 where hidden_size / heads is 80.
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 9728,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# mistralai/Mixtral-8x7B-v0.1: Mistral's attention (GQA 4:1, no biases, an untied head) without a
# window (sliding_window null) and with RoPE theta 1e6, and in every layer a sparse
# mixture-of-experts block instead of the dense MLP (model_type mixtral, MixtralForCausalLM): a
# router (block_sparse_moe.gate, [E, H]) picks num_experts_per_tok of num_local_experts SwiGLU
# experts of width intermediate_size per token, their softmax weights renormalised to sum to 1.
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 32000,
}

# Qwen/Qwen3-30B-A3B: Qwen3's attention (q_norm and k_norm, an RMSNorm over each query and key
# head before RoPE, no biases, an explicit head_dim of 128 where hidden_size / heads is 64, an
# untied head) and in every layer a sparse mixture-of-experts block (model_type qwen3_moe,
# Qwen3MoeForCausalLM): a router (mlp.gate, [E, H]) picks num_experts_per_tok of num_experts
# SwiGLU experts of width moe_intermediate_size per token, their softmax weights renormalised to
# sum to 1 where norm_topk_prob (transformers' default false; Qwen3-30B-A3B's true).
# intermediate_size is the width of a dense MLP, which only layers in mlp_only_layers or off the
# decoder_sparse_step would have: Qwen3-30B-A3B has none (every layer sparse), the only case the
# generator (and the engine) implement (asserted of the presets after dims below).
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


# Qwen/Qwen1.5-MoE-A2.7B (model_type qwen2_moe, Qwen2MoeForCausalLM; Qwen2-57B-A14B is the same
# architecture at other widths): Qwen2's attention (q/k/v biases, no q/k norms, MHA here: 16 q and
# 16 kv heads of 128; Qwen2-57B-A14B's 28 / 4 is GQA) with an untied head, and in every layer a
# sparse block of two parts whose outputs add: a router (mlp.gate, [E, H], softmax in fp32) picks
# num_experts_per_tok of num_experts SwiGLU experts of width moe_intermediate_size per token,
# their softmax weights renormalised only where norm_topk_prob (false here, as in
# Qwen2-57B-A14B's file: the top k's p as they are); and a shared expert (mlp.shared_expert, a
# dense SwiGLU MLP of width shared_expert_intermediate_size, which every token runs) whose output
# is multiplied by sigmoid(mlp.shared_expert_gate(x)), a Linear [1, H] without bias.
# intermediate_size is a dense MLP's width, which only layers in mlp_only_layers or off the
# decoder_sparse_step would have: none here (every layer sparse), the only case the generator (and
# the engine) implement. The published file as we know it, but its torch_dtype (bfloat16 there;
# a set's is its own) and the provenance keys: it has no mlp_only_layers (Qwen2MoeConfig's
# default [], every layer sparse with decoder_sparse_step 1), no qkv_bias (Qwen2MoeConfig's
# default true: the biases are in the checkpoint) and no layer_types (derived: see
# qwen2_moe_window_layers); sliding_window 32768 and max_window_layers 21 are published but
# unused while use_sliding_window is false (Qwen2MoeConfig then sets sliding_window to 0).
# max_position_embeddings is the base model's 8192 (the Chat model's file says 32768).
QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "max_window_layers": 21,
    "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 5632,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# google/gemma-3-1b-it (model_type gemma3_text, Gemma3ForCausalLM): the embedding scaled by
# sqrt(hidden_size) (rounded to the storage dtype, as transformers' embed_scale), RMSNorms of
# weight (1 + w) computed in fp32, a norm before and after both attention and the MLP, q_norm and
# k_norm over each head, GeGLU with the tanh GELU (hidden_activation gelu_pytorch_tanh), the
# attention scaled by query_pre_attn_scalar^-0.5, sliding-window layers with their own RoPE base
# (rope_local_base_freq) beside every sliding_window_pattern-th layer's global attention
# (rope_theta, and rope_scaling on those layers only), a tied head (transformers' default true).
# The hub file's keys (sliding_window_pattern, rope_local_base_freq); transformers 5 reads them
# into layer_types and rope_parameters per layer type.
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 262144,
}

# google/gemma-2-2b (model_type gemma2, Gemma2ForCausalLM): Gemma 3's layer without q_norm and
# k_norm, one RoPE base (rope_theta) for every layer, every other layer sliding (layer 0 first,
# Gemma2Config's default layer_types), the attention scores soft-capped at 50
# (attn_logit_softcapping: 50 tanh(s / 50) before the mask) and the logits at 30
# (final_logit_softcapping). The hub file but its torch_dtype (float32 there; a set's dtype is
# its own, as for the other configs).
GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": 1,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304,
    "initializer_range": 0.02,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 8,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 256000,
}


def derived(base, **overrides):
    cfg = dict(base)
    for k, v in overrides.items():
        assert k in cfg, "override of unknown config key %s" % k
        cfg[k] = v
    return dict(sorted(cfg.items()))


# microsoft/Phi-3.5-mini-instruct: Phi-3-mini's layout with LongRoPE to 131072 positions (the short

# The published Phi-3.5-mini-instruct LongRoPE factors (48 = head_dim 96 / 2 pairs each).
PHI35_LONG_FACTOR = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
    1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
    3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
    7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
    24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
    50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
    58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
    62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
    63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
    64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062]
PHI35_SHORT_FACTOR = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
    1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
    1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
    2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533]

# factors up to the original 4096, the long ones past it; original_max_position_embeddings at the
# top level, as Phi-3 configs keep it).
PHI35_MINI = derived(PHI3_MINI_4K, max_position_embeddings=131072,
                     original_max_position_embeddings=4096, sliding_window=262144,
                     rope_scaling={"rope_type": "longrope",
                                   "long_factor": list(PHI35_LONG_FACTOR),
                                   "short_factor": list(PHI35_SHORT_FACTOR)})

# The published configs whose RoPE tables the scaled `rope` kernel cases use
# (common/rope_scaling.published_rope).
PUBLISHED_ROPE = {"llama3.1-8b": LLAMA31_8B, "llama3.2-1b": LLAMA32_1B,
                  "qwen2.5-7b-yarn": QWEN25_7B_YARN, "phi3.5-mini": PHI35_MINI}


# Tiny variants: 2 layers, small vocab, the distinguishing features kept. Head dims are multiples
# of 8 (what the CUDA attention kernels support) and keep rope_dim/2 a multiple of 8 like the real
# models, so RoPE runs the same kernel path as at full size.
#  qwen2-tiny: GQA 7:1 with two KV heads (14 q / 2 kv, head_dim 16), Q/K/V bias, tied LM head,
#              rope_theta 1e6, rms eps 1e-6, intermediate 160 (no power of two, like 4864).
#  phi3-tiny:  fused qkv_proj and gate_up_proj, MHA (2 heads), head_dim 48 (no power of two, like
#              96), rms eps 1e-5, untied LM head, rope_theta 1e4, sliding_window 2047 (inactive:
#              sequences stay under 48 tokens).
#  gpt2-tiny:  Conv1D (weights stored [in, out]), learned positions, LayerNorm with bias, gelu_new,
#              tied LM head, odd vocab (503, like 50257).
QWEN2_TINY = derived(QWEN25_05B, hidden_size=224, intermediate_size=160, num_hidden_layers=2,
                     max_window_layers=2, vocab_size=384, bos_token_id=0, eos_token_id=0)
PHI3_TINY = derived(PHI3_MINI_4K, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, vocab_size=320, bos_token_id=1,
                    eos_token_id=2, pad_token_id=2)
GPT2_TINY = derived(GPT2_124M, n_embd=96, n_head=3, n_layer=2, n_positions=64, n_ctx=64,
                    vocab_size=503, bos_token_id=502, eos_token_id=502)
#  llama3-tiny:     Llama-3.2-1B's config cut down: no biases, GQA 4:1 (8 q / 2 kv heads), an
#                   explicit head_dim 16, tied head, theta 5e5, eps 1e-5, the published llama3
#                   scaling (factor 32 over 8192: at head_dim 16 pairs 0-3 keep their frequency, 4
#                   is blended (divided by 3.29), 5-7 are divided by 32).
#  phi3.5-tiny:     phi3-tiny's dimensions with Phi-3.5-mini's LongRoPE: every second published
#                   factor (24 short, 24 long for head_dim 48), max_position_embeddings 640 and the
#                   original context cut to 20, so the prefill (16 tokens) takes the short factors
#                   and decode step 4 (position 20) onwards the long ones: transformers switches
#                   when a pass's largest position + 1 exceeds the original (the cached keys keep
#                   their short rotation); attention factor sqrt(1 + ln 32 / ln 20).
#  qwen2-yarn-tiny: qwen2-tiny with Qwen's YaRN recipe (factor 4 over 32768, old "type" key): at
#                   head_dim 16 pairs 0-2 keep their frequency, 3-4 are ramped, 5-7 divided by 4;
#                   attention factor 0.1 ln 4 + 1.
LLAMA3_TINY = derived(LLAMA32_1B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=16, vocab_size=384,
                      bos_token_id=382, eos_token_id=383)
PHI35_TINY = derived(PHI35_MINI, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, vocab_size=320, bos_token_id=1,
                     eos_token_id=2, pad_token_id=2, max_position_embeddings=640,
                     original_max_position_embeddings=20,
                     rope_scaling={"rope_type": "longrope",
                                   "long_factor": PHI35_LONG_FACTOR[::2],
                                   "short_factor": PHI35_SHORT_FACTOR[::2]})
QWEN2_YARN_TINY = dict(sorted(dict(QWEN2_TINY, rope_scaling=dict(QWEN_YARN4)).items()))
#  qwen2-swa-tiny:  qwen2-tiny with Qwen2's sliding window on: use_sliding_window, a window of 7
#                   positions (the 16-token prompt and its decode steps run far past it) and
#                   max_window_layers 1, so layer 0 attends to everything and layer 1 to its
#                   window (transformers' layer_types: full_attention, sliding_attention).
QWEN2_SWA_TINY = derived(QWEN2_TINY, use_sliding_window=True, sliding_window=7, max_window_layers=1)
#  mistral-tiny:    Mistral-7B's config cut down: llama3-tiny's widths (8 q / 2 kv heads of 16,
#                   head_dim implicit), an untied head, theta 1e4, and a window of 5 positions in
#                   every layer (the 16-token prompt and its decode steps run far past it).
#  qwen3-tiny:      Qwen3-4B's config cut down: 4 q / 2 kv heads of head_dim 64 on a hidden size of
#                   128 (so q is twice as wide as the residual stream, as Qwen3-0.6B's and 4B's),
#                   q_norm and k_norm per head, no biases, a tied head, theta 1e6.
QWEN3_TINY = derived(QWEN3_4B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                     max_window_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64, vocab_size=384, bos_token_id=0, eos_token_id=0)
MISTRAL_TINY = derived(MISTRAL_7B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=2, vocab_size=384,
                       bos_token_id=382, eos_token_id=383, sliding_window=5)
#  mixtral-tiny:    Mixtral-8x7B's config cut down: mistral-tiny's attention widths (8 q / 2 kv
#                   heads of 16, head_dim implicit, GQA 4:1 as Mixtral's) without a window, theta
#                   1e6, an untied head, and in each layer 4 experts of width 64 with 2 chosen a
#                   token (Mixtral's top 2, renormalised). The experts are narrow to keep the set
#                   small: they are a third of its 1.21 MB. Its prompt reaches every expert of both
#                   layers (tokens per expert 1, 2, 15, 14 and 2, 11, 15, 4) and every stored
#                   token's choice is decisive (selftest/models.py: check_router), which the
#                   variants tried with other widths and vocabularies were not all.
MIXTRAL_TINY = derived(MIXTRAL_8X7B, hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=2, num_local_experts=4,
                       num_experts_per_tok=2, vocab_size=384, bos_token_id=382, eos_token_id=383)
#  qwen3-moe-tiny:  Qwen3-30B-A3B's config cut down: qwen3-tiny's attention (q_norm and k_norm
#                   per head, no biases, theta 1e6; 4 q / 2 kv heads of an explicit head_dim of 64
#                   on a hidden size of 128, so q is twice as wide as the residual stream as
#                   Qwen3-30B-A3B's 32 x 128 on 2048) with an untied head, and in each layer 8
#                   experts of width (moe_intermediate_size) 16 with 2 chosen a token, renormalised
#                   (norm_topk_prob true, as Qwen3-30B-A3B's); every layer sparse
#                   (decoder_sparse_step 1, no mlp_only_layers). intermediate_size, a dense MLP's
#                   width that no layer has, is 8 times the experts' as Qwen3-30B-A3B's (6144 over
#                   768), so an engine taking it for the experts' width fails on the checkpoint's
#                   shapes. The widths are those of the smaller of the two draws tried that pass
#                   the routing rules: top 2 of 8 experts is a closer choice than mixtral-tiny's
#                   top 2 of 4, and of 18 variants (head_dim 32 and 64, expert widths 8 to 80) 14
#                   had a stored token within 8x its calibrated router error of another expert
#                   (models/build.py: check_routing_decisive), one a choice that the calibration's
#                   own rounding flipped, and head_dim 32 with width 32 (1.30 MB) one that the
#                   selftest's fp16 run flipped at greedy step 13 (margin drift 2.86); this one and
#                   head_dim 32 with width 56 (1.59 MB) passed. Its prompt reaches 6 experts of
#                   layer 0 and 7 of layer 1 (tokens per expert 0, 7, 0, 4, 7, 10, 1, 3 and 8, 4,
#                   2, 0, 8, 1, 0, 9), every stored choice at least 11.4 times its calibrated error
#                   from a flip (selftest/models.py: check_router).
QWEN3_MOE_TINY = derived(QWEN3_30B_A3B, hidden_size=128, intermediate_size=128,
                         moe_intermediate_size=16, num_hidden_layers=2, max_window_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8,
                         num_experts_per_tok=2, vocab_size=384, bos_token_id=0, eos_token_id=0)
#  qwen2-moe-tiny:  Qwen1.5-MoE-A2.7B's config cut down: Qwen2's attention with q/k/v biases
#                   (qkv_bias's default), theta 1e6, an untied head, 8 q / 2 kv heads of 16 on a
#                   hidden size of 128 (head_dim implicit; GQA 4:1, as Qwen2-57B-A14B's 28 / 4 is
#                   GQA where Qwen1.5-MoE-A2.7B is MHA), no window (use_sliding_window false); in
#                   each layer 8 routed experts of width (moe_intermediate_size) 24 with 4 chosen a
#                   token, not renormalised (Qwen1.5-MoE's top 4, norm_topk_prob false), and a
#                   shared expert of width (shared_expert_intermediate_size) 96, 4x the experts',
#                   Qwen1.5-MoE-A2.7B's ratio (5632 over 1408), through its sigmoid gate; every
#                   layer sparse (decoder_sparse_step 1, no mlp_only_layers). intermediate_size,
#                   a dense MLP's width that no layer has, is 160, neither of the other two, so an
#                   engine taking one width for another fails on the checkpoint's shapes. Top 4 of
#                   8 is a closer choice than qwen3-moe-tiny's top 2: of 36 draws (expert widths
#                   8, 16, 24, 32, 40, 48 with 8 / 1, 8 / 2, 8 / 4, 4 / 1, 4 / 2 and 2 / 1 heads)
#                   33 had a stored token within 8x its calibrated router error of another expert
#                   (models/build.py: check_routing_decisive; one a choice that the calibration's
#                   own rounding flipped), layer 0 of 4 / 1 and 2 / 1 heads at any width; of the
#                   other three, 4 / 2 heads with width 32 (10.0x) had every shared-expert gate of
#                   its prompt below 0.76 and 8 / 4 heads with width 8 (10.0x) layer 0's gates
#                   within 0.48 of each other (selftest/models.py: check_shared_gate); this one
#                   passed every rule. Its prompt reaches every expert of both layers (tokens per
#                   expert 7, 4, 3, 16, 14, 14, 1, 5 and 2, 12, 8, 15, 5, 15, 5, 2), every stored
#                   choice at least 11.2 times its calibrated error from a flip
#                   (selftest/models.py: check_router), and its shared-expert gates span
#                   0.013-0.989 over the prompt in layer 0 and 0.247-0.928 in layer 1.
QWEN2_MOE_TINY = derived(QWEN15_MOE_A27B, hidden_size=128, intermediate_size=160,
                         moe_intermediate_size=24, shared_expert_intermediate_size=96,
                         num_hidden_layers=2, max_window_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, num_experts=8, num_experts_per_tok=4,
                         vocab_size=384, bos_token_id=0, eos_token_id=0)
#  gemma3-tiny:     Gemma-3-1B's config cut down: 4 q / 1 kv head (GQA 4:1, as the 1B's) of an
#                   explicit head_dim of 64 on a hidden size of 128 (q twice the residual width,
#                   as the 1B's 1024 on 1152), query_pre_attn_scalar 48 where head_dim is 64 (the
#                   27B's is 168 on 128), so an engine scaling by head_dim^-0.5 fails; layer 0
#                   sliding (a window of 5 positions, RoPE base 1e4) and layer 1 global
#                   (sliding_window_pattern 2; RoPE base 1e6 with the 4B's linear scaling, factor
#                   8, on the global layers only), GeGLU (tanh) of width 192, a tied head.
GEMMA3_TINY = derived(GEMMA3_1B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                      query_pre_attn_scalar=48, sliding_window=5, sliding_window_pattern=2,
                      rope_scaling={"factor": 8.0, "rope_type": "linear"}, vocab_size=384)
#  gemma2-tiny:     Gemma-2-2B's config cut down: 4 q / 2 kv heads (GQA 2:1, as the 2B's 8:4) of
#                   64 on a hidden size of 128, query_pre_attn_scalar 48 (as gemma3-tiny), layer 0
#                   sliding (a window of 5 positions) and layer 1 global, GeGLU (tanh) of width
#                   192, a tied head; the attention cap lowered to GEMMA2_TINY_ATTN_CAP so that the
#                   tiny checkpoint's scores reach it (the selftest asserts a share of them past
#                   half the cap: at 50 they would not bend, and an engine ignoring the cap would
#                   pass), the logits' cap Gemma 2's 30 (the committed logits reach past it).
GEMMA2_TINY_ATTN_CAP = 4.0
GEMMA2_TINY = derived(GEMMA2_2B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                      query_pre_attn_scalar=48, sliding_window=5,
                      attn_logit_softcapping=GEMMA2_TINY_ATTN_CAP, vocab_size=384)
# llama3-tiny with an intermediate size of 256: every projection's input width a multiple of the
# FP8 block (128), as the quantized sets need (fine-grained FP8 scales 1x128 input groups).
LLAMA3_QTINY = derived(LLAMA3_TINY, intermediate_size=256)
# qwen2-tiny likewise for quantized sets: hidden 256 (16 heads of 16), intermediate 256; its q/k/v
# biases stay 16-bit beside the quantized weights.
QWEN2_QTINY = derived(QWEN2_TINY, hidden_size=256, num_attention_heads=16, intermediate_size=256)


def bf16_config(cfg):
    """The config of a bf16 set: the same model, torch_dtype "bfloat16" (what its checkpoint
    stores, as on the hub: Qwen2.5 and Llama 3 ship bf16)."""
    return derived(cfg, torch_dtype=CONFIG_DTYPE["bf16"])

# margin_epsilon (logit units): the reference's top-2 margin below which a differing greedy token
# is accepted (together with the top-5 cross-check), and the sample margin below which a differing
# seeded token is. It must exceed what a correct implementation's rounding can move a margin by:
# the selftest runs the same transformers forward with fp16 weights and fp16 activations
# everywhere (a bf16 set: bf16; logits included, so more lossy than an implementation with fp32
# logits), teacher-forced on the reference tokens, and fails a synthetic set whose epsilon is not
# at least twice the largest change of the top-2 margin over the 32 steps (the drift). A step
# whose margin reaches the epsilon is decisive; touchstone reports a token check that decides
# fewer than 24 of 32 steps as inconclusive. Every step of every synthetic set is decisive:
# models/peak.py shapes the output rows until each margin is twice the epsilon.
#
# The committed sets' logits have std ~12 (models/checkpoint.py, FINAL_NORM_GAIN 3), and the
# drift scales with them: measured (2026-11-27, CPU, peaked rows) 0.037-0.148 in fp16 (phi3.5-tiny
# the largest) and 0.44 in bf16 (8 significant bits instead of 11). The rows models/peak.py
# raises add to the bf16 drift, and by how much depends on where the construction settles:
# 0.44-1.21 over the variants tried (0.41-0.48 as drawn). EPSILON_COMMITTED 0.35 is 2.4x the worst
# fp16 drift, EPSILON_BF16_COMMITTED 2.0 4.5x the bf16 one (1.65x the worst variant's); the
# selftest holds every set to epsilon >= 2 drift, so a construction that drifts more fails there.
# The full-size sets keep logits of std ~4; their drift was 0.030 (gpt2-124m) and 0.039
# (qwen2.5-0.5b, 24 layers) in fp16 (peaked: 0.027 gpt2-124m), so EPSILON_FULL 0.2 is 5x Qwen's
# (room for Phi-3's 32 layers), and 0.28-0.34 in bf16 (qwen2.5-0.5b-bf16, llama3.2-1b-bf16; peaked
# qwen2.5-0.5b-bf16 0.25), so EPSILON_BF16_FULL 0.8 is 2.4x Llama's.
# quant: a quantized set's format (models/quantize.py: fp8-block, fp8-channel, awq, gptq), its
# projections stored in that format; quant_group the 4-bit formats' group size.
ModelSpec = namedtuple("ModelSpec",
                       "name family tier config decode_steps margin_epsilon dtype quant quant_group",
                       defaults=("f16", None, None))
EPSILON_COMMITTED, EPSILON_FULL = 0.35, 0.2
EPSILON_BF16_COMMITTED, EPSILON_BF16_FULL = 2.0, 0.8

MODELS = [
    ModelSpec("qwen2-tiny", "qwen2", COMMITTED, QWEN2_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("phi3-tiny", "phi3", COMMITTED, PHI3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("gpt2-tiny", "gpt2", COMMITTED, GPT2_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("llama3-tiny", "llama", COMMITTED, LLAMA3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("phi3.5-tiny", "phi3", COMMITTED, PHI35_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen2-yarn-tiny", "qwen2", COMMITTED, QWEN2_YARN_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen2-swa-tiny", "qwen2", COMMITTED, QWEN2_SWA_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("mistral-tiny", "llama", COMMITTED, MISTRAL_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen3-tiny", "qwen3", COMMITTED, QWEN3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("mixtral-tiny", "mixtral", COMMITTED, MIXTRAL_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen3-moe-tiny", "qwen3_moe", COMMITTED, QWEN3_MOE_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen2-moe-tiny", "qwen2_moe", COMMITTED, QWEN2_MOE_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("gemma3-tiny", "gemma3", COMMITTED, GEMMA3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("gemma3-tiny-bf16", "gemma3", COMMITTED, bf16_config(GEMMA3_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    ModelSpec("gemma2-tiny", "gemma2", COMMITTED, GEMMA2_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("gemma2-tiny-bf16", "gemma2", COMMITTED, bf16_config(GEMMA2_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    # bf16: qwen2-tiny's and llama3-tiny's configs in bf16, drawn from their own seeds (the names')
    ModelSpec("qwen2-tiny-bf16", "qwen2", COMMITTED, bf16_config(QWEN2_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    ModelSpec("llama3-tiny-bf16", "llama", COMMITTED, bf16_config(LLAMA3_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    # quantized (models/quantize.py): the published formats' tensors for every projection;
    # 4-bit groups of 32 inputs so that each projection has several (the hub's are 128: the
    # full tier's). The FP8 sets keep the bf16 epsilon: their forward is discontinuous and its
    # drift grows with the logits a larger epsilon would peak, so the selftest holds their
    # drift below every peaked margin instead (selftest/models.py: fp8_drift)
    ModelSpec("llama3-tiny-fp8-bf16", "llama", COMMITTED, bf16_config(LLAMA3_QTINY), 8,
              EPSILON_BF16_COMMITTED, "bf16", "fp8-block"),
    ModelSpec("llama3-tiny-fp8dyn-bf16", "llama", COMMITTED, bf16_config(LLAMA3_QTINY), 8,
              EPSILON_BF16_COMMITTED, "bf16", "fp8-channel"),
    ModelSpec("llama3-tiny-awq", "llama", COMMITTED, LLAMA3_QTINY, 8, EPSILON_COMMITTED, "f16",
              "awq", 32),
    ModelSpec("llama3-tiny-gptq", "llama", COMMITTED, LLAMA3_QTINY, 8, EPSILON_COMMITTED, "f16",
              "gptq", 32),
    ModelSpec("qwen2-tiny-fp8-bf16", "qwen2", COMMITTED, bf16_config(QWEN2_QTINY), 8,
              EPSILON_BF16_COMMITTED, "bf16", "fp8-block"),
    ModelSpec("qwen2-tiny-awq", "qwen2", COMMITTED, QWEN2_QTINY, 8, EPSILON_COMMITTED, "f16",
              "awq", 32),
    ModelSpec("qwen2.5-0.5b", "qwen2", FULL, QWEN25_05B, 8, EPSILON_FULL),
    ModelSpec("phi3-mini-4k", "phi3", FULL, PHI3_MINI_4K, 8, EPSILON_FULL),
    ModelSpec("gpt2-124m", "gpt2", FULL, GPT2_124M, 8, EPSILON_FULL),
    ModelSpec("llama3.2-1b", "llama", FULL, LLAMA32_1B, 8, EPSILON_FULL),
    ModelSpec("phi3.5-mini", "phi3", FULL, PHI35_MINI, 8, EPSILON_FULL),
    ModelSpec("qwen2.5-0.5b-bf16", "qwen2", FULL, bf16_config(QWEN25_05B), 8, EPSILON_BF16_FULL,
              "bf16"),
    ModelSpec("llama3.2-1b-bf16", "llama", FULL, bf16_config(LLAMA32_1B), 8, EPSILON_BF16_FULL,
              "bf16"),
]
# config.json's model_type -> the family whose layers it has (the generator's structure; the
# engine reads the same mapping): Mistral is Llama's layers with a sliding window; Mixtral is
# Llama's attention with a sparse mixture-of-experts block for the MLP, a family of its own;
# Qwen3-MoE is Qwen3's attention (q_norm, k_norm) with a sparse block in every layer, another;
# Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B) Qwen2's attention with a sparse block and a gated shared
# expert in every layer, another.
FAMILY_OF_MODEL_TYPE = {"qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2", "llama": "llama",
                        "mistral": "llama", "qwen3": "qwen3", "mixtral": "mixtral",
                        "qwen3_moe": "qwen3_moe", "qwen2_moe": "qwen2_moe",
                        "gemma3_text": "gemma3", "gemma2": "gemma2"}
# model_type -> the class transformers must load it as
ARCH = {"qwen2": "Qwen2ForCausalLM", "phi3": "Phi3ForCausalLM", "gpt2": "GPT2LMHeadModel",
        "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen3": "Qwen3ForCausalLM",
        "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
        "qwen2_moe": "Qwen2MoeForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
        "gemma2": "Gemma2ForCausalLM"}
# The families whose MLP is a sparse mixture of experts (a router, then num_experts_per_tok of
# the layer's experts a token): their sets have the router_logits tap instead of the dense MLP's
# ffn_gate, ffn_up and ffn_act (models/taps.py), but where a shared expert runs beside the routed
# ones (SHARED_EXPERT_FAMILIES).
MOE_FAMILIES = ("mixtral", "qwen3_moe", "qwen2_moe")
# The mixture-of-experts families with a shared expert (Qwen2-MoE's mlp.shared_expert, a dense
# SwiGLU MLP of width shared_expert_intermediate_size that every token runs, its output times
# sigmoid(mlp.shared_expert_gate(x)) added to the routed experts' sum): their sets have the
# moe_out (the routed sum) and shared_out (the shared expert's output) taps, and ffn_gate, ffn_up
# and ffn_act of the shared expert (models/taps.py).
SHARED_EXPERT_FAMILIES = ("qwen2_moe",)
# The families with Qwen3's attention: an RMSNorm over each head of q and k (q_norm, k_norm)
# before RoPE, no biases.
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe")
# Gemma 3's layers (model_type gemma3_text): norms of weight 1 + w, a norm after attention and
# after the MLP as well as before them (the attn_post_norm and ffn_post_norm taps), q_norm and
# k_norm (over heads laid out [B, heads, T, D], after the transpose), GeGLU, the scaled embedding,
# and a RoPE base per layer type; Gemma 2's (model_type gemma2) the same without q_norm and k_norm,
# one RoPE, and soft caps on the attention scores and the logits.
GEMMA_FAMILIES = ("gemma3", "gemma2")
# Checkpoint sets (real weights): the full-size epsilon. Real logit scales differ from the
# synthetic ones; the value is recorded in the set, so a consumer can see what was assumed.
# Real checkpoints: the full-size epsilons. Real logit scales differ from the synthetic ones; the
# value is recorded in the set, so a consumer can see what was assumed.
CHECKPOINT_EPSILON = EPSILON_FULL
CHECKPOINT_EPSILON_BF16 = EPSILON_BF16_FULL  # a bf16 checkpoint set (set_dtype)
CHECKPOINT_DECODE_STEPS = 8


def models_for(tier, names=None):
    return [m for m in MODELS if m.tier == tier and (not names or m.name in names)]


def with_layers(spec, n_layers):
    """A cut-down copy of a spec (smoke tests of the full-size code path): n_layers layers, named
    <model>-l<n>; everything else unchanged."""
    key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
    over = {key: n_layers}
    if spec.family in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe"):
        over["max_window_layers"] = min(spec.config["max_window_layers"], n_layers)
    return spec._replace(name="%s-l%d" % (spec.name, n_layers),
                         config=derived(spec.config, **over))


# Quantized full-size sets: Llama-3.2-1B's and Qwen2.5-0.5B's projections in each format (4-bit
# groups of 128, as the hub's AWQ and GPTQ checkpoints), every layer, for conformance at real
# widths and for the quantized decode's speed.
MODELS += [
    ModelSpec("llama3.2-1b-fp8-bf16", "llama", FULL, bf16_config(LLAMA32_1B), 8, EPSILON_BF16_FULL,
              "bf16", "fp8-block"),
    ModelSpec("llama3.2-1b-fp8dyn-bf16", "llama", FULL, bf16_config(LLAMA32_1B), 8,
              EPSILON_BF16_FULL, "bf16", "fp8-channel"),
    ModelSpec("llama3.2-1b-awq", "llama", FULL, LLAMA32_1B, 8, EPSILON_FULL, "f16", "awq", 128),
    ModelSpec("llama3.2-1b-gptq", "llama", FULL, LLAMA32_1B, 8, EPSILON_FULL, "f16", "gptq", 128),
    # Qwen2.5-0.5B: 896 = 7 * 128 wide, k/v 128 wide (GQA 7:1), q/k/v biases beside the
    # quantized weights, a tied 16-bit head
    ModelSpec("qwen2.5-0.5b-fp8-bf16", "qwen2", FULL, bf16_config(QWEN25_05B), 8,
              EPSILON_BF16_FULL, "bf16", "fp8-block"),
    ModelSpec("qwen2.5-0.5b-fp8dyn-bf16", "qwen2", FULL, bf16_config(QWEN25_05B), 8,
              EPSILON_BF16_FULL, "bf16", "fp8-channel"),
    ModelSpec("qwen2.5-0.5b-awq", "qwen2", FULL, QWEN25_05B, 8, EPSILON_FULL, "f16", "awq", 128),
    ModelSpec("qwen2.5-0.5b-gptq", "qwen2", FULL, QWEN25_05B, 8, EPSILON_FULL, "f16", "gptq", 128),
]

# Full sets of the 8B-class configs cut to 2 layers (the embeddings and heads alone are 2 GB of
# fp16): the real layer shapes and RoPE tables at a size the generator handles in a minute.
MODELS += [
    with_layers(ModelSpec("llama3.1-8b", "llama", FULL, LLAMA31_8B, 8, EPSILON_FULL), 2),
    with_layers(ModelSpec("qwen2.5-7b-yarn", "qwen2", FULL, QWEN25_7B_YARN, 8, EPSILON_FULL), 2),
    with_layers(ModelSpec("mistral-7b", "llama", FULL, MISTRAL_7B, 8, EPSILON_FULL), 2),
    with_layers(ModelSpec("qwen3-4b", "qwen3", FULL, QWEN3_4B, 8, EPSILON_FULL), 2),
]
# Gemma-3-1B's first 6 layers: five sliding (window 512) and one global, as its
# sliding_window_pattern 6 lays them out; the 262144-token tied embedding at full size.
MODELS += [
    with_layers(ModelSpec("gemma3-1b", "gemma3", FULL, GEMMA3_1B, 8, EPSILON_FULL), 6),
    with_layers(ModelSpec("gemma3-1b-bf16", "gemma3", FULL, bf16_config(GEMMA3_1B), 8,
                          EPSILON_BF16_FULL, "bf16"), 6),
]
# Gemma-2-2B's first 4 layers (sliding, global, sliding, global; the window of 4096 holds the
# whole pass), its caps 50 and 30, the 256000-token tied embedding at full size.
MODELS += [
    with_layers(ModelSpec("gemma2-2b", "gemma2", FULL, GEMMA2_2B, 8, EPSILON_FULL), 4),
    with_layers(ModelSpec("gemma2-2b-bf16", "gemma2", FULL, bf16_config(GEMMA2_2B), 8,
                          EPSILON_BF16_FULL, "bf16"), 4),
]
# Mixture-of-experts full-tier sets at their published widths, a layer or two each. At real widths
# a prompt's routing has choices closer than a correct engine's error (Qwen3-30B-A3B cut to one
# layer, 2026-11-28: 2 of its 16 prompt tokens within 8x of it, at 0.8x and 2.2x), which a
# committed set refuses (check_routing_decisive); these keep them, and the engine follows the
# reference's experts at exactly those rows (engine/model/routes.go), every other row routed by
# its own choice. Mixtral-8x7B's layer draws in ~15 GB (two took 19.8-20.3 GB of RSS while
# transformers loaded and stacked their experts, 2026-11-28): one layer.
MODELS += [
    with_layers(ModelSpec("qwen3-30b-a3b", "qwen3_moe", FULL, QWEN3_30B_A3B, 8, EPSILON_FULL), 2),
    with_layers(ModelSpec("qwen3-30b-a3b-bf16", "qwen3_moe", FULL, bf16_config(QWEN3_30B_A3B), 8,
                          EPSILON_BF16_FULL, "bf16"), 2),
    with_layers(ModelSpec("qwen1.5-moe-a2.7b", "qwen2_moe", FULL, QWEN15_MOE_A27B, 8, EPSILON_FULL),
                2),
    with_layers(ModelSpec("mixtral-8x7b", "mixtral", FULL, MIXTRAL_8X7B, 8, EPSILON_FULL), 1),
]
BY_NAME = {m.name: m for m in MODELS}
assert len(BY_NAME) == len(MODELS)
for _m in MODELS:  # a bf16 set is named so, and its config says what its checkpoint stores
    assert _m.dtype in DTYPES, _m.name
    assert re.sub(r"-l\d+$", "", _m.name).endswith("-bf16") == (_m.dtype == "bf16"), _m.name
    assert _m.config["torch_dtype"] == CONFIG_DTYPE[_m.dtype], _m.name


# ---------------------------------------------------------------------------------------------
# Dimensions


# E, K: a mixture-of-experts family's experts (Mixtral's num_local_experts, Qwen3-MoE's and
# Qwen2-MoE's num_experts) and experts a token (num_experts_per_tok), I then each expert's width
# (Mixtral's intermediate_size, Qwen3-MoE's and Qwen2-MoE's moe_intermediate_size); 0 and 0 for a
# dense MLP. S: the shared expert's width (Qwen2-MoE's shared_expert_intermediate_size); 0 where
# there is none.
Dims = namedtuple("Dims", "family H L nH nKV D I V P tied eps E K S", defaults=(0, 0, 0))

# A config's expert count by family: (the published key, the other name transformers reads for
# it or None, the config class's default).
MOE_EXPERT_KEYS = {"qwen3_moe": ("num_experts", "num_local_experts", 128),
                   "qwen2_moe": ("num_experts", None, 60)}


def moe_dense_layers(family, cfg):
    """The layers of a Qwen3-MoE or Qwen2-MoE config that transformers builds with a dense MLP
    (Qwen3MoeDecoderLayer and Qwen2MoeDecoderLayer alike: those in mlp_only_layers, and with
    num_experts > 0 those whose index + 1 decoder_sparse_step does not divide; every layer when
    there are no experts). Only configs with none are implemented (Qwen3-30B-A3B and
    Qwen1.5-MoE-A2.7B: decoder_sparse_step 1, no mlp_only_layers)."""
    L = cfg["num_hidden_layers"]
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step", 1)
    E = moe_experts(family, cfg)
    return [i for i in range(L) if i in only or not (E > 0 and (i + 1) % step == 0)]


def moe_experts(family, cfg):
    """A Qwen3-MoE or Qwen2-MoE config's expert count: num_experts as published. transformers 5
    maps Qwen3-MoE's to num_local_experts (Qwen3MoeConfig.attribute_map) and its save_pretrained
    writes only num_local_experts, which then counts where num_experts is absent; Qwen2MoeConfig
    has no such mapping (it reads and writes num_experts only), so a Qwen2-MoE config with
    num_local_experts alone would build its default 60 experts: refused. Both, disagreeing:
    refused (transformers would take one, the other name says otherwise)."""
    key, alias, default = MOE_EXPERT_KEYS[family]
    a, b = cfg.get(key), cfg.get("num_local_experts")
    if a is not None and b is not None and a != b:
        raise ValueError("num_experts %r and num_local_experts %r disagree" % (a, b))
    if a is None and b is not None and alias is None:
        raise ValueError("num_local_experts %r without num_experts: %s's config class does not "
                         "read it (it would build its default %d experts)" % (b, family, default))
    return a if a is not None else (b if b is not None else default)


def qwen2_moe_window_layers(cfg):
    """The layers of a Qwen2-MoE config that see a sliding window (bools), by Qwen2's rule: only
    with use_sliding_window (without it Qwen2MoeConfig sets sliding_window to 0: none), on the
    layers layer_types calls sliding_attention. A config that leaves layer_types out with
    use_sliding_window true is refused: Qwen2's (and transformers 4's Qwen2-MoE) default windows
    the layers from max_window_layers on, transformers 5.17's Qwen2MoeConfig.__post_init__ the
    even layers below max_window_layers, so the reference and an engine following Qwen2 would
    window different layers. layer_types naming sliding layers without use_sliding_window (or
    without a positive sliding_window) is refused too: no window applies to them."""
    L = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types is not None and (len(types) != L or set(types) - {"sliding_attention",
                                                                "full_attention"}):
        raise ValueError("layer_types %r: want %d of sliding_attention / full_attention"
                         % (types, L))
    on = bool(cfg.get("use_sliding_window", False)) and bool(cfg.get("sliding_window"))
    if not on:
        if types is not None and "sliding_attention" in types:
            raise ValueError("layer_types has sliding_attention layers but no window applies "
                             "(sliding_window %r, use_sliding_window %r)"
                             % (cfg.get("sliding_window"), cfg.get("use_sliding_window")))
        return [False] * L
    if types is None:
        raise ValueError("a Qwen2-MoE config with use_sliding_window and no layer_types: "
                         "transformers 5.17 windows the even layers below max_window_layers, "
                         "Qwen2's rule those from it on; give layer_types")
    return [t == "sliding_attention" for t in types]


def dims(family, cfg):
    """The dimensions a forward needs, read from an HF config dict."""
    if family == "gpt2":
        H, nH = cfg["n_embd"], cfg["n_head"]
        return Dims(family, H, cfg["n_layer"], nH, nH, H // nH, cfg.get("n_inner") or 4 * H,
                    cfg["vocab_size"], cfg["n_positions"], cfg.get("tie_word_embeddings", True),
                    cfg.get("layer_norm_epsilon", 1e-5))
    H, nH = cfg["hidden_size"], cfg["num_attention_heads"]
    nKV = cfg.get("num_key_value_heads") or nH
    D = cfg.get("head_dim") or H // nH
    E = K = S = 0
    I = cfg["intermediate_size"]
    if family == "mixtral":
        E, K = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    elif family in ("qwen3_moe", "qwen2_moe"):
        dense = moe_dense_layers(family, cfg)
        if dense:
            raise ValueError("%s layers %s have a dense MLP (mlp_only_layers %r, "
                             "decoder_sparse_step %r): only every layer sparse is implemented"
                             % ("Qwen3-MoE" if family == "qwen3_moe" else "Qwen2-MoE", dense,
                                cfg.get("mlp_only_layers"), cfg.get("decoder_sparse_step", 1)))
        E, K, I = (moe_experts(family, cfg), cfg["num_experts_per_tok"],
                   cfg["moe_intermediate_size"])
    if family == "qwen2_moe":
        qwen2_moe_window_layers(cfg)  # refuses the layouts it cannot name
        S = cfg.get("shared_expert_intermediate_size", 5632)  # Qwen2MoeConfig's default
    if family in MOE_FAMILIES:
        assert 1 <= K <= E, (K, E)
    # Gemma3TextConfig ties the head by default (the hub's gemma-3 files leave the key out)
    tied = cfg.get("tie_word_embeddings", family in GEMMA_FAMILIES)
    return Dims(family, H, cfg["num_hidden_layers"], nH, nKV, D, I,
                cfg["vocab_size"], cfg["max_position_embeddings"],
                tied, cfg["rms_norm_eps"], E, K, S)


# Qwen3-MoE and Qwen2-MoE presets: every layer a sparse MoE block (decoder_sparse_step 1, no
# mlp_only_layers), as Qwen3-30B-A3B's and Qwen1.5-MoE-A2.7B's, the only layout the generator and
# the engine implement.
for _m in MODELS:
    if _m.family in ("qwen3_moe", "qwen2_moe"):
        assert _m.config["decoder_sparse_step"] == 1 \
            and _m.config.get("mlp_only_layers", []) == [] \
            and moe_dense_layers(_m.family, _m.config) == [], _m.name


def rope_theta(cfg):
    if "rope_theta" in cfg:
        return float(cfg["rope_theta"])
    return float(cfg["rope_parameters"]["rope_theta"])
