package safetensors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Checkpoint is the set of tensors of a model directory: model.safetensors, or the shards
// named by model.safetensors.index.json.
type Checkpoint struct {
	Dir    string
	files  []*File
	byName map[string]*File
}

// OpenDir opens a model directory's weights.
func OpenDir(dir string) (*Checkpoint, error) {
	single := filepath.Join(dir, "model.safetensors")
	index := filepath.Join(dir, "model.safetensors.index.json")
	var shards []string
	var weightMap map[string]string
	switch {
	case exists(index):
		data, err := os.ReadFile(index)
		if err != nil {
			return nil, err
		}
		var idx struct {
			Metadata  map[string]any    `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", index, ErrFormat, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: %w: empty weight_map", index, ErrFormat)
		}
		weightMap = idx.WeightMap
		seen := map[string]bool{}
		for _, shard := range idx.WeightMap {
			if shard != filepath.Base(shard) || !strings.HasSuffix(shard, ".safetensors") {
				return nil, fmt.Errorf("%s: %w: shard %q must be a .safetensors file in the same directory", index, ErrFormat, shard)
			}
			if !seen[shard] {
				seen[shard] = true
				shards = append(shards, shard)
			}
		}
		sort.Strings(shards)
	case exists(single):
		shards = []string{"model.safetensors"}
	default:
		// A GGUF file (llama.cpp's format: k-quants, i-quants and others) is refused by name:
		// the weights are there, in a format this reader does not implement.
		if ggufs, _ := filepath.Glob(filepath.Join(dir, "*.gguf")); len(ggufs) > 0 {
			return nil, fmt.Errorf("%s: %s is a GGUF checkpoint, which is not implemented: weights are read from safetensors (model.safetensors or model.safetensors.index.json)", dir, filepath.Base(ggufs[0]))
		}
		return nil, fmt.Errorf("%s: no model.safetensors or model.safetensors.index.json", dir)
	}

	c := &Checkpoint{Dir: dir, byName: map[string]*File{}}
	for _, s := range shards {
		f, err := Open(filepath.Join(dir, s))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
		for name := range f.Header.Tensors {
			if prev, dup := c.byName[name]; dup {
				c.Close()
				return nil, fmt.Errorf("%s: %w: tensor %q is in both %s and %s", dir, ErrFormat, name, prev.Path, f.Path)
			}
			if weightMap != nil && weightMap[name] != s {
				c.Close()
				return nil, fmt.Errorf("%s: %w: tensor %q is in %s but the index maps it to %q", dir, ErrFormat, name, s, weightMap[name])
			}
			c.byName[name] = f
		}
	}
	for name, shard := range weightMap {
		if _, ok := c.byName[name]; !ok {
			c.Close()
			return nil, fmt.Errorf("%s: %w: the index maps %q to %s, which does not hold it", dir, ErrFormat, name, shard)
		}
	}
	return c, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Info describes a tensor.
func (c *Checkpoint) Info(name string) (Info, bool) {
	f, ok := c.byName[name]
	if !ok {
		return Info{}, false
	}
	return f.Header.Tensors[name], true
}

// Tensor reads a tensor from whichever file holds it.
func (c *Checkpoint) Tensor(name string) (*tensor.Tensor, error) {
	f, ok := c.byName[name]
	if !ok {
		return nil, fmt.Errorf("%s: checkpoint has no tensor %q", c.Dir, name)
	}
	return f.Tensor(name)
}

// Uint16s reads an F16 or BF16 tensor's raw element bits from whichever file holds it
// (File.Uint16s).
func (c *Checkpoint) Uint16s(name string) ([]uint16, Info, error) {
	f, ok := c.byName[name]
	if !ok {
		return nil, Info{}, fmt.Errorf("%s: checkpoint has no tensor %q", c.Dir, name)
	}
	return f.Uint16s(name)
}

// Close closes every file.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
