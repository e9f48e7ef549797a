package model

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// QLinear is one quantized linear layer on the device: y = x · Wᵀ for a weight W [N, K]
// stored in its checkpoint's format (docs/quantization.md, "Quantized checkpoints").
type QLinear struct {
	Format QuantFormat
	N, K   int
	// Group is the 4-bit formats' group of inputs, and the FP8 formats' activation group
	// (128 for the block format, K per token).
	Group int
	// W is the f8e4m3 weight [N, K] or the packed 4-bit qweight; Scales the f32 FP8 scales
	// (weight_scale_inv [ceil(N/128), K/128], weight_scale [N, 1]) or the 4-bit scales in the
	// storage dtype; Zeros and GIdx the 4-bit formats' qzeros and g_idx (GPTQ).
	W, Scales, Zeros, GIdx backend.Buffer
	// Tiled is a 4-bit weight in the backend's own layout (backend.W4Tiler), written at Load
	// when the backend has one and the weight fits it (tileW4): a fused decode step's gemv reads
	// it; prefill and TOUCHSTONE_FUSED=0 run the packed kernels on W, so the model specs, which
	// check every tap both ways, judge both.
	Tiled backend.Buffer
}

// Forward computes out [T, N] = x [T, K] · Wᵀ: the FP8 formats quantise x at run time into
// f8e4m3 with a scale per group (QuantFP8), then GemmFP8; the 4-bit formats run GemmW4A16 on
// x as it is.
func (q *QLinear) Forward(p *pass, out, x backend.Buffer) {
	switch q.Format {
	case QuantFP8Block, QuantFP8Channel:
		q.forwardFP8(p, out, p.quantize(x, q.Group))
	case QuantAWQ, QuantGPTQ:
		if tiler, ok := p.be.(backend.W4Tiler); ok && q.Tiled != nil && p.fused() {
			p.do(tiler.GemmW4A16Tiled(out, x, q.Tiled, q.N, q.Group))
			return
		}
		if q.Format == QuantAWQ {
			p.do(p.be.GemmW4A16(out, x, q.W, q.Zeros, q.Scales, nil, backend.W4AWQ, q.Group))
			return
		}
		p.do(p.be.GemmW4A16(out, x, q.W, q.Zeros, q.Scales, q.GIdx, backend.W4GPTQ, q.Group))
	default:
		p.do(fmt.Errorf("model: quantized linear of format %s", q.Format))
	}
}

// fp8Input is an activation quantised once for the FP8 projections that read it (q, k and v;
// gate and up): its f8e4m3 codes [T, K] and f32 scales [T, K/group].
type fp8Input struct {
	q, s  backend.Buffer
	group int
}

// fp8Group is the activation group shared by the FP8 projections qs (all non-nil, all of one
// format), or 0 when they are not all such: then each runs on its own.
func fp8Group(qs ...*QLinear) int {
	for _, q := range qs {
		if q == nil || (q.Format != QuantFP8Block && q.Format != QuantFP8Channel) || q.Format != qs[0].Format || q.Group != qs[0].Group {
			return 0
		}
	}
	return qs[0].Group
}

// quantize quantises x [T, K] in groups of group for FP8 projections.
func (p *pass) quantize(x backend.Buffer, group int) *fp8Input {
	T, K := x.Shape()[0], x.Shape()[1]
	in := &fp8Input{q: p.allocT(tensor.F8E4M3, T, K), s: p.allocT(tensor.F32, T, K/group), group: group}
	p.do(p.be.QuantFP8(in.q, in.s, x, nil, group))
	return in
}

// fuseQuant reports whether a decode step quantises FP8 inputs inside the op before them
// (rmsnorm_quant_fp8, swiglu_quant_fp8). Not in an isolated replay: there each FP8 projection
// must read the reference's own input tap, quantised, to be held to its floor (compareTap).
func (p *pass) fuseQuant() bool { return p.fused() && p.m.inject == nil }

// normQuant is normGemm's counterpart for FP8 projections: in's add and RMSNorm with the
// quantisation of the result in one rmsnorm_quant_fp8 (a fused decode), else the add and norm,
// then quant_fp8. It returns the stream sum and the quantised norm; a requested norm tap is
// computed beside the fused op, from the sum it stored, by the norm it equals.
func (p *pass) normQuant(in pending, group int) (backend.Buffer, *fp8Input) {
	if !p.fuseQuant() || in.normed != nil || in.n.B != nil {
		sum, normed := p.settle(in)
		return sum, p.quantize(normed, group)
	}
	c := &p.m.Cfg
	sum := in.x
	var resid, sumOut backend.Buffer
	if in.y != nil {
		sum = p.alloc(p.T, c.Hidden)
		resid, sumOut = in.y, sum
	}
	q := &fp8Input{q: p.allocT(tensor.F8E4M3, p.T, c.Hidden), s: p.allocT(tensor.F32, p.T, c.Hidden/group), group: group}
	p.do(p.be.RMSNormQuantFP8(q.q, q.s, sumOut, in.x, resid, in.n.W, nil, group, c.NormEps))
	if in.y != nil {
		p.tap(in.sumTap, sum)
	}
	if p.m.want[in.normTap] {
		normed := p.alloc(p.T, c.Hidden)
		in.n.Forward(p, normed, sum)
		p.tap(in.normTap, normed)
	}
	return sum, q
}

// forwardFP8 is Forward for an FP8 projection on an input already quantised for it.
func (q *QLinear) forwardFP8(p *pass, out backend.Buffer, in *fp8Input) {
	p.do(p.be.GemmFP8(out, in.q, in.s, q.W, q.Scales, q.Format == QuantFP8Block))
}

// linear computes out = x · wᵀ + bias with the dense weight w, or with q when the layer is
// quantized (q non-nil; its bias added to the rounded product: addBias).
func (p *pass) linear(out, x, w backend.Buffer, q *QLinear, bias backend.Buffer) {
	if q != nil {
		q.Forward(p, out, x)
		if bias != nil {
			p.addBias(out, bias)
		}
		return
	}
	p.do(p.be.Gemm(out, x, w, bias))
}

// addBias adds bias [N] to every row of a quantized projection's output out [T, N], rounded
// once more: out = T(T(x · Wᵀ) + bias), as transformers' FP8Linear (output.add_(bias)) and
// AutoAWQ's GEMM add it. One row is residual_add with the bias itself; more rows broadcast it
// first with a K = 1 gemm (ones [T, 1] · zeros [N, 1]ᵀ + bias: the bias exactly), so the
// quantized ops keep their ABI and the add is two certified ops.
func (p *pass) addBias(out, bias backend.Buffer) {
	T, N := out.Shape()[0], out.Shape()[1]
	if T == 1 {
		p.do(p.be.ResidualAdd(out, out, p.view(bias, 1, N)))
		return
	}
	ones := p.m.w[biasOnes]
	if T > ones.Shape()[0] {
		// A batch's prefill may be longer than the model's own cache (NewBatch's cacheLen):
		// its rows one at a time, as a decode row is added.
		row := p.view(bias, 1, N)
		for r := range T {
			o := p.rows(out, r, 1)
			p.do(p.be.ResidualAdd(o, o, row))
		}
		return
	}
	rows := p.alloc(T, N)
	p.do(p.be.Gemm(rows, p.rows(ones, 0, T), p.rows(p.m.w[biasZeros], 0, N), bias))
	p.do(p.be.ResidualAdd(out, out, rows))
}

// The engine weights addBias broadcasts with: ones [MaxLen, 1] and zeros [widest biased
// projection, 1] in the storage dtype, uploaded by Load when a quantized projection has a bias.
const (
	biasOnes  = "quant_bias.ones"
	biasZeros = "quant_bias.zeros"
)

// uploadBiasBroadcast uploads addBias's ones and zeros into w when a quantized projection of
// the model has a bias.
func uploadBiasBroadcast(be backend.Backend, m *Model) error {
	widest := 0
	for _, l := range m.Layers {
		a, f := l.Attn, l.MLP
		for _, pb := range []struct {
			q *QLinear
			b backend.Buffer
		}{{a.Qq, a.Bq}, {a.Qk, a.Bk}, {a.Qv, a.Bv}, {a.Qo, a.Bo}, {f.QUp, f.UpB}, {f.QDown, f.DownB}} {
			if pb.q != nil && pb.b != nil {
				widest = max(widest, pb.q.N)
			}
		}
		if a.qkvQ != nil && a.qkvB != nil {
			widest = max(widest, a.qkvQ.all.N)
		}
	}
	if widest == 0 {
		return nil
	}
	dt := m.Cfg.StorageDType()
	ones, zeros := tensor.New(dt, m.MaxLen, 1), tensor.New(dt, widest, 1)
	for i := range m.MaxLen {
		switch dt {
		case tensor.BF16:
			ones.BF16[i] = tensor.BF16FromFloat32(1)
		default:
			ones.F16[i] = float16.Fromfloat32(1)
		}
	}
	for name, t := range map[string]*tensor.Tensor{biasOnes: ones, biasZeros: zeros} {
		b, err := be.Upload(t)
		if err != nil {
			return fmt.Errorf("model: upload %s: %w", name, err)
		}
		m.w[name] = b
	}
	return nil
}

// quantSuffix is the tensor that tells a module stored in a format from one the config keeps
// dense (a skipped module, or a weight whose shape the quantiser could not tile).
var quantSuffix = map[QuantFormat]string{
	QuantFP8Block:   ".weight_scale_inv",
	QuantFP8Channel: ".weight_scale",
	QuantAWQ:        ".qweight",
	QuantGPTQ:       ".qweight",
}

// storedQuantized reports whether the checkpoint stores the linear whose weight is hfWeight
// ("model.layers.0.self_attn.q_proj.weight") in c's quantized format.
func storedQuantized(c *Config, ck *safetensors.Checkpoint, hfWeight string) bool {
	if c.Quant == nil {
		return false
	}
	_, ok := ck.Info(strings.TrimSuffix(hfWeight, ".weight") + quantSuffix[c.Quant.Format])
	return ok
}

// loadQuantLinears reads and uploads every linear of c's table that the checkpoint stores
// quantized, into m.q by engine name (layers.0.wq) with its buffers in w (so that Close frees
// them). Each tensor's dtype and shape are checked against the layer's [N, K] first.
func loadQuantLinears(be backend.Backend, c *Config, ck *safetensors.Checkpoint, w map[string]backend.Buffer) (map[string]*QLinear, error) {
	out := map[string]*QLinear{}
	if c.Quant == nil {
		return out, nil
	}
	if storedQuantized(c, ck, "lm_head.weight") {
		return nil, fmt.Errorf("model: lm_head is stored quantized (%s): a quantized LM head is not implemented (the configs keep it dense: modules_to_not_convert, ignore)", "lm_head"+quantSuffix[c.Quant.Format])
	}
	for _, e := range weightTables[c.Family] {
		if !e.Linear {
			continue
		}
		for layer := 0; layer < c.Layers; layer++ {
			sub := func(s string) string { return strings.ReplaceAll(s, "{i}", strconv.Itoa(layer)) }
			hf := sub(e.HF)
			if !storedQuantized(c, ck, hf) {
				continue
			}
			module := strings.TrimSuffix(hf, ".weight")
			shape := e.Shape(c)
			t, err := readQuantLinear(c, ck, module, shape[0], shape[1])
			if err != nil {
				return nil, err
			}
			name := sub(e.Into)
			q := &QLinear{Format: c.Quant.Format, N: shape[0], K: shape[1], Group: t.group}
			for _, part := range []struct {
				suffix string
				t      *tensor.Tensor
				dst    *backend.Buffer
			}{{"w", t.w, &q.W}, {"scales", t.scales, &q.Scales}, {"zeros", t.zeros, &q.Zeros}, {"g_idx", t.gIdx, &q.GIdx}} {
				if part.t == nil {
					continue
				}
				b, err := be.Upload(part.t)
				if err != nil {
					return nil, fmt.Errorf("model: upload %s: %w", module, err)
				}
				w[name+"."+part.suffix] = b
				*part.dst = b
			}
			if err := tileW4(be, q, t, w, name); err != nil {
				return nil, fmt.Errorf("model: %s: %w", module, err)
			}
			out[name] = q
		}
	}
	return out, nil
}

// tileW4 writes q's 4-bit weight into the backend's own layout (q.Tiled, kept in w as
// name.tiled so that Close frees it) when the backend has one and the weight fits it: K and the
// group multiples of 32 and, for GPTQ, the groups in order (no act-order). Other weights,
// backends without a layout, and TOUCHSTONE_W4_TILED=0 at Load keep the packed kernels.
func tileW4(be backend.Backend, q *QLinear, t *quantTensors, w map[string]backend.Buffer, name string) error {
	tiler, ok := be.(backend.W4Tiler)
	if v := os.Getenv("TOUCHSTONE_W4_TILED"); v == "0" || v == "false" {
		return nil
	}
	if !ok || (q.Format != QuantAWQ && q.Format != QuantGPTQ) || q.K%32 != 0 || q.Group%32 != 0 {
		return nil
	}
	format := backend.W4AWQ
	if q.Format == QuantGPTQ {
		format = backend.W4GPTQ
		if !backend.W4GroupsInOrder(t.gIdx.I32, q.Group) {
			return nil
		}
	}
	tiled, err := tiler.W4A16Tile(q.W, q.Zeros, q.Scales, format, q.Group)
	if err != nil {
		return err
	}
	w[name+".tiled"] = tiled
	q.Tiled = tiled
	return nil
}

// quantTensors is one quantized linear read from the checkpoint, in the dtypes the ops take.
type quantTensors struct {
	w, scales, zeros, gIdx *tensor.Tensor
	group                  int
}

// readQuantLinear reads module's tensors in c's format for a weight [N, K].
func readQuantLinear(c *Config, ck *safetensors.Checkpoint, module string, N, K int) (*quantTensors, error) {
	get := func(suffix, dtype string, shape []int, what string) (*tensor.Tensor, error) {
		name := module + suffix
		info, ok := ck.Info(name)
		if !ok {
			return nil, fmt.Errorf("model: checkpoint has no tensor %s (want %s %s: %s)", name, dtype, tensor.ShapeString(shape), what)
		}
		if !slices.Contains(strings.Fields(dtype), info.DType) {
			return nil, fmt.Errorf("model: tensor %s has dtype %s, want %s (%s)", name, info.DType, dtype, what)
		}
		if !tensor.SameShape(info.Shape, shape) {
			return nil, fmt.Errorf("model: tensor %s has shape %s, want %s (%s)", name, tensor.ShapeString(info.Shape), tensor.ShapeString(shape), what)
		}
		return ck.Tensor(name)
	}
	q := &quantTensors{}
	var err error
	switch f := c.Quant.Format; f {
	case QuantFP8Block, QuantFP8Channel:
		if f == QuantFP8Block && K%128 != 0 {
			return nil, fmt.Errorf("model: %s: K = %d is not a multiple of the 128-column block: an FP8 block weight of that width is not implemented", module, K)
		}
		if _, ok := ck.Info(module + ".input_scale"); ok {
			return nil, fmt.Errorf("model: %s: a static activation scale (%s.input_scale) is not implemented (dynamic activations only)", module, module)
		}
		if q.w, err = get(".weight", "F8_E4M3", []int{N, K}, "the FP8 weight"); err != nil {
			return nil, err
		}
		if f == QuantFP8Block {
			q.group = 128
			q.scales, err = get(".weight_scale_inv", "F32 BF16", []int{(N + 127) / 128, K / 128}, "one scale per 128x128 block")
		} else {
			q.group = K
			q.scales, err = get(".weight_scale", "F32 BF16 F16", []int{N, 1}, "one scale per output channel")
		}
		if err != nil {
			return nil, err
		}
		if q.scales, err = toF32Scales(q.scales, module); err != nil {
			return nil, err
		}
	case QuantAWQ, QuantGPTQ:
		G := c.Quant.GroupSize
		if G == -1 {
			G = K
		}
		if K%G != 0 || N%8 != 0 || K%8 != 0 {
			return nil, fmt.Errorf("model: %s: [N, K] = [%d, %d] with group_size %d: the 4-bit packings need N and K multiples of 8 and K a multiple of the group", module, N, K, G)
		}
		q.group = G
		if f == QuantAWQ {
			q.w, err = get(".qweight", "I32", []int{K, N / 8}, "AWQ: 8 codes of one input along the outputs per word")
		} else {
			q.w, err = get(".qweight", "I32", []int{K / 8, N}, "GPTQ: 8 codes of one output along the inputs per word")
		}
		if err != nil {
			return nil, err
		}
		if q.zeros, err = get(".qzeros", "I32", []int{K / G, N / 8}, "one packed zero point per group and output"); err != nil {
			return nil, err
		}
		if q.scales, err = get(".scales", "F16 BF16 F32", []int{K / G, N}, "one scale per group and output"); err != nil {
			return nil, err
		}
		if q.scales, err = toStorage(q.scales, c.StorageDType(), module+".scales"); err != nil {
			return nil, err
		}
		if f == QuantGPTQ {
			if q.gIdx, err = get(".g_idx", "I32", []int{K}, "the group of each input"); err != nil {
				return nil, err
			}
			for k, g := range q.gIdx.I32 {
				if g < 0 || int(g) >= K/G {
					return nil, fmt.Errorf("model: tensor %s.g_idx element %d = %d: outside the groups 0..%d", module, k, g, K/G-1)
				}
			}
		}
	}
	return q, nil
}

// toF32Scales converts FP8 scales (F32, or BF16 and F16 widened exactly) to f32 and checks that
// each is positive and finite: a zero, negative or NaN scale is a corrupt checkpoint.
func toF32Scales(t *tensor.Tensor, module string) (*tensor.Tensor, error) {
	if t.DType == tensor.F16 {
		o := tensor.New(tensor.F32, t.Shape...)
		for k, v := range t.F16 {
			o.F32[k] = v.Float32()
		}
		t = o
	}
	for k, v := range t.F32 {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("model: %s: scale element %d = %g: FP8 scales must be positive and finite", module, k, v)
		}
	}
	return t, nil
}

// toStorage converts 4-bit scales to the storage dtype dt (F16 or BF16), as the 16-bit weights
// are (readF16, readBF16: F32 and BF16 rounded to fp16, an overflow an error).
func toStorage(t *tensor.Tensor, dt tensor.DType, name string) (*tensor.Tensor, error) {
	if dt == tensor.BF16 {
		o := tensor.New(tensor.BF16, t.Shape...)
		for k, v := range t.Float32() {
			o.BF16[k] = tensor.BF16FromFloat32(v)
		}
		return o, nil
	}
	return toF16(t, name)
}

// quantizedTap reports whether a tap (a canonical golden name) is the output of a quantized
// projection: q, k, v, attn_out, ffn_gate, ffn_up or ffn_out of a layer whose linear for it is
// a QLinear.
func (m *Model) quantizedTap(name string) bool {
	_, layer, kind, _ := compare.TapPlace(name)
	return m.tapLinear(layer, kind) != nil
}

// projections names the tap kind each projection computes, as TapOp describes it.
var projections = map[string]string{"q": "q projection", "k": "k projection", "v": "v projection", "attn_out": "output projection",
	"ffn_gate": "gate projection", "ffn_up": "up projection", "ffn_out": "down projection"}

// tapLinear is the quantized linear whose output is the tap kind of a layer, or nil (a 16-bit
// projection, or a tap no projection computes).
func (m *Model) tapLinear(layer int, kind string) *QLinear {
	if layer < 0 || layer >= len(m.Layers) || projections[kind] == "" {
		return nil
	}
	a, f := m.Layers[layer].Attn, m.Layers[layer].MLP
	return map[string]*QLinear{"q": a.Qq, "k": a.Qk, "v": a.Qv, "attn_out": a.Qo, "ffn_gate": f.QGate, "ffn_up": f.QUp, "ffn_out": f.QDown}[kind]
}

// opName names the ops that compute the tap kind of this projection for TapOp: a fused decode
// quantises the norm (q, k, v, gate, up) or the activation (the down projection) inside the op
// before (rmsnorm_quant_fp8, swiglu_quant_fp8).
func (q *QLinear) opName(kind string, fused bool) string {
	what := "the " + projections[kind]
	switch q.Format {
	case QuantFP8Block, QuantFP8Channel:
		what += map[QuantFormat]string{QuantFP8Block: ", fine-grained FP8 blocks", QuantFP8Channel: ", FP8 per channel"}[q.Format]
		quant := "quant_fp8"
		if fused && kind != "attn_out" {
			quant = "rmsnorm_quant_fp8"
			if kind == "ffn_out" {
				quant = "swiglu_quant_fp8"
			}
		}
		return quant + ", then gemm_fp8 (" + what + ")"
	}
	return "gemm_w4a16 (" + what + ", " + q.Format.String() + ")"
}
