package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetRowsFP8 is the KV-cache append into an FP8 E4M3 cache (ts_set_rows_fp8): rows are
// range-checked on the device as SetRows' are.
func (b *Backend) SetRowsFP8(dst, src, rows, scale backend.Buffer) error {
	const op = "set_rows_fp8"
	if err := backend.CheckSetRowsFP8(dst, src, rows, scale); err != nil {
		return err
	}
	d, err := b.device(op, arg{"dst", dst}, arg{"src", src}, arg{"rows", rows}, arg{"scale", scale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_set_rows_fp8_config{
		dtype:       dtype(d[1].dt),
		dst_rows:    c.int("dst_rows", d[0].shape[0]),
		src_rows:    c.int("src_rows", d[1].shape[0]),
		row_elems:   c.int("row_elems", tensor.NumElements(d[0].shape[1:])),
		scale_heads: c.int("scale_heads", d[3].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_set_rows_fp8(b.lib.api, ptr(d[0]), ptr(d[1]), (*C.int32_t)(ptr(d[2])), (*C.float)(ptr(d[3])), &cfg, b.e)
	return b.launched(op, st, arg{"dst", dst})
}

// AttentionDecodeFP8 is decode attention over E4M3 caches (ts_attention_decode_fp8).
func (b *Backend) AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_fp8"
	if err := backend.CheckAttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"cache_lens", cacheLens}, arg{"k_scale", kScale}, arg{"v_scale", vScale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_decode_fp8_config{
		dtype:       dtype(d[1].dt),
		batch:       c.int("batch", d[1].shape[0]),
		max_len:     c.int("max_len", d[2].shape[1]),
		n_heads:     c.int("n_heads", cfg.NumHeads),
		n_kv_heads:  c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:    c.int("head_dim", cfg.HeadDim),
		scale:       C.float(cfg.Scale),
		softcap:     C.float(cfg.Softcap),
		scale_heads: c.int("scale_heads", d[5].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_decode_fp8(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), (*C.int32_t)(ptr(d[4])),
		(*C.float)(ptr(d[5])), (*C.float)(ptr(d[6])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
