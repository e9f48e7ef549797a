package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// AttentionPrefill computes softmax(q·kᵀ·scale + mask)·v over whole sequences, with GQA.
func (b *Backend) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_prefill"
	if err := backend.CheckAttentionPrefill(out, q, k, v, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k", k}, arg{"v", v})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_attention_config{
		dtype:      dtype(d[1].dt),
		batch:      c.int("batch", d[1].shape[0]),
		seq_len:    c.int("seq_len", d[1].shape[1]),
		n_heads:    c.int("n_heads", cfg.NumHeads),
		n_kv_heads: c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:   c.int("head_dim", cfg.HeadDim),
		causal:     cBool(cfg.Causal),
		scale:      C.float(cfg.Scale),
		softcap:    C.float(cfg.Softcap),
		window:     c.int("window", cfg.Window),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_prefill(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// AttentionDecode attends one query per sequence to the first cacheLens[b] positions of its
// KV cache. The lengths are range-checked on the device: one outside [1, max_len] surfaces
// as TS_ERR_INDEX at the next Download or Synchronize (at once with guards on).
func (b *Backend) AttentionDecode(out, q, kCache, vCache, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode"
	if err := backend.CheckAttentionDecode(out, q, kCache, vCache, cacheLens, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"cache_lens", cacheLens})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_decode_config{
		dtype:      dtype(d[1].dt),
		batch:      c.int("batch", d[1].shape[0]),
		max_len:    c.int("max_len", d[2].shape[1]),
		n_heads:    c.int("n_heads", cfg.NumHeads),
		n_kv_heads: c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:   c.int("head_dim", cfg.HeadDim),
		scale:      C.float(cfg.Scale),
		softcap:    C.float(cfg.Softcap),
		window:     c.int("window", cfg.Window),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_decode(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), (*C.int32_t)(ptr(d[4])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// AttentionScoresSoftmax writes the attention probabilities, fp32, one block per query row.
func (b *Backend) AttentionScoresSoftmax(probs, q, k backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_scores_softmax"
	if err := backend.CheckAttentionScoresSoftmax(probs, q, k, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"probs", probs}, arg{"q", q}, arg{"k", k})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_scores_config{
		dtype:      dtype(d[1].dt),
		batch:      c.int("batch", d[1].shape[0]),
		seq_q:      c.int("seq_q", d[1].shape[1]),
		seq_k:      c.int("seq_k", d[2].shape[1]),
		n_heads:    c.int("n_heads", cfg.NumHeads),
		n_kv_heads: c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:   c.int("head_dim", cfg.HeadDim),
		causal:     cBool(cfg.Causal),
		scale:      C.float(cfg.Scale),
		softcap:    C.float(cfg.Softcap),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_scores_softmax(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &ccfg, b.e)
	return b.launched(op, st, arg{"probs", probs})
}

// cBool is a C int flag: 1 for true, 0 for false.
func cBool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// AttentionDecodePaged attends one query per sequence to its paged KV cache through its
// block table. The lengths and the table entries they reach are range-checked on the device:
// a bad one surfaces as TS_ERR_INDEX at the next Download or Synchronize (at once with guards
// on).
func (b *Backend) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_paged"
	if err := backend.CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"block_table", blockTable}, arg{"cache_lens", cacheLens})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_paged_decode_config{
		dtype:       dtype(d[1].dt),
		batch:       c.int("batch", d[1].shape[0]),
		num_blocks:  c.int("num_blocks", d[2].shape[0]),
		block_size:  c.int("block_size", d[2].shape[1]),
		table_width: c.int("table_width", d[4].shape[1]),
		n_heads:     c.int("n_heads", cfg.NumHeads),
		n_kv_heads:  c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:    c.int("head_dim", cfg.HeadDim),
		scale:       C.float(cfg.Scale),
		softcap:     C.float(cfg.Softcap),
		window:      c.int("window", cfg.Window),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_decode_paged(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), (*C.int32_t)(ptr(d[4])),
		(*C.int32_t)(ptr(d[5])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// AttentionPrefillPaged attends each sequence's new tokens to its paged cache, causally from
// its prefix on. The starts, lengths and table entries are checked on the device: a bad one
// surfaces as TS_ERR_INDEX at the next Download or Synchronize (at once with guards on).
func (b *Backend) AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_prefill_paged"
	if err := backend.CheckAttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"block_table", blockTable}, arg{"q_starts", qStarts}, arg{"kv_lens", kvLens})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_paged_prefill_config{
		dtype:       dtype(d[1].dt),
		batch:       c.int("batch", d[6].shape[0]),
		total_q:     c.int("total_q", d[1].shape[0]),
		num_blocks:  c.int("num_blocks", d[2].shape[0]),
		block_size:  c.int("block_size", d[2].shape[1]),
		table_width: c.int("table_width", d[4].shape[1]),
		n_heads:     c.int("n_heads", cfg.NumHeads),
		n_kv_heads:  c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:    c.int("head_dim", cfg.HeadDim),
		scale:       C.float(cfg.Scale),
		softcap:     C.float(cfg.Softcap),
		window:      c.int("window", cfg.Window),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_prefill_paged(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), (*C.int32_t)(ptr(d[4])),
		(*C.int32_t)(ptr(d[5])), (*C.int32_t)(ptr(d[6])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// AttentionDecodePagedFP8 is AttentionDecodePaged over an E4M3 pool
// (ts_attention_decode_paged_fp8); its device checks are AttentionDecodePaged's, reported under its name.
func (b *Backend) AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_paged_fp8"
	if err := backend.CheckAttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"block_table", blockTable}, arg{"cache_lens", cacheLens}, arg{"k_scale", kScale}, arg{"v_scale", vScale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_paged_decode_fp8_config{
		dtype:       dtype(d[1].dt),
		batch:       c.int("batch", d[1].shape[0]),
		num_blocks:  c.int("num_blocks", d[2].shape[0]),
		block_size:  c.int("block_size", d[2].shape[1]),
		table_width: c.int("table_width", d[4].shape[1]),
		n_heads:     c.int("n_heads", cfg.NumHeads),
		n_kv_heads:  c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:    c.int("head_dim", cfg.HeadDim),
		scale:       C.float(cfg.Scale),
		softcap:     C.float(cfg.Softcap),
		window:      c.int("window", cfg.Window),
		scale_heads: c.int("scale_heads", d[6].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_decode_paged_fp8(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), (*C.int32_t)(ptr(d[4])),
		(*C.int32_t)(ptr(d[5])), (*C.float)(ptr(d[6])), (*C.float)(ptr(d[7])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// AttentionPrefillPagedFP8 is AttentionPrefillPaged over an E4M3 pool
// (ts_attention_prefill_paged_fp8); its device checks are AttentionPrefillPaged's, reported under its name.
func (b *Backend) AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_prefill_paged_fp8"
	if err := backend.CheckAttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"q", q}, arg{"k_cache", kCache}, arg{"v_cache", vCache},
		arg{"block_table", blockTable}, arg{"q_starts", qStarts}, arg{"kv_lens", kvLens}, arg{"k_scale", kScale},
		arg{"v_scale", vScale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_paged_prefill_fp8_config{
		dtype:       dtype(d[1].dt),
		batch:       c.int("batch", d[6].shape[0]),
		total_q:     c.int("total_q", d[1].shape[0]),
		num_blocks:  c.int("num_blocks", d[2].shape[0]),
		block_size:  c.int("block_size", d[2].shape[1]),
		table_width: c.int("table_width", d[4].shape[1]),
		n_heads:     c.int("n_heads", cfg.NumHeads),
		n_kv_heads:  c.int("n_kv_heads", cfg.NumKVHeads),
		head_dim:    c.int("head_dim", cfg.HeadDim),
		scale:       C.float(cfg.Scale),
		softcap:     C.float(cfg.Softcap),
		window:      c.int("window", cfg.Window),
		scale_heads: c.int("scale_heads", d[7].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_attention_prefill_paged_fp8(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]),
		(*C.int32_t)(ptr(d[4])), (*C.int32_t)(ptr(d[5])), (*C.int32_t)(ptr(d[6])), (*C.float)(ptr(d[7])),
		(*C.float)(ptr(d[8])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
