package cuda

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The tiled 4-bit weight through the library (the fake reports the real layout's size): the
// tile call, a buffer of the size the library states, and gemm_w4a16 in TS_W4_TILED (2) with the
// packed arguments NULL; a buffer of another size is refused before the library is called.
func TestW4A16TiledReachesTheLibrary(t *testing.T) {
	b := openFake(t)
	i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
	bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
	var _ backend.W4Tiler = b

	n := len(calls(t))
	tiled, err := b.W4A16Tile(i32(256, 9), i32(2, 9), bf(2, 72), backend.W4AWQ, 128)
	if err != nil {
		t.Fatal(err)
	}
	defer tiled.Free()
	// 2 tiles of 64 columns (72 padded): codes 64 * 256 / 2 bytes, scales 2 * 64 * 2, zeros 2 * 64
	if want := []int{2 * (64*256/2 + 2*64*2 + 2*64) / 4}; tiled.DType() != tensor.I32 || !slices.Equal(tiled.Shape(), want) {
		t.Errorf("tiled weight %s%v, want i32%v", tiled.DType(), tiled.Shape(), want)
	}
	log := strings.Join(callsSince(t, n), "\n")
	for _, want := range []string{"ts_w4a16_tiled_bytes n=72 k=256 group_size=128", "ts_w4a16_tile dtype=4 n=72 k=256 group_size=128 format=0 stream=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("calls\n%s\nwant %q", log, want)
		}
	}

	n = len(calls(t))
	if err := b.GemmW4A16Tiled(bf(3, 72), bf(3, 256), tiled, 72, 128); err != nil {
		t.Fatal(err)
	}
	if log := strings.Join(callsSince(t, n), "\n"); !strings.Contains(log, "ts_gemm_w4a16 dtype=4 m=3 n=72 k=256 group_size=128 format=2 g_idx=0 stream=0") {
		t.Errorf("calls\n%s\nwant the tiled gemm_w4a16", log)
	}

	short := i32(100)
	n = len(calls(t))
	err = b.GemmW4A16Tiled(bf(3, 72), bf(3, 256), short, 72, 128)
	if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "tiled") {
		t.Errorf("a tiled buffer of the wrong size: %v, want an argument error naming tiled", err)
	}
	for _, c := range callsSince(t, n) {
		if strings.HasPrefix(c, "ts_gemm_w4a16") {
			t.Errorf("the library was called with a tiled buffer of the wrong size: %s", c)
		}
	}
}
