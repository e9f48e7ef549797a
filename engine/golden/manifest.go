package golden

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// FormatVersion is the only manifest format_version this reader understands.
const FormatVersion = 1

// Generator records which reference produced a set. Only Name and Version are required; the
// rest is provenance for humans chasing a discrepancy.
type Generator struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Python       string `json:"python,omitempty"`
	Torch        string `json:"torch,omitempty"`
	Numpy        string `json:"numpy,omitempty"`
	Transformers string `json:"transformers,omitempty"`
	Device       string `json:"device,omitempty"`
}

// File describes one tensor of a set.
type File struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Role   string `json:"role"`
	DType  string `json:"dtype,omitempty"`
	Shape  []int  `json:"shape,omitempty"`
	SHA256 string `json:"sha256"`
}

// Manifest is manifest.json.
type Manifest struct {
	FormatVersion int             `json:"format_version"`
	Generator     Generator       `json:"generator"`
	Kind          string          `json:"kind"`
	Op            string          `json:"op,omitempty"`
	Model         string          `json:"model,omitempty"`
	Case          string          `json:"case"`
	Tier          string          `json:"tier"`
	Seed          uint64          `json:"seed"`
	Params        json.RawMessage `json:"params,omitempty"`
	Files         []File          `json:"files"`
}

// Roles, kinds and tiers the format defines.
const (
	RoleInput    = "input"
	RoleExpected = "expected"
	// RoleAllowance marks a kernel set's per-element allowance for one expected output, named
	// <output>_allowance, of its shape, f32: what the reference knows a correct kernel may add
	// to the output's error beyond the op's tolerance (docs/golden-format.md, "Allowances"),
	// such as a once-rounded intermediate that lands on the other side of a rounding boundary.
	RoleAllowance = "allowance"
	// AllowanceSuffix ends an allowance file's name; the rest names its expected output.
	AllowanceSuffix = "_allowance"
	// RoleCheckpoint marks a model set's config.json and safetensors files: checked by
	// sha256, read by the model loader, never decoded as .npy.
	RoleCheckpoint = "checkpoint"
	KindKernel     = "kernel"
	KindModel      = "model"
	// KindBatch is a batch set: ragged sequences decoded together, each with its own reference
	// taps (docs/golden-format.md, "Batch sets"); it runs a model set's checkpoint.
	KindBatch     = "batch"
	KindSampling  = "sampling"
	TierCommitted = "committed"
	TierFull      = "full"
)

// ParseManifest decodes and validates manifest.json; path is only used in errors. It is
// strict: unknown or duplicated keys, a format version other than FormatVersion and anything
// the contract does not allow are errors, and every problem found is reported, not just the
// first.
func ParseManifest(data []byte, path string) (*Manifest, error) {
	if err := checkVersion(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkDuplicateKeys(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if errs := m.validate(); len(errs) > 0 {
		for i, err := range errs {
			errs[i] = fmt.Errorf("%s: %w", path, err)
		}
		return nil, errors.Join(errs...)
	}
	return &m, nil
}

// checkVersion looks at format_version alone before the strict decode, so that a set from a
// newer generator is reported as such rather than as a confusing unknown-field error. Its
// json.Unmarshal also rejects invalid JSON and trailing data once for all later passes.
func checkVersion(data []byte) error {
	var probe struct {
		V *json.RawMessage `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return fmt.Errorf("not a valid manifest: %w", err)
	}
	if probe.V == nil {
		return fmt.Errorf("format_version missing (want %d): regenerate the set with make golden", FormatVersion)
	}
	v, err := strconv.Atoi(string(*probe.V))
	switch {
	case err != nil:
		return fmt.Errorf("format_version %s is not an integer", *probe.V)
	case v < FormatVersion:
		return fmt.Errorf("format_version %d is stale (this reader wants %d): regenerate the set with make golden", v, FormatVersion)
	case v > FormatVersion:
		return fmt.Errorf("format_version %d is from a newer generator (this reader wants %d): regenerate the set with this checkout's make golden, or update the engine", v, FormatVersion)
	}
	return nil
}

// checkDuplicateKeys rejects objects that repeat a key anywhere in the document.
// encoding/json silently keeps the last value, which would let a hand-edited manifest carry
// two checksums or two shapes and mean only one of them.
func checkDuplicateKeys(data []byte) error {
	type frame struct {
		object    bool
		expectKey bool
		seen      map[string]bool
		path      string
		key       string
		index     int
	}
	var stack []*frame
	childPath := func() string {
		if len(stack) == 0 {
			return ""
		}
		top := stack[len(stack)-1]
		if top.object {
			return top.path + "." + top.key
		}
		return top.path + "[" + strconv.Itoa(top.index) + "]"
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			top.expectKey = true
		} else {
			top.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		delim, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (delim == '}' || delim == ']'):
			stack = stack[:len(stack)-1]
			valueDone()
		case len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expectKey:
			top := stack[len(stack)-1]
			key, _ := tok.(string)
			if top.seen[key] {
				where := top.path
				if where == "" {
					where = "top level"
				} else {
					where = where[1:]
				}
				return fmt.Errorf("duplicate key %q in %s", key, where)
			}
			top.seen[key] = true
			top.key = key
			top.expectKey = false
		case isDelim:
			stack = append(stack, &frame{object: delim == '{', expectKey: delim == '{', seen: map[string]bool{}, path: childPath()})
		default:
			valueDone()
		}
	}
}
