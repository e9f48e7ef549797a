package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// synthTensor is one tensor of a synthetic checkpoint. raw, when set, is its data section
// verbatim; otherwise values are drawn from a seeded generator (see synthValues).
type synthTensor struct {
	name  string
	dtype string // safetensors dtype: F16, BF16, F32, I32
	shape []int
	raw   []byte
}

var synthSizes = map[string]int{"F16": 2, "BF16": 2, "F32": 4, "I32": 4}

// tableTensors lists the tensors of c's weight table, stored as dtype: what an export of the
// family holds (lm_head.weight only when the head is untied).
func tableTensors(c *Config, dtype string) []synthTensor {
	var out []synthTensor
	for _, w := range weightTables[c.Family] {
		if w.TiedTo != "" && c.TiedHead {
			continue
		}
		n := 1
		if strings.Contains(w.HF, "{i}") {
			n = c.Layers
		}
		for l := 0; l < n; l++ {
			out = append(out, synthTensor{name: strings.ReplaceAll(w.HF, "{i}", fmt.Sprint(l)), dtype: dtype, shape: w.Shape(c)})
		}
	}
	return out
}

// synthValues writes n pseudo-random elements of dtype to w. Float values are small (about
// ±0.1, weights' magnitude) and in fp16's range, with a few exact zeros, so that BF16 and F32
// data round to fp16 without overflowing; edge values are the bit-pattern tests' business.
func synthValues(w *bufio.Writer, dtype string, n int, r *rand.Rand) {
	var b [4]byte
	for k := 0; k < n; k++ {
		u := r.Uint64()
		v := (float32(u>>40)/(1<<24) - 0.5) * 0.2
		if u&0xff == 0 {
			v = 0
		}
		switch dtype {
		case "F16":
			binary.LittleEndian.PutUint16(b[:], float16.Fromfloat32(v).Bits())
			w.Write(b[:2])
		case "BF16":
			binary.LittleEndian.PutUint16(b[:], uint16(math.Float32bits(v)>>16))
			w.Write(b[:2])
		case "F32":
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			w.Write(b[:4])
		case "I32":
			binary.LittleEndian.PutUint32(b[:], uint32(u))
			w.Write(b[:4])
		}
	}
}

// writeSynth writes dir/config.json and dir/model.safetensors holding ts, and returns the
// safetensors file's size.
func writeSynth(tb testing.TB, dir, config string, ts []synthTensor, seed uint64) int64 {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		tb.Fatal(err)
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range ts {
		n := int64(synthSizes[t.dtype])
		for _, d := range t.shape {
			n *= int64(d)
		}
		if t.raw != nil {
			n = int64(len(t.raw))
		}
		header[t.name] = map[string]any{"dtype": t.dtype, "shape": t.shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(header)
	if err != nil {
		tb.Fatal(err)
	}
	js = append(js, []byte(strings.Repeat(" ", (8-len(js)%8)%8))...)
	path := filepath.Join(dir, "model.safetensors")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	binary.Write(w, binary.LittleEndian, uint64(len(js)))
	w.Write(js)
	r := rand.New(rand.NewPCG(seed, 1))
	for _, t := range ts {
		if t.raw != nil {
			w.Write(t.raw)
			continue
		}
		n := 1
		for _, d := range t.shape {
			n *= d
		}
		synthValues(w, t.dtype, n, r)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return 8 + int64(len(js)) + off
}

// Benchmark configs: ~300 MB checkpoints, a Qwen2 shape (GQA, untied head, large vocab) and a
// GPT-2 one (every matrix transposed, c_attn split), a few layers each.
const (
	benchQwenCfg = `{"model_type": "qwen2", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
 "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 32000, "rms_norm_eps": 1e-6,
 "max_position_embeddings": 4096, "tie_word_embeddings": false, "rope_theta": 1000000.0}`
	benchGPT2Cfg = `{"model_type": "gpt2", "n_embd": 1024, "n_layer": 4, "n_head": 16, "vocab_size": 32000,
 "n_positions": 1024, "layer_norm_epsilon": 1e-5}`
)

// BenchmarkLoadWeights loads a synthetic checkpoint (written once, so read from the page
// cache) onto the CPU backend: OpenDir, loadWeights and freeing every buffer. SetBytes is the
// file's size, so MB/s is checkpoint bytes per second.
func BenchmarkLoadWeights(b *testing.B) {
	variants := []struct{ name, config, dtype string }{
		{"qwen2-F16", benchQwenCfg, "F16"},
		{"qwen2-BF16", benchQwenCfg, "BF16"},
		{"gpt2-F32", benchGPT2Cfg, "F32"},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			cfg, err := ParseConfig([]byte(v.config))
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			size := writeSynth(b, dir, v.config, tableTensors(cfg, v.dtype), 1)
			be := cpu.New()
			b.SetBytes(size)
			b.ResetTimer()
			for b.Loop() {
				ck, err := safetensors.OpenDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				w, err := loadWeights(be, cfg, ck)
				if err != nil {
					b.Fatal(err)
				}
				freeAll(w)
				ck.Close()
			}
			b.StopTimer()
			if n := be.LiveBuffers(); n != 0 {
				b.Fatalf("%d buffers left", n)
			}
		})
	}
}

func freeAll(w map[string]backend.Buffer) {
	for _, buf := range w {
		buf.Free()
	}
}

// loadWeightsReference is the loader as it was before it was parallelised: one tensor at a
// time, decode, convert, transpose and split with the plain loops below, upload. The
// parallel loader must give exactly its buffers and its errors.
func loadWeightsReference(be backend.Backend, c *Config, ck *safetensors.Checkpoint) (map[string]backend.Buffer, error) {
	table := weightTables[c.Family]
	out := map[string]backend.Buffer{}
	fail := func(err error) (map[string]backend.Buffer, error) {
		freeAll(out)
		return nil, err
	}
	for _, w := range table {
		if c.TiedHead && w.TiedTo != "" {
			if err := checkTiedCopy(ck, w.HF, w.TiedTo); err != nil {
				return fail(err)
			}
			continue
		}
		n := 1
		if strings.Contains(w.HF, "{i}") {
			n = c.Layers
		}
		for layer := 0; layer < n; layer++ {
			sub := func(s string) string { return strings.ReplaceAll(s, "{i}", fmt.Sprint(layer)) }
			name := sub(w.HF)
			hfName := name
			if _, ok := ck.Info(hfName); !ok && c.Family == "gpt2" {
				hfName = strings.TrimPrefix(name, "transformer.")
			}
			info, ok := ck.Info(hfName)
			if !ok {
				if w.Optional {
					continue
				}
				return fail(fmt.Errorf("model: checkpoint has no tensor %s (want shape %s)", name, tensor.ShapeString(w.Shape(c))))
			}
			if want := w.Shape(c); !tensor.SameShape(info.Shape, want) {
				return fail(fmt.Errorf("model: tensor %s has shape %s, the config wants %s", name, tensor.ShapeString(info.Shape), tensor.ShapeString(want)))
			}
			t, err := ck.Tensor(hfName)
			if err != nil {
				return fail(err)
			}
			if t, err = refToF16(t, name); err != nil {
				return fail(err)
			}
			if w.Transpose {
				r, cols := t.Shape[0], t.Shape[1]
				o := tensor.New(tensor.F16, cols, r)
				for a := 0; a < r; a++ {
					for b := 0; b < cols; b++ {
						o.F16[b*r+a] = t.F16[a*cols+b]
					}
				}
				t = o
			}
			parts := []*tensor.Tensor{t}
			names := []string{sub(w.Into)}
			if w.Split != nil {
				parts, names = nil, nil
				row := t.Len() / t.Shape[0]
				off := 0
				for k, n := range w.SplitRows(c) {
					shape := append([]int{n}, t.Shape[1:]...)
					parts = append(parts, tensor.FromF16(shape, append([]float16.Float16(nil), t.F16[off*row:(off+n)*row]...)))
					names = append(names, sub(w.Split[k]))
					off += n
				}
			}
			for k, p := range parts {
				b, err := be.Upload(p)
				if err != nil {
					return fail(fmt.Errorf("model: upload %s: %w", names[k], err))
				}
				out[names[k]] = b
			}
		}
	}
	return out, nil
}

// refToF16 is toF16 as it was: F32 (and BF16, widened by Tensor) rounded element by element.
func refToF16(t *tensor.Tensor, name string) (*tensor.Tensor, error) {
	switch t.DType {
	case tensor.F16:
		return t, nil
	case tensor.F32:
		o := tensor.New(tensor.F16, t.Shape...)
		for k, v := range t.F32 {
			o.F16[k] = float16.Fromfloat32(v)
			if o.F16[k].IsInf(0) {
				return nil, fmt.Errorf("model: tensor %s element %d = %g overflows fp16", name, k, v)
			}
		}
		return o, nil
	}
	return nil, fmt.Errorf("model: tensor %s has dtype %s, want a float type", name, t.DType)
}

// edgeRaw is n elements of dtype with random bit patterns: NaNs, subnormals, signed zeros,
// values that round up to the next binade, everything but what overflows fp16 (an error,
// which the error tests cover).
func edgeRaw(dtype string, n int, r *rand.Rand) []byte {
	size := synthSizes[dtype]
	raw := make([]byte, 0, n*size)
	for len(raw) < n*size {
		u := r.Uint32()
		switch dtype {
		case "F16":
			raw = binary.LittleEndian.AppendUint16(raw, uint16(u))
		case "BF16":
			if float16.Fromfloat32(math.Float32frombits(u & 0xffff0000)).IsInf(0) {
				continue
			}
			raw = binary.LittleEndian.AppendUint16(raw, uint16(u>>16))
		case "F32":
			u = u&0x80000000 | (u&0x0fffffff + 0x30000000) // exponents around fp16's range, both ends
			if float16.Fromfloat32(math.Float32frombits(u)).IsInf(0) {
				continue
			}
			raw = binary.LittleEndian.AppendUint32(raw, u)
		}
	}
	return raw
}

// withEdgeValues fills every tensor of ts with edgeRaw bits.
func withEdgeValues(ts []synthTensor, seed uint64) []synthTensor {
	r := rand.New(rand.NewPCG(seed, 2))
	for k := range ts {
		n := 1
		for _, d := range ts[k].shape {
			n *= d
		}
		ts[k].raw = edgeRaw(ts[k].dtype, n, r)
	}
	return ts
}

// Small configs with dims that are neither tile multiples nor powers of two, so that the
// blocked transpose's partial tiles are exercised.
const (
	oddQwenCfg = `{"model_type": "qwen2", "hidden_size": 72, "num_hidden_layers": 3, "num_attention_heads": 6,
 "num_key_value_heads": 2, "intermediate_size": 100, "vocab_size": 130, "rms_norm_eps": 1e-6,
 "max_position_embeddings": 256, "tie_word_embeddings": %v, "rope_theta": 10000.0}`
	oddPhi3Cfg = `{"model_type": "phi3", "hidden_size": 72, "num_hidden_layers": 2, "num_attention_heads": 6,
 "num_key_value_heads": 3, "intermediate_size": 100, "vocab_size": 130, "rms_norm_eps": 1e-5,
 "max_position_embeddings": 256, "tie_word_embeddings": false, "rope_theta": 10000.0, "rope_scaling": null}`
	oddGPT2Cfg = `{"model_type": "gpt2", "n_embd": 136, "n_layer": 2, "n_head": 8, "vocab_size": 130,
 "n_positions": 70, "layer_norm_epsilon": 1e-5}`
)

// synthDir writes a synthetic checkpoint of config's table with edge values and returns the
// directory and the parsed config. edit, when set, may change the tensors first.
func synthDir(t *testing.T, config, dtype string, edit func([]synthTensor) []synthTensor) (string, *Config) {
	t.Helper()
	cfg, err := ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	ts := withEdgeValues(tableTensors(cfg, dtype), 3)
	if edit != nil {
		ts = edit(ts)
	}
	dir := t.TempDir()
	writeSynth(t, dir, config, ts, 4)
	return dir, cfg
}

// loadBoth runs loadWeightsWith and the reference on dir with fresh CPU backends and returns both
// results (the caller frees them) and the backends.
func loadBoth(t *testing.T, dir string, cfg *Config, workers int) (got, want map[string]backend.Buffer, gerr, werr error, gbe, wbe *cpu.Backend) {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	gbe, wbe = cpu.New(), cpu.New()
	got, gerr = loadWeightsWith(gbe, cfg, ck, workers)
	want, werr = loadWeightsReference(wbe, cfg, ck)
	return
}

// The parallel loader's buffers are bit for bit the sequential reference's, for every family,
// stored dtype and worker count, on synthetic checkpoints of edge values and on the committed
// tiny models.
func TestLoadWeightsMatchesSequentialReference(t *testing.T) {
	type setup struct {
		name string
		dir  func(t *testing.T) (string, *Config)
	}
	synth := func(config, dtype string, edit func([]synthTensor) []synthTensor) func(t *testing.T) (string, *Config) {
		return func(t *testing.T) (string, *Config) { return synthDir(t, config, dtype, edit) }
	}
	committed := func(name string) func(t *testing.T) (string, *Config) {
		return func(t *testing.T) (string, *Config) {
			dir := filepath.Join("..", "..", "golden", "models", name)
			cfg, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			return dir, cfg
		}
	}
	// storeTiedHead adds lm_head.weight as a copy of the embedding to a tied checkpoint.
	storeTiedHead := func(ts []synthTensor) []synthTensor {
		e := ts[0]
		return append(ts, synthTensor{name: "lm_head.weight", dtype: e.dtype, shape: e.shape, raw: e.raw})
	}
	// noPrefix names GPT-2's tensors as hub files do, without "transformer.".
	noPrefix := func(ts []synthTensor) []synthTensor {
		for k := range ts {
			ts[k].name = strings.TrimPrefix(ts[k].name, "transformer.")
		}
		return ts
	}
	setups := []setup{
		{"qwen2-F16-untied", synth(fmt.Sprintf(oddQwenCfg, false), "F16", nil)},
		{"qwen2-BF16-tied", synth(fmt.Sprintf(oddQwenCfg, true), "BF16", nil)},
		{"qwen2-BF16-tied-stored-head", synth(fmt.Sprintf(oddQwenCfg, true), "BF16", storeTiedHead)},
		{"qwen2-F32-untied", synth(fmt.Sprintf(oddQwenCfg, false), "F32", nil)},
		{"phi3-BF16", synth(oddPhi3Cfg, "BF16", nil)},
		{"phi3-F16", synth(oddPhi3Cfg, "F16", nil)},
		{"gpt2-F32", synth(oddGPT2Cfg, "F32", nil)},
		{"gpt2-F16-hub-names", synth(oddGPT2Cfg, "F16", noPrefix)},
		{"gpt2-BF16", synth(oddGPT2Cfg, "BF16", nil)},
		{"committed-qwen2-tiny", committed("qwen2-tiny")},
		{"committed-phi3-tiny", committed("phi3-tiny")},
		{"committed-gpt2-tiny", committed("gpt2-tiny")},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			dir, cfg := s.dir(t)
			for _, workers := range []int{1, 2, 5, 16} {
				got, want, gerr, werr, gbe, wbe := loadBoth(t, dir, cfg, workers)
				if gerr != nil || werr != nil {
					t.Fatalf("workers %d: errors %v (reference %v)", workers, gerr, werr)
				}
				if len(got) != len(want) {
					t.Errorf("workers %d: %d buffers, reference %d", workers, len(got), len(want))
				}
				for name, wb := range want {
					gb, ok := got[name]
					if !ok {
						t.Errorf("workers %d: no buffer %s", workers, name)
						continue
					}
					g, err := gbe.Download(gb)
					if err != nil {
						t.Fatal(err)
					}
					w, err := wbe.Download(wb)
					if err != nil {
						t.Fatal(err)
					}
					if !sameValues(g, w) {
						t.Errorf("workers %d: %s differs from the reference (%v vs %v)", workers, name, g, w)
					}
				}
				if gbe.LiveBytes() != wbe.LiveBytes() {
					t.Errorf("workers %d: %d bytes uploaded, reference %d", workers, gbe.LiveBytes(), wbe.LiveBytes())
				}
				freeAll(got)
				freeAll(want)
			}
		})
	}
}

// noLeaks checks that be holds no buffer and that the goroutines are back to before (workers
// are waited for before loadWeights returns; the poll only absorbs the runtime's bookkeeping
// of a goroutine that has just called Done).
func noLeaks(t *testing.T, be *cpu.Backend, goroutines int) {
	t.Helper()
	if n, b := be.LiveBuffers(), be.LiveBytes(); n != 0 || b != 0 {
		t.Errorf("%d buffers (%d bytes) left allocated by the failed load", n, b)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the load, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
}

// An error in a late tensor is reported with the sequential loader's message, the first in
// table order when several tensors are bad (however the workers' timing falls), with every
// buffer uploaded before it freed and no goroutine left behind.
func TestLoadWeightsLateErrors(t *testing.T) {
	qwen := fmt.Sprintf(oddQwenCfg, false)
	find := func(ts []synthTensor, name string) *synthTensor {
		for k := range ts {
			if ts[k].name == name {
				return &ts[k]
			}
		}
		t.Fatalf("no tensor %s", name)
		return nil
	}
	cases := []struct {
		name, config, dtype, want string
		edit                      func([]synthTensor) []synthTensor
	}{
		{
			name: "wrong shape in the last layer", config: qwen, dtype: "F16",
			want: "model: tensor model.layers.2.mlp.down_proj.weight has shape [72,101], the config wants [72,100]",
			edit: func(ts []synthTensor) []synthTensor {
				d := find(ts, "model.layers.2.mlp.down_proj.weight")
				d.shape, d.raw = []int{72, 101}, make([]byte, 72*101*2)
				return ts
			},
		},
		{
			name: "missing final norm", config: qwen, dtype: "BF16",
			want: "model: checkpoint has no tensor model.norm.weight (want shape [72])",
			edit: func(ts []synthTensor) []synthTensor {
				find(ts, "model.norm.weight").name = "model.norm.weight.renamed"
				return ts
			},
		},
		{
			// Two errors: an overflow in a large tensor of the last layer, and a missing
			// final norm, later in table order (found at planning, before any tensor is read):
			// the overflow is the one reported.
			name: "overflow before a missing tensor", config: qwen, dtype: "BF16",
			want: "model: tensor model.layers.2.mlp.up_proj.weight element 5 = 65536 overflows fp16",
			edit: func(ts []synthTensor) []synthTensor {
				u := find(ts, "model.layers.2.mlp.up_proj.weight")
				binary.LittleEndian.PutUint16(u.raw[2*5:], 0x4780) // 65536
				binary.LittleEndian.PutUint16(u.raw[2*9:], 0xff80) // -Inf, later
				find(ts, "model.norm.weight").name = "model.norm.weight.renamed"
				return ts
			},
		},
		{
			name: "F32 overflow", config: qwen, dtype: "F32",
			want: "model: tensor model.layers.1.self_attn.o_proj.weight element 100 = -70000 overflows fp16",
			edit: func(ts []synthTensor) []synthTensor {
				binary.LittleEndian.PutUint32(find(ts, "model.layers.1.self_attn.o_proj.weight").raw[4*100:], math.Float32bits(-70000))
				return ts
			},
		},
		{
			// A non-float tensor early and a bad shape late: the early one wins.
			name: "integer tensor before a bad shape", config: qwen, dtype: "F16",
			want: "model: tensor model.layers.1.self_attn.k_proj.bias has dtype i32, want a float type",
			edit: func(ts []synthTensor) []synthTensor {
				b := find(ts, "model.layers.1.self_attn.k_proj.bias")
				b.dtype, b.raw = "I32", make([]byte, 4*len(b.raw)/2)
				d := find(ts, "model.layers.2.mlp.down_proj.weight")
				d.shape, d.raw = []int{72, 101}, make([]byte, 72*101*2)
				return ts
			},
		},
		{
			name: "unsupported dtype", config: qwen, dtype: "F16",
			want: `tensor "model.layers.2.input_layernorm.weight": dtype F64 is not supported`,
			edit: func(ts []synthTensor) []synthTensor {
				n := find(ts, "model.layers.2.input_layernorm.weight")
				n.dtype, n.raw = "F64", make([]byte, 8*72)
				return ts
			},
		},
		{
			name: "tied head that is not the embedding", config: fmt.Sprintf(oddQwenCfg, true), dtype: "BF16",
			want: "lm_head.weight is not a copy of model.embed_tokens.weight",
			edit: func(ts []synthTensor) []synthTensor {
				return append(ts, synthTensor{name: "lm_head.weight", dtype: "BF16", shape: ts[0].shape, raw: make([]byte, len(ts[0].raw))})
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg := synthDir(t, tc.config, tc.dtype, tc.edit)
			for _, workers := range []int{1, 3, 16} {
				before := runtime.NumGoroutine()
				got, want, gerr, werr, gbe, wbe := loadBoth(t, dir, cfg, workers)
				if gerr == nil || werr == nil {
					freeAll(got)
					freeAll(want)
					t.Fatalf("workers %d: errors %v (reference %v), want %q", workers, gerr, werr, tc.want)
				}
				if !strings.Contains(gerr.Error(), tc.want) || gerr.Error() != werr.Error() {
					t.Errorf("workers %d: error\n  %v\nwant one saying %q, as the reference's\n  %v", workers, gerr, tc.want, werr)
				}
				noLeaks(t, gbe, before)
				noLeaks(t, wbe, before)
			}
		})
	}
}

// failingUpload is the CPU backend with its n-th Upload (from 1) failing.
type failingUpload struct {
	*cpu.Backend
	n, calls int
}

func (f *failingUpload) Upload(t *tensor.Tensor) (backend.Buffer, error) {
	if f.calls++; f.calls == f.n {
		return nil, errors.New("out of device memory")
	}
	return f.Backend.Upload(t)
}

// A failed upload is reported with the engine weight's name; what was uploaded before it is
// freed; the workers stop.
func TestLoadWeightsUploadError(t *testing.T) {
	dir, cfg := synthDir(t, oddPhi3Cfg, "BF16", nil)
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	// Phi-3's table, entry by entry and each over the layers: embed, layers.{0,1}.attn_norm,
	// layers.0.wq/wk/wv (qkv_proj split), ...: the 5th upload is layers.0.wk, the second part
	// of a split, whose first part is uploaded.
	for _, workers := range []int{1, 4} {
		before := runtime.NumGoroutine()
		be := &failingUpload{Backend: cpu.New(), n: 5}
		w, err := loadWeightsWith(be, cfg, ck, workers)
		if err == nil {
			freeAll(w)
		}
		if err == nil || err.Error() != "model: upload layers.0.wk: out of device memory" {
			t.Errorf("workers %d: error %v", workers, err)
		}
		noLeaks(t, be.Backend, before)
	}
}

// f32ToF16, roundF32 and roundBF16 give float16.Fromfloat32's bits: for every sign, exponent and top 7 mantissa bits
// with the low halves that decide rounding (ties, just above and below, sticky bits) and a few
// random ones; with TOUCHSTONE_EXHAUSTIVE=1, for all 2^32 float32s (about 15 CPU-seconds).
func TestFP16RoundingMatchesFromfloat32(t *testing.T) {
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x3000, 0x7fff, 0x8000, 0x8001, 0xefff, 0xf000, 0xf001, 0xffff}
	r := rand.New(rand.NewPCG(5, 5))
	for range 16 {
		lows = append(lows, r.Uint32()&0xffff)
	}
	// one checks u through all three conversions: f32ToF16, and roundF32 and roundBF16 on
	// one-element slices (roundBF16 only when u is a BF16, its low half zero).
	one := func(u uint32) error {
		want := float16.Fromfloat32(math.Float32frombits(u)).Bits()
		if got := f32ToF16(u); got != want {
			return fmt.Errorf("f32ToF16(%#08x) = %#04x, Fromfloat32 gives %#04x", u, got, want)
		}
		overflows := want&0x7fff == 0x7c00
		dst := []float16.Float16{0}
		if k := roundF32(dst, []float32{math.Float32frombits(u)}); (k == 0) != overflows || (!overflows && dst[0].Bits() != want) {
			return fmt.Errorf("roundF32(%#08x) = %#04x, first overflow %d; Fromfloat32 gives %#04x", u, dst[0].Bits(), k, want)
		}
		if u&0xffff == 0 {
			v := []uint16{uint16(u >> 16)}
			if k := roundBF16(v); (k == 0) != overflows || (!overflows && v[0] != want) {
				return fmt.Errorf("roundBF16(%#04x) = %#04x, first overflow %d; Fromfloat32 gives %#04x", u>>16, v[0], k, want)
			}
		}
		return nil
	}
	check := func(hi0, hi1 uint32, all bool) error {
		for hi := hi0; hi < hi1; hi++ {
			if all {
				for lo := uint32(0); lo < 1<<16; lo++ {
					if err := one(hi<<16 | lo); err != nil {
						return err
					}
				}
				continue
			}
			for _, lo := range lows {
				if err := one(hi<<16 | lo); err != nil {
					return err
				}
			}
		}
		return nil
	}
	all := os.Getenv("TOUCHSTONE_EXHAUSTIVE") == "1"
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			errs[w] = check(uint32(w)<<16/uint32(workers), uint32(w+1)<<16/uint32(workers), all)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// A panic while preparing a tensor (a bug: a table whose split does not fit its tensor) is
// raised on the caller's goroutine, as the sequential loader raised it, after what was
// uploaded is freed and the workers have stopped; it does not kill the process from a worker.
func TestLoadWeightsPanicReachesTheCaller(t *testing.T) {
	weightTables["test-bad-split"] = []weight{
		{HF: "a", Shape: func(*Config) []int { return []int{4, 2} }, Into: "a"},
		{HF: "b", Shape: func(*Config) []int { return []int{4, 2} }, Split: []string{"b0", "b1"},
			SplitRows: func(*Config) []int { return []int{3, 3} }},
	}
	t.Cleanup(func() { delete(weightTables, "test-bad-split") })
	dir := t.TempDir()
	writeSynth(t, dir, "{}", []synthTensor{{name: "a", dtype: "F16", shape: []int{4, 2}}, {name: "b", dtype: "F16", shape: []int{4, 2}}}, 1)
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, workers := range []int{1, 4} {
		before := runtime.NumGoroutine()
		be := cpu.New()
		p := func() (p any) {
			defer func() { p = recover() }()
			loadWeightsWith(be, &Config{Family: "test-bad-split", Layers: 1}, ck, workers)
			return nil
		}()
		if p == nil {
			t.Errorf("workers %d: no panic from a split past the tensor's end", workers)
		}
		noLeaks(t, be, before)
	}
}
