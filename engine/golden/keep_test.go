package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// Kept tensors are read once: the answer survives the file's removal, and each caller gets a
// copy of its own.
func TestKeepTensorsReadsOnceAndHandsOutCopies(t *testing.T) {
	src := filepath.Join("..", "..", "golden", "models", "gpt2-tiny")
	dir := t.TempDir()
	for _, name := range []string{ManifestName, "greedy_tokens.npy"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.KeepTensors()
	first, err := s.Tensor("greedy_tokens")
	if err != nil {
		t.Fatal(err)
	}
	want := first.I32[0]
	first.I32[0]++
	if err := os.Remove(filepath.Join(dir, "greedy_tokens.npy")); err != nil {
		t.Fatal(err)
	}
	again, err := s.Tensor("greedy_tokens")
	if err != nil || again.I32[0] != want {
		t.Fatalf("kept tensor: %v, first element %d, want %d", err, again.I32[0], want)
	}
	if _, err := s.Tensor("greedy_top5"); err == nil {
		t.Fatal("a tensor never read and now missing was answered")
	}
}
