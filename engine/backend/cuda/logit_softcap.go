package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// LogitSoftcap is Gemma 2's final logit soft cap, out = softcap · tanh(x / softcap), over f32,
// f16 or bf16 logits in one elementwise kernel; out may be x.
func (b *Backend) LogitSoftcap(out, x backend.Buffer, softcap float32) error {
	const op = "logit_softcap"
	if err := backend.CheckLogitSoftcap(out, x, softcap); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x})
	if err != nil {
		return err
	}
	cfg := C.ts_logit_softcap_config{
		dtype:   dtype(d[1].dt),
		n:       C.int64_t(tensor.NumElements(d[1].shape)),
		softcap: C.float(softcap),
	}
	return b.launched(op, C.tsg_logit_softcap(b.lib.api, ptr(d[0]), ptr(d[1]), &cfg, b.e), arg{"out", out})
}
