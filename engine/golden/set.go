package golden

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// ManifestName is the file that makes a directory a golden set.
const ManifestName = "manifest.json"

// Set is one golden set: a directory and its parsed manifest.
type Set struct {
	Dir      string
	Manifest Manifest
	kept     *keptTensors // set by KeepTensors: each tensor read and checked once
}

// Load reads and validates dir/manifest.json. It does not touch the tensors: Tensor and
// Verify check those, so that loading many sets to list them stays cheap.
func Load(dir string) (*Set, error) {
	path := filepath.Join(dir, ManifestName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(data, path)
	if err != nil {
		return nil, err
	}
	return &Set{Dir: dir, Manifest: *m}, nil
}

func (s *Set) manifestPath() string { return filepath.Join(s.Dir, ManifestName) }

// ID names the set in reports: "<op>/<case>" for kernels, "<model>/<case>" for models,
// "sampling/<case>" for sampling sets.
func (s *Set) ID() string {
	switch s.Manifest.Kind {
	case KindModel, KindBatch:
		return s.Manifest.Model + "/" + s.Manifest.Case
	case KindSampling:
		return "sampling/" + s.Manifest.Case
	}
	return s.Manifest.Op + "/" + s.Manifest.Case
}

// File looks a tensor up by its manifest name (not its file name).
func (s *Set) File(name string) (File, bool) {
	for _, f := range s.Manifest.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// Files returns the files with the given role, in manifest order.
func (s *Set) Files(role string) []File {
	var out []File
	for _, f := range s.Manifest.Files {
		if f.Role == role {
			out = append(out, f)
		}
	}
	return out
}

// regenerateHint says how to rebuild this set's tier.
func (s *Set) regenerateHint() string {
	if s.Manifest.Tier == TierFull {
		return "make golden-full"
	}
	return "make golden"
}

// DecodeParams decodes the manifest's params into v strictly, in both directions: a key v has
// no field for is an error, and so is a field of v (a struct) without omitempty that params
// lacks, since the contract lists exactly the keys each op takes and a missing one would
// otherwise silently read as zero.
func (s *Set) DecodeParams(v any) error {
	params := bytes.TrimSpace(s.Manifest.Params)
	if len(params) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: params: %w", s.manifestPath(), err)
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(params, &present); err != nil {
		return fmt.Errorf("%s: params: %w", s.manifestPath(), err)
	}
	var missing []string
	for _, key := range requiredKeys(v) {
		if _, ok := present[key]; !ok {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: params: missing %s", s.manifestPath(), strings.Join(missing, ", "))
	}
	return nil
}

// requiredKeys lists the JSON names of the exported, non-omitempty fields of the struct v
// points to; nil for anything else (a map, say, has no required keys).
func requiredKeys(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for f := range t.Fields() {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,") {
			continue
		}
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}
