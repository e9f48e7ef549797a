"""Model sets (docs/golden-format.md, "Model sets"). The reference is transformers itself
(Qwen2ForCausalLM, Phi3ForCausalLM, LlamaForCausalLM, GPT2LMHeadModel) loaded with from_pretrained
from the set's own checkpoint files, upcast to fp32, eager attention, on the CPU. Taps are captured
with module hooks; the rotated Q/K by wrapping the apply_rotary_pos_emb that the modeling module
calls, so they are exactly what transformers fed to attention, never recomputed here.

The configs and the table of sets are in common/configs.py. Here, in the order a set is built:
  generation.py   the set seed, the prompt, the greedy and seeded generation's lengths and seeds
  checkpoint.py   synthetic weights, the safetensors writer, real checkpoints placed in a set
  taps.py         tap names and shapes, the hooks that capture them
  threads.py      the full tier's worker pool and the linear layers split over it
  lockstep.py     the references and the calibration sharing each read of the weights
  reference.py    transformers' forward: loading, checks, hparams, greedy and seeded decoding
  calibration.py  the rounded forward and calibration.json
  build.py        one set from start to finish, its phases and timing, stale sets
"""
