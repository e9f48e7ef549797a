"""Regenerates int4_*.npy: a small 4-bit Linear packed by tools/gen-golden/common/int4.py, the
Python statement of docs/quantization.md's AWQ and GPTQ formats, for the Go unpackers' test
(int4_test.go). Run from the repository root: python3 engine/tensor/testdata/gen_int4.py"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, "tools/gen-golden")
from common import int4  # noqa: E402

out = os.path.dirname(os.path.abspath(__file__))
g = torch.Generator().manual_seed(4)
K, N, G = 16, 16, 8
q = torch.randint(0, 16, (K, N), generator=g)
z = torch.randint(1, 17, (K // G, N), generator=g)
s = (torch.rand(K // G, N, generator=g) * 0.05 + 1e-3).to(torch.float32)
g_idx = torch.randint(0, K // G, (K,), generator=g).to(torch.int32)  # act-order groups
np.save(os.path.join(out, "int4_codes.npy"), q.numpy().astype(np.uint8))
np.save(os.path.join(out, "int4_awq.npy"), int4.pack_awq(q).numpy())
np.save(os.path.join(out, "int4_gptq.npy"), int4.pack_gptq_weight(q).numpy())
np.save(os.path.join(out, "int4_zeros.npy"), z.numpy().astype(np.uint8))
np.save(os.path.join(out, "int4_gptq_zeros.npy"), int4.pack_gptq_zeros(z).numpy())
np.save(os.path.join(out, "int4_scales.npy"), s.numpy())
np.save(os.path.join(out, "int4_gidx.npy"), g_idx.numpy())
np.save(os.path.join(out, "int4_dequant.npy"),
        int4.gptq_dequant(int4.pack_gptq_weight(q), int4.pack_gptq_zeros(z), s, g_idx, torch.float32).numpy())
