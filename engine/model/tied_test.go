package model_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// appendTensor writes to dst the safetensors file src with one more tensor, name, after the
// others' data (contiguous offsets, header padded to 8 bytes): a copy of the tensor like's
// entry and bytes, or with zeros for bytes when zero is set.
func appendTensor(t *testing.T, src, dst, name, like string, zero bool) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw[:8])
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	data := raw[8+n:]
	var entry struct {
		DType       string `json:"dtype"`
		Shape       []int  `json:"shape"`
		DataOffsets []int  `json:"data_offsets"`
	}
	if err := json.Unmarshal(header[like], &entry); err != nil {
		t.Fatal(err)
	}
	values := slices.Clone(data[entry.DataOffsets[0]:entry.DataOffsets[1]])
	if zero {
		clear(values)
	}
	entry.DataOffsets = []int{len(data), len(data) + len(values)}
	if header[name], err = json.Marshal(entry); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	js = append(js, bytes.Repeat([]byte(" "), (8-len(js)%8)%8)...)
	var out bytes.Buffer
	_ = binary.Write(&out, binary.LittleEndian, uint64(len(js)))
	out.Write(js)
	out.Write(data)
	out.Write(values)
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tiedWithHead is qwen2-tiny (tie_word_embeddings: true) with lm_head.weight stored as well:
// a copy of the embedding, or zeros.
func tiedWithHead(t *testing.T, zero bool) string {
	src := filepath.Join("..", "..", "golden", "models", "qwen2-tiny")
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := model.LoadConfig(src); err != nil || !c.TiedHead {
		t.Fatalf("qwen2-tiny must be tied: %+v, %v", c, err)
	}
	appendTensor(t, filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors"), "lm_head.weight", "model.embed_tokens.weight", zero)
	return dir
}

// Some tied exports still store lm_head.weight, a copy of the embedding. The loader must not
// upload it: uploaded, it was a buffer that Close never freed, a device-memory leak per load.
func TestTiedCheckpointStoringLMHead(t *testing.T) {
	prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	logits := func(be *cpu.Backend, dir string) []float32 {
		m, err := model.Load(be, dir, 16)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		l, err := m.Prefill(prompt)
		if err != nil {
			t.Fatal(err)
		}
		return l.F32
	}
	be := cpu.New()
	got := logits(be, tiedWithHead(t, false))
	if n, b := be.LiveBuffers(), be.LiveBytes(); n != 0 || b != 0 {
		t.Errorf("after Close, %d buffers (%d bytes) are still allocated: the stored lm_head.weight leaked", n, b)
	}
	want := logits(cpu.New(), filepath.Join("..", "..", "golden", "models", "qwen2-tiny"))
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d = %g, without the stored lm_head.weight %g", i, got[i], want[i])
		}
	}
}

// A tied checkpoint whose stored lm_head.weight differs from the embedding is one transformers
// unties (it warns, and computes with lm_head.weight): the loader refuses it rather than tie
// what the reference does not, and frees what it had uploaded.
func TestTiedCheckpointWithAnotherLMHeadIsRefused(t *testing.T) {
	be := cpu.New()
	m, err := model.Load(be, tiedWithHead(t, true), 16)
	if err == nil {
		m.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "lm_head.weight is not a copy of model.embed_tokens.weight") {
		t.Errorf("error %v, want one saying lm_head.weight is not a copy of the embedding", err)
	}
	if n := be.LiveBuffers(); n != 0 {
		t.Errorf("%d buffers left allocated by the failed load", n)
	}
}

// Every committed model returns every buffer it allocated when closed, after passes that fill
// its activation pool and capture a prefill and a decode graph.
func TestCloseFreesEverything(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "phi3-tiny", "gpt2-tiny"} {
		be := cpu.New()
		m, err := model.Load(be, filepath.Join("..", "..", "golden", "models", name), 16)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // the second prefill of a length is captured, the third replayed
			if err := m.PrefillOnDevice([]int32{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
		}
		if m.PrefillReplays() != 2 {
			t.Errorf("%s: %d prefills replayed from a graph, want 2", name, m.PrefillReplays())
		}
		for tok := int32(4); tok < 8; tok++ {
			if err := m.DecodeOnDevice(tok); err != nil {
				t.Fatal(err)
			}
		}
		if m.GraphReplays() == 0 {
			t.Errorf("%s: no decode step was replayed from a graph", name)
		}
		m.Close()
		if n, b := be.LiveBuffers(), be.LiveBytes(); n != 0 || b != 0 {
			t.Errorf("%s: after Close, %d buffers (%d bytes) are still allocated", name, n, b)
		}
	}
}
