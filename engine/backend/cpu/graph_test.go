package cpu

import (
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func mustUpload(t *testing.T, b *Backend, tt *tensor.Tensor) backend.Buffer {
	t.Helper()
	d, err := b.Upload(tt)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A replay reads what the buffers hold at launch; what the capture fixed (a view's offset)
// stays fixed. Row indices in a buffer follow the data, a host offset does not.
func TestGraphReplayReadsBuffersAtLaunch(t *testing.T) {
	b := New()
	dst := mustUpload(t, b, tensor.FromF32([]int{4, 1}, []float32{0, 0, 0, 0}))
	src := mustUpload(t, b, tensor.FromF32([]int{1, 1}, []float32{5}))
	rows := mustUpload(t, b, tensor.FromI32([]int{1}, []int32{0}))
	g, err := b.Capture(func(be backend.Backend) error {
		mem := be.(backend.Memory)
		if err := be.SetRows(dst, src, rows); err != nil {
			return err
		}
		at, err := mem.Rows(dst, 3, 1) // fixed at capture: always row 3
		if err != nil {
			return err
		}
		return mem.WriteRows(at, 0, src)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if got, _ := b.Download(dst); !slices.Equal(got.F32, []float32{0, 0, 0, 0}) {
		t.Fatalf("the capture ran its ops: %v", got.F32)
	}
	for i, row := range []int32{1, 2} {
		if err := b.Write(rows, tensor.FromI32([]int{1}, []int32{row})); err != nil {
			t.Fatal(err)
		}
		if err := b.Write(src, tensor.FromF32([]int{1}, []float32{float32(10 + i)})); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := b.Download(dst)
	if want := []float32{0, 10, 11, 11}; !slices.Equal(got.F32, want) {
		t.Errorf("dst %v, want %v", got.F32, want)
	}
}

func TestCaptureRefusesWhatAGraphCannotRecord(t *testing.T) {
	b := New()
	x := mustUpload(t, b, tensor.FromF32([]int{2}, []float32{1, 2}))
	for name, call := range map[string]func(be backend.Backend) error{
		"alloc": func(be backend.Backend) error { _, err := be.Alloc(tensor.F16, 2); return err },
		"upload": func(be backend.Backend) error {
			_, err := be.Upload(tensor.FromF32([]int{1}, []float32{1}))
			return err
		},
		"download": func(be backend.Backend) error { _, err := be.Download(x); return err },
		"write": func(be backend.Backend) error {
			return be.(backend.Memory).Write(x, tensor.FromF32([]int{2}, []float32{3, 4}))
		},
	} {
		g, err := b.Capture(call)
		if g != nil || err == nil || !strings.Contains(err.Error(), name+" during a capture") {
			t.Errorf("%s: got %v, %v", name, g, err)
		}
	}
	// A bad argument is refused when the op is issued, as on the GPU.
	_, err := b.Capture(func(be backend.Backend) error {
		return be.GELU(mustUpload(t, b, tensor.New(tensor.F16, 3)), mustUpload(t, b, tensor.New(tensor.F16, 4)))
	})
	if err == nil {
		t.Error("gelu of mismatched shapes was recorded")
	}
}
