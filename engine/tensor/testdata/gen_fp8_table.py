"""Writes fp8_from_f16.npy: for every fp16 bit pattern i (the float32 value of fp16 i), the
f8e4m3 and f8e5m2 bytes torch gives under docs/quantization.md (clamp to the largest finite
value, then .to(float8), every NaN as 0x7F). Run from the repository root:
python3 engine/tensor/testdata/gen_fp8_table.py"""

import numpy as np
import torch

v = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
rows = []
for dt, mx in ((torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0)):
    q = v.clamp(-mx, mx).to(dt).view(torch.uint8).clone()
    q[torch.isnan(v)] = 0x7F
    rows.append(q.numpy())
np.save("engine/tensor/testdata/fp8_from_f16.npy", np.stack(rows))
