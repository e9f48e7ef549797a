"""The protocol's tensors on a torch device, and the timing of an op there with CUDA events, for
the adapters of torch-based kernel libraries (torch, Liger-Kernel, FlashInfer).

    io = TorchIO(device)
    x = io.get(ref)              # the .npy file's tensor on the device, in its storage dtype
    io.put(ref, t)               # t converted to the output's dtype, written into its file
    serve(..., io.runner(OPS), timer=io)   # calls, and time and copy_bandwidth requests
                                           # (docs/external-backends.md)

In a time request the op runs several times over the same files: get returns the tensor it
loaded the first time, host() the same for host metadata, memo() caches work a caller does once
per model rather than per call (RoPE's cos and sin tables), and put converts to the output's
dtype on the device and stops there, so a timed launch is the op's device work alone. The L2
flush before each timed launch is touchstone bench's: a residual add over two buffers of half the
flush size.
"""

import numpy as np
import torch

from protocol import Unsupported, load_raw, store_raw

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32,
         "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}


class TorchIO:
    def __init__(self, device):
        self.device = device
        self.cache = None  # a time request's: what its first launch loaded or computed
        self._flush = None

    @property
    def timing(self):
        return self.cache is not None

    def _cached(self, key, thunk):
        if self.cache is None:
            return thunk()
        if key not in self.cache:
            self.cache[key] = thunk()
        return self.cache[key]

    def get(self, ref):
        """The reference's tensor on the device in its storage dtype."""
        def load():
            a = load_raw(ref)
            if ref["dtype"] not in TORCH:
                raise Unsupported("a %s tensor: this adapter reads %s" % (ref["dtype"], sorted(TORCH)))
            if ref["dtype"] == "bf16":
                t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            elif ref["dtype"].startswith("f8"):  # FP8 files hold the codes as bytes
                t = torch.from_numpy(np.ascontiguousarray(a)).view(TORCH[ref["dtype"]])
            else:
                t = torch.from_numpy(np.ascontiguousarray(a))
            return t.to(self.device)
        return self._cached(("get", ref["path"]), load)

    def host(self, ref):
        """The reference's array on the host (metadata a caller knows without the device)."""
        return self._cached(("host", ref["path"]), lambda: load_raw(ref))

    def memo(self, key, thunk):
        """thunk(), computed once a time request."""
        return self._cached(("memo",) + tuple(key), thunk)

    def put(self, ref, t):
        """Writes t, converted to the output's dtype, into its file; in a time request the
        converted tensor stays on the device."""
        t = t.to(TORCH[ref["dtype"]])
        if self.timing:
            return
        t = t.contiguous().cpu()
        if ref["dtype"] == "bf16":
            store_raw(ref, t.view(torch.int16).numpy().view(np.uint16))
        elif ref["dtype"].startswith("f8"):
            store_raw(ref, t.view(torch.uint8).numpy())
        else:
            store_raw(ref, t.numpy())

    def runner(self, ops):
        """protocol.serve's run for ops (op name -> f(params, inputs, outputs)): the op under
        inference mode, then, outside time requests, a wait for the device."""
        def run(op, params, inputs, outputs):
            with torch.inference_mode():
                ops[op](params, inputs, outputs)
            self.sync()
        return run

    def sync(self):
        """Waits for the device's work, outside time requests (whose events wait instead)."""
        if not self.timing and self.device.startswith("cuda"):
            torch.cuda.synchronize()

    # The timer of protocol.serve.

    @property
    def timing_device(self):
        if not self.device.startswith("cuda"):
            return self.device
        return "%s %s" % (torch.device(self.device), torch.cuda.get_device_name(self.device))

    def time(self, launch, warmup, repeats, flush_bytes):
        if not self.device.startswith("cuda"):
            raise Unsupported("timing on %s: this adapter times with CUDA events" % self.device)
        self.cache = {}
        try:
            with torch.inference_mode():
                launch()  # loads the inputs: untimed
                for _ in range(warmup):
                    launch()
                a, b = self._flush_buffers(flush_bytes)
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
                for s, e in zip(starts, ends):
                    a.add_(b)
                    s.record()
                    launch()
                    e.record()
                torch.cuda.synchronize()
                return [s.elapsed_time(e) for s, e in zip(starts, ends)]
        finally:
            self.cache = None

    def _flush_buffers(self, flush_bytes):
        n = max(flush_bytes // 4, 1)  # two fp16 buffers of half the flush each
        if self._flush is None or self._flush[0].numel() != n:
            self._flush = None
            g = torch.Generator(device=self.device).manual_seed(1)
            self._flush = (torch.randn(n, generator=g, device=self.device, dtype=torch.float16),
                           torch.randn(n, generator=g, device=self.device, dtype=torch.float16) * 1e-3)
        return self._flush

    def copy_gbps(self):
        """The median over 20 of a 256 MiB device-to-device copy, bytes read plus written."""
        if not self.device.startswith("cuda"):
            raise Unsupported("copy bandwidth on %s: this adapter times with CUDA events" % self.device)
        n = 256 << 20
        src = torch.empty(n, dtype=torch.uint8, device=self.device).random_(0, 255)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        times = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dst.copy_(src)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return 2 * n / (sorted(times)[len(times) // 2] / 1e3) / 1e9
