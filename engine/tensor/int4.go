package tensor

import "fmt"

// The 4-bit weight packings of docs/quantization.md ("4-bit weights"): a Linear's quantised
// weight stored transposed, codes q [K, N] (K inputs, N outputs) in 0..15, eight to an int32
// word as safetensors stores them (the codes are the word's bits, read unsigned; code j in bits
// 4j..4j+3).
//
//   - AWQ (AutoAWQ's GEMM version): qweight [K, N/8], the eight codes of a word are one row's
//     columns 8c..8c+7, nibble j holding column 8c + AWQPackOrder[j]; qzeros [K/G, N/8] the
//     zero points, packed the same way.
//   - GPTQ (checkpoint_format "gptq"): qweight [K/8, N], a word's codes are one column's rows
//     8r..8r+7, nibble j holding row 8r + j; qzeros [groups, N/8] packed along n in plain order,
//     each storing z - 1.

// AWQPackOrder is the column (within its word's eight) each nibble of an AWQ word holds.
var AWQPackOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

func int4Shape(what string, words []int32, rows, cols int, packedCols bool) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("%s: shape [%d, %d]: must be positive", what, rows, cols)
	}
	packed := rows
	if packedCols {
		packed = cols
	}
	if packed%8 != 0 {
		return fmt.Errorf("%s: shape [%d, %d]: the packed dimension %d is not a multiple of 8", what, rows, cols, packed)
	}
	if len(words) != rows*cols/8 {
		return fmt.Errorf("%s: %d words for codes [%d, %d]: want %d", what, len(words), rows, cols, rows*cols/8)
	}
	return nil
}

func nibble(w int32, j int) uint8 { return uint8(uint32(w)>>(4*j)) & 0xF }

// UnpackAWQ returns the codes [rows, cols] of AWQ words [rows, cols/8] (qweight or qzeros).
func UnpackAWQ(words []int32, rows, cols int) ([]uint8, error) {
	if err := int4Shape("awq", words, rows, cols, true); err != nil {
		return nil, err
	}
	q := make([]uint8, rows*cols)
	for i, w := range words {
		r, c := i/(cols/8), i%(cols/8)
		for j := 0; j < 8; j++ {
			q[r*cols+8*c+AWQPackOrder[j]] = nibble(w, j)
		}
	}
	return q, nil
}

// PackAWQ packs codes [rows, cols] (each 0..15) into AWQ words [rows, cols/8].
func PackAWQ(q []uint8, rows, cols int) ([]int32, error) {
	if len(q) != rows*cols || rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("awq: %d codes for [%d, %d]", len(q), rows, cols)
	}
	words := make([]int32, rows*cols/8)
	if err := int4Shape("awq", words, rows, cols, true); err != nil {
		return nil, err
	}
	for i := range words {
		r, c := i/(cols/8), i%(cols/8)
		var w uint32
		for j := 0; j < 8; j++ {
			v := q[r*cols+8*c+AWQPackOrder[j]]
			if v > 15 {
				return nil, fmt.Errorf("awq: code %d at [%d, %d] is not 4-bit", v, r, 8*c+AWQPackOrder[j])
			}
			w |= uint32(v) << (4 * j)
		}
		words[i] = int32(w)
	}
	return words, nil
}

// UnpackGPTQWeight returns the codes [k, n] of a GPTQ qweight [k/8, n].
func UnpackGPTQWeight(words []int32, k, n int) ([]uint8, error) {
	if err := int4Shape("gptq qweight", words, k, n, false); err != nil {
		return nil, err
	}
	q := make([]uint8, k*n)
	for i, w := range words {
		r, c := i/n, i%n
		for j := 0; j < 8; j++ {
			q[(8*r+j)*n+c] = nibble(w, j)
		}
	}
	return q, nil
}

// PackGPTQWeight packs codes [k, n] (each 0..15) into a GPTQ qweight [k/8, n].
func PackGPTQWeight(q []uint8, k, n int) ([]int32, error) {
	if len(q) != k*n || k <= 0 || n <= 0 {
		return nil, fmt.Errorf("gptq qweight: %d codes for [%d, %d]", len(q), k, n)
	}
	words := make([]int32, k*n/8)
	if err := int4Shape("gptq qweight", words, k, n, false); err != nil {
		return nil, err
	}
	for i := range words {
		r, c := i/n, i%n
		var w uint32
		for j := 0; j < 8; j++ {
			v := q[(8*r+j)*n+c]
			if v > 15 {
				return nil, fmt.Errorf("gptq qweight: code %d at [%d, %d] is not 4-bit", v, 8*r+j, c)
			}
			w |= uint32(v) << (4 * j)
		}
		words[i] = int32(w)
	}
	return words, nil
}

// UnpackGPTQZeros returns the zero points [groups, n] of a GPTQ qzeros [groups, n/8]: each
// stored nibble plus one (1..16).
func UnpackGPTQZeros(words []int32, groups, n int) ([]uint8, error) {
	if err := int4Shape("gptq qzeros", words, groups, n, true); err != nil {
		return nil, err
	}
	z := make([]uint8, groups*n)
	for i, w := range words {
		for j := 0; j < 8; j++ {
			z[8*i+j] = nibble(w, j) + 1
		}
	}
	return z, nil
}

// DequantInt4 returns W.T [k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n] in float32 (the exact
// product rounded once; the caller rounds to its storage type), g(k) = groups[k].
func DequantInt4(q, z []uint8, s []float32, groups []int32, k, n int) ([]float32, error) {
	if len(q) != k*n || len(groups) != k || len(z) != len(s) || len(z)%n != 0 {
		return nil, fmt.Errorf("int4: codes %d, zero points %d, scales %d, groups %d for [%d, %d]", len(q), len(z), len(s), len(groups), k, n)
	}
	ng := int32(len(z) / n)
	w := make([]float32, k*n)
	for r := 0; r < k; r++ {
		g := groups[r]
		if g < 0 || g >= ng {
			return nil, fmt.Errorf("int4: input %d names group %d of %d", r, g, ng)
		}
		for c := 0; c < n; c++ {
			d := int(q[r*n+c]) - int(z[int(g)*n+c])
			w[r*n+c] = float32(float64(d) * float64(s[int(g)*n+c]))
		}
	}
	return w, nil
}
