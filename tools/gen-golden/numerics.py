"""What pins the bits: the environment every set is computed in, and the library versions the
committed bytes were made with (README, "Determinism").

Imported by __main__.py before torch, so that torch reads the environment set here:
  - never touch a GPU, even where one is present: the reference is a CPU computation;
  - ATen's vectorised CPU kernels (erf, exp, reductions) differ in the last fp64 bits between
    the AVX2, AVX512 and default builds it picks at run time: always pick the default build;
  - MKL's BLAS (fp64 matmul, also inside SDPA) likewise picks code by CPU: ask for its
    conditional-numerical-reproducibility mode, which is the same on every x86-64 CPU;
  - transformers: never reach for the hub (nothing is reachable, and a cached download must not
    change what a set is computed from), and never swap in hub kernels for the modeling code.
"""

import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ["MKL_CBWR"] = "COMPATIBLE"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["USE_HUB_KERNELS"] = "0"

PINNED_TORCH = "2.11.0"
PINNED_NUMPY = ("2.4.6", "2.5.2")
PINNED_TRANSFORMERS = "5.17.0"


def setup_torch():
    """One thread (a fixed reduction order) and deterministic algorithms; a warning where torch or
    numpy differ from the pinned versions. The full model tier adds worker threads, each of which
    also runs torch on one thread (models/threads.py)."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if torch.__version__.split("+")[0] != PINNED_TORCH or np.__version__ not in PINNED_NUMPY:
        print("warning: torch %s / numpy %s differ from the pinned versions "
              "(tools/gen-golden/requirements.txt); sets may not be byte-identical"
              % (torch.__version__, np.__version__), file=sys.stderr)


def setup_models():
    """Model sets also need transformers (pinned) and oneDNN off: fp32 CPU matmuls must go through
    the same MKL path (MKL_CBWR) on every host."""
    import torch
    import transformers
    torch.backends.mkldnn.enabled = False
    if transformers.__version__ != PINNED_TRANSFORMERS:
        print("warning: transformers %s differs from the pinned %s (tools/gen-golden/"
              "requirements.txt); model sets may not be byte-identical"
              % (transformers.__version__, PINNED_TRANSFORMERS), file=sys.stderr)
