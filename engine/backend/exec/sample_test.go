package exec_test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/exec"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// sampleRows draws from logits [rows, vocab] through b.
func sampleRows(t *testing.T, b backend.Backend, logits backend.Buffer, cfg backend.SampleConfig) []int32 {
	t.Helper()
	tokens, err := b.Alloc(tensor.I32, logits.Shape()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer tokens.Free()
	if err := b.Sample(tokens, logits, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return got.I32
}

// flatRows is rows copies of a flat row of vocab logits: every token equally likely.
func flatRows(rows, vocab int) *tensor.Tensor { return tensor.New(tensor.F32, rows, vocab) }

// The protocol's sample op: greedy is the maximum, a draw is keyed by (seed, step, row), and
// bad requests are refused here, before the adapter sees them, as every sampler refuses them.
func TestSampleThroughTheAdapter(t *testing.T) {
	b := open(t, "", 60*time.Second)
	if !b.Supports("sample") || !b.SamplesWithOwnRNG() {
		t.Fatal("the numpy adapter lists sample, drawing its own random numbers")
	}
	peaked, err := b.Upload(tensor.FromF32([]int{2, 4}, []float32{0, 3, 1, 2, 5, 1, float32(math.Inf(-1)), 4}))
	if err != nil {
		t.Fatal(err)
	}
	if got := sampleRows(t, b, peaked, backend.SampleConfig{TopP: 1}); !slices.Equal(got, []int32{1, 0}) {
		t.Errorf("greedy: %v, want [1 0]", got)
	}
	flat, err := b.Upload(flatRows(64, 1000))
	if err != nil {
		t.Fatal(err)
	}
	cfg := backend.SampleConfig{Temperature: 1, TopP: 1, Seed: 7, Step: 3}
	first := sampleRows(t, b, flat, cfg)
	if again := sampleRows(t, b, flat, cfg); !slices.Equal(first, again) {
		t.Errorf("one request twice: %v then %v", first, again)
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(first)))); distinct < 32 {
		t.Errorf("64 rows of a flat 1000-token row drew %d distinct tokens: the rows share their random numbers", distinct)
	}
	cfg.Step++
	if next := sampleRows(t, b, flat, cfg); slices.Equal(first, next) {
		t.Errorf("the next step drew the same %v", next)
	}

	tokens, err := b.Alloc(tensor.I32, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg    backend.SampleConfig
		logits []float32
		want   []string
	}{
		{backend.SampleConfig{Temperature: -1, TopP: 1}, nil, []string{"sample", "temperature", "-1"}},
		{backend.SampleConfig{Temperature: 1, TopP: 0}, nil, []string{"sample", "top_p", "0"}},
		{backend.SampleConfig{Temperature: 1, TopP: 1}, []float32{0, 1, 2, 3, 0, float32(math.NaN()), 1, 2}, []string{"sample", "logits[1][1]", "NaN"}},
	} {
		logits := peaked
		if c.logits != nil {
			if logits, err = b.Upload(tensor.FromF32([]int{2, 4}, c.logits)); err != nil {
				t.Fatal(err)
			}
		}
		err := b.Sample(tokens, logits, c.cfg)
		if err == nil || !containsAll(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %v", c.cfg, err, c.want)
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// held lists the input files kept in the exchange directory under root.
func held(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "touchstone-exec-*", "held-*.npy"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// An input unchanged between calls is written once; one the adapter touched is written again,
// so it cannot carry a change into the next call; a freed buffer's file goes.
func TestAnInputIsWrittenOnceWhileUnchanged(t *testing.T) {
	root := t.TempDir()
	b, err := openIn(t, root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	row := []float32{0, 3, 1, 2}
	logits, err := b.Upload(tensor.FromF32([]int{1, 4}, row))
	if err != nil {
		t.Fatal(err)
	}
	greedy := backend.SampleConfig{TopP: 1}
	sampleRows(t, b, logits, greedy)
	files := held(t, root)
	if len(files) != 1 {
		t.Fatalf("held files after one call: %v, want one", files)
	}
	before, _ := os.Stat(files[0])
	sampleRows(t, b, logits, greedy)
	if again := held(t, root); !slices.Equal(again, files) {
		t.Fatalf("held files after a second call: %v, want %v", again, files)
	}
	if after, _ := os.Stat(files[0]); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the unchanged input was written again")
	}
	// What an adapter writing into its input would leave: the next call must not see it.
	time.Sleep(10 * time.Millisecond)
	if err := tensor.WriteNPY(files[0], tensor.FromF32([]int{1, 4}, []float32{9, 0, 0, 0})); err != nil {
		t.Fatal(err)
	}
	if got := sampleRows(t, b, logits, greedy); !slices.Equal(got, []int32{1}) {
		t.Errorf("after the input file was overwritten: token %v, want 1 (the buffer's argmax)", got)
	}
	logits.Free()
	if left := held(t, root); len(left) != 0 {
		t.Errorf("a freed buffer's file is left: %v", left)
	}
}

func openIn(t *testing.T, dir string) (*exec.Backend, error) {
	return exec.Open(adapter(t, ""), exec.Config{Timeout: 60 * time.Second, Dir: dir})
}
