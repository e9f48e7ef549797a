package backend

import "github.com/touchstone-llm/touchstone/engine/tensor"

// W4Tiler is a backend with a layout of its own for 4-bit weights: the packed weight rewritten
// once, at load time, into the order its decode gemv reads (as serving engines repack AWQ and
// GPTQ checkpoints for their kernels), which the gemv then reads with no byte shuffling. The
// rewrite copies every code, scale and zero point, so GemmW4A16Tiled computes GemmW4A16's
// contract bit for bit; the tiled buffer is opaque, read only by GemmW4A16Tiled. The kernel
// suite runs every gemm_w4a16 case it can tile both ways against the same golden files.
type W4Tiler interface {
	// W4A16Tile returns qweight, qzeros and scales, as GemmW4A16 takes them for format, in a
	// new i32 buffer (the layout's words) the caller frees. GPTQ only with its groups in order (g(k) = k / groupSize,
	// W4GroupsInOrder: act-order is not tiled). A shape the layout cannot hold is an error
	// wrapping ErrUnsupported.
	W4A16Tile(qweight, qzeros, scales Buffer, format W4Format, groupSize int) (Buffer, error)
	// GemmW4A16Tiled is GemmW4A16 over a tiled weight of N outputs and K inputs: x f16 or bf16
	// [M, K] (the type the weight was tiled with), out [M, N] in x's type.
	GemmW4A16Tiled(out, x, tiled Buffer, n, groupSize int) error
}

// W4GroupsInOrder reports whether a GPTQ g_idx is the one without act-order, g(k) = k /
// groupSize: the only one a W4Tiler tiles.
func W4GroupsInOrder(gIdx []int32, groupSize int) bool {
	if groupSize <= 0 {
		return false
	}
	for k, g := range gIdx {
		if int(g) != k/groupSize {
			return false
		}
	}
	return true
}

// W4PackedDims returns N and K of a packed 4-bit weight from its qweight and scales shapes
// (AWQ qweight [K, N/8], GPTQ [K/8, N]; scales [K/G, N]), validating what W4A16Tile reads.
func W4PackedDims(op string, qweight, qzeros, scales Buffer, format W4Format, groupSize int) (n, k int, err error) {
	c := Validate(op)
	c.That(format == W4AWQ || format == W4GPTQ, "format", format.String(), "want awq or gptq")
	c.DType("qweight", qweight, tensor.I32)
	c.Rank("qweight", qweight, 2)
	c.DType("qzeros", qzeros, tensor.I32)
	c.Rank("qzeros", qzeros, 2)
	c.Storage("scales", scales)
	c.Rank("scales", scales, 2)
	c.That(groupSize > 0, "group_size", fmtI(groupSize), "must be positive")
	if c.Err() != nil {
		return 0, 0, c.Err()
	}
	n = scales.Shape()[1]
	if format == W4AWQ {
		k = qweight.Shape()[0]
		c.Shape("qweight", qweight, []int{k, n / 8}, "[K, N/8] (AWQ), N the columns of scales")
	} else {
		k = qweight.Shape()[0] * 8
		c.Shape("qweight", qweight, []int{k / 8, n}, "[K/8, N] (GPTQ), N the columns of scales")
	}
	c.That(n%8 == 0, "scales", describe(scales), "N = %d must be a multiple of 8 (eight 4-bit codes a word)", n)
	c.That(k%groupSize == 0, "group_size", fmtI(groupSize), "must divide K = %d", k)
	if c.Err() != nil {
		return 0, 0, c.Err()
	}
	c.Shape("qzeros", qzeros, []int{k / groupSize, n / 8}, "[K/G, N/8]: one packed zero point per group and column")
	c.Shape("scales", scales, []int{k / groupSize, n}, "[K/G, N]: one scale per group and column")
	return n, k, c.Err()
}

// CheckGemmW4A16Tiled validates GemmW4A16Tiled's activations and output (the tiled buffer's
// size is the backend's to check): x f16 or bf16 [M, K], out [M, n] in x's type, tiled i32.
func CheckGemmW4A16Tiled(out, x, tiled Buffer, n, groupSize int) error {
	c := Validate("gemm_w4a16")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.DType("tiled", tiled, tensor.I32)
	c.Rank("tiled", tiled, 1)
	c.That(n > 0 && n%8 == 0, "n", fmtI(n), "must be a positive multiple of 8")
	if c.Err() != nil {
		return c.Err()
	}
	k := x.Shape()[1]
	c.That(groupSize > 0 && k%groupSize == 0, "group_size", fmtI(groupSize), "must be positive and divide K = %d", k)
	c.Same("out", out)
	c.Shape("out", out, []int{x.Shape()[0], n}, "[rows of x, N]")
	return c.Err()
}
