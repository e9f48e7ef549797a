package golden

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// docManifest is the example from docs/golden-format.md with real-looking digests.
const docManifest = `{
  "format_version": 1,
  "generator": {"name": "gen-golden", "version": "1.0.0", "python": "3.11.7",
                "torch": "2.11.0", "numpy": "2.4.6", "device": "cpu"},
  "kind": "kernel",
  "op": "rmsnorm",
  "case": "qwen2.5-0.5b_rows4_eps1e-6",
  "tier": "committed",
  "seed": 3735928559,
  "params": {"eps": 1e-06},
  "files": [
    {"name": "x",      "file": "x.npy",      "role": "input",    "dtype": "f16", "shape": [4, 896], "sha256": "` + sha + `"},
    {"name": "weight", "file": "weight.npy", "role": "input",    "dtype": "f16", "shape": [896],    "sha256": "` + sha + `"},
    {"name": "out",    "file": "out.npy",    "role": "expected", "dtype": "f32", "shape": [4, 896], "sha256": "` + sha + `"}
  ]
}`

func TestParseManifestDocExample(t *testing.T) {
	m, err := ParseManifest([]byte(docManifest), "m.json")
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindKernel || m.Op != "rmsnorm" || m.Case != "qwen2.5-0.5b_rows4_eps1e-6" || m.Tier != TierCommitted ||
		m.Seed != 3735928559 || m.Generator.Torch != "2.11.0" || len(m.Files) != 3 || m.Files[2].Role != RoleExpected ||
		m.Files[0].Shape[1] != 896 || string(m.Params) != `{"eps": 1e-06}` {
		t.Errorf("parsed %+v", m)
	}
}

// edit applies f to the doc example decoded as generic JSON and re-encodes it.
func edit(t *testing.T, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(docManifest), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func file(m map[string]any, i int) map[string]any { return m["files"].([]any)[i].(map[string]any) }

func TestParseManifestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []string
	}{
		{"not json", []byte("{"), []string{"not a valid manifest"}},
		{"not an object", []byte("[]"), []string{"not a valid manifest"}},
		{"version missing", edit(t, func(m map[string]any) { delete(m, "format_version") }), []string{"format_version missing", "make golden"}},
		{"version stale", edit(t, func(m map[string]any) { m["format_version"] = 0 }), []string{"format_version 0 is stale", "regenerate"}},
		{"version newer", edit(t, func(m map[string]any) { m["format_version"] = 2; m["new_field"] = 1 }), []string{"format_version 2 is from a newer generator", "regenerate"}},
		{"version string", edit(t, func(m map[string]any) { m["format_version"] = "1" }), []string{"not an integer"}},
		{"version float", edit(t, func(m map[string]any) { m["format_version"] = 1.5 }), []string{"not an integer"}},
		{"unknown field", edit(t, func(m map[string]any) { m["timestamp"] = "now" }), []string{`unknown field "timestamp"`}},
		{"unknown file field", edit(t, func(m map[string]any) { file(m, 1)["order"] = "C" }), []string{`unknown field "order"`}},
		{"unknown generator field", edit(t, func(m map[string]any) { m["generator"].(map[string]any)["host"] = "x" }), []string{`unknown field "host"`}},
		{"duplicate key", []byte(strings.Replace(docManifest, `"seed": 3735928559,`, `"seed": 1, "seed": 2,`, 1)), []string{`duplicate key "seed" in top level`}},
		{"duplicate file key", []byte(strings.Replace(docManifest, `"dtype": "f32",`, `"dtype": "f32", "dtype": "f16",`, 1)), []string{`duplicate key "dtype" in files[2]`}},
		{"trailing data", []byte(docManifest + "{}"), []string{"after top-level value"}},
		{"seed negative", edit(t, func(m map[string]any) { m["seed"] = -1 }), []string{"seed"}},
		{"generator name", edit(t, func(m map[string]any) { delete(m["generator"].(map[string]any), "name") }), []string{"generator.name missing"}},
		{"generator version", edit(t, func(m map[string]any) { m["generator"].(map[string]any)["version"] = "" }), []string{"generator.version missing"}},
		{"kind", edit(t, func(m map[string]any) { m["kind"] = "kernels" }), []string{`kind "kernels"`}},
		{"kind missing", edit(t, func(m map[string]any) { delete(m, "kind") }), []string{`kind ""`}},
		{"op missing", edit(t, func(m map[string]any) { delete(m, "op") }), []string{"op: missing"}},
		{"model on kernel", edit(t, func(m map[string]any) { m["model"] = "qwen" }), []string{`model "qwen" set on a kernel set`}},
		{"model kind without model", edit(t, func(m map[string]any) { m["kind"] = "model" }), []string{"model: missing", `op "rmsnorm" set on a model set`}},
		{"case missing", edit(t, func(m map[string]any) { delete(m, "case") }), []string{"case: missing"}},
		{"case with slash", edit(t, func(m map[string]any) { m["case"] = "a/b" }), []string{"case:", `'/'`}},
		{"tier", edit(t, func(m map[string]any) { m["tier"] = "nightly" }), []string{`tier "nightly"`}},
		{"params not object", edit(t, func(m map[string]any) { m["params"] = []any{1} }), []string{"params must be a JSON object"}},
		{"files missing", edit(t, func(m map[string]any) { delete(m, "files") }), []string{"files: empty"}},
		{"files empty", edit(t, func(m map[string]any) { m["files"] = []any{} }), []string{"files: empty"}},
		{"name missing", edit(t, func(m map[string]any) { delete(file(m, 0), "name") }), []string{"files[0]: name: missing"}},
		{"name duplicate", edit(t, func(m map[string]any) { file(m, 1)["name"] = "x" }), []string{`files[1] ("x"): name "x" listed twice`}},
		{"file duplicate", edit(t, func(m map[string]any) { file(m, 1)["file"] = "x.npy" }), []string{`files[1] ("weight"): file "x.npy" listed twice`}},
		{"file slash", edit(t, func(m map[string]any) { file(m, 0)["file"] = "sub/x.npy" }), []string{`files[0] ("x"): file "sub/x.npy"`, "plain file name"}},
		{"file backslash", edit(t, func(m map[string]any) { file(m, 0)["file"] = `sub\x.npy` }), []string{"plain file name"}},
		{"file dotdot", edit(t, func(m map[string]any) { file(m, 0)["file"] = "..npy" }), []string{"plain file name"}},
		{"file not npy", edit(t, func(m map[string]any) { file(m, 0)["file"] = "x.bin" }), []string{`file "x.bin": must be a .npy file`}},
		{"file is manifest", edit(t, func(m map[string]any) { file(m, 0)["file"] = "manifest.json" }), []string{"must be a .npy file"}},
		{"file bare ext", edit(t, func(m map[string]any) { file(m, 0)["file"] = ".npy" }), []string{"must be a .npy file"}},
		{"role", edit(t, func(m map[string]any) { file(m, 2)["role"] = "output" }), []string{`files[2] ("out"): role "output"`}},
		{"no expected", edit(t, func(m map[string]any) { file(m, 2)["role"] = "input" }), []string{`no "expected" file`}},
		{"dtype", edit(t, func(m map[string]any) { file(m, 0)["dtype"] = "f64" }), []string{`files[0] ("x"): dtype`, `"f64"`}},
		{"dtype numpy spelling", edit(t, func(m map[string]any) { file(m, 0)["dtype"] = "<f2" }), []string{"dtype"}},
		{"shape negative", edit(t, func(m map[string]any) { file(m, 1)["shape"] = []any{-1} }), []string{`files[1] ("weight"): shape: [-1] has a negative dimension`}},
		{"shape absurd", edit(t, func(m map[string]any) { file(m, 1)["shape"] = []any{1 << 40, 1 << 40} }), []string{"absurdly large"}},
		{"shape missing", edit(t, func(m map[string]any) { delete(file(m, 1), "shape") }), []string{`files[1] ("weight"): shape: missing`}},
		{"shape not ints", edit(t, func(m map[string]any) { file(m, 1)["shape"] = []any{1.5} }), []string{"shape"}},
		{"sha upper", edit(t, func(m map[string]any) { file(m, 2)["sha256"] = strings.ToUpper(sha) }), []string{`files[2] ("out"): sha256`, "lower-case hex"}},
		{"sha short", edit(t, func(m map[string]any) { file(m, 2)["sha256"] = sha[:63] }), []string{"sha256"}},
		{"sha missing", edit(t, func(m map[string]any) { delete(file(m, 2), "sha256") }), []string{"sha256"}},
		{"allowance for nothing", edit(t, func(m map[string]any) {
			m["files"] = append(m["files"].([]any), map[string]any{"name": "y_allowance", "file": "y_allowance.npy", "role": "allowance", "dtype": "f32", "shape": []any{4, 896}, "sha256": sha})
		}), []string{`allowance for "y", which is no expected output`}},
		{"allowance misnamed", edit(t, func(m map[string]any) {
			m["files"] = append(m["files"].([]any), map[string]any{"name": "out_flip", "file": "out_flip.npy", "role": "allowance", "dtype": "f32", "shape": []any{4, 896}, "sha256": sha})
		}), []string{`an allowance's name is <expected output>_allowance`}},
		{"allowance shape", edit(t, func(m map[string]any) {
			m["files"] = append(m["files"].([]any), map[string]any{"name": "out_allowance", "file": "out_allowance.npy", "role": "allowance", "dtype": "f32", "shape": []any{896}, "sha256": sha})
		}), []string{`shape [896], its output "out" has [4 896]`}},
		{"allowance dtype", edit(t, func(m map[string]any) {
			m["files"] = append(m["files"].([]any), map[string]any{"name": "out_allowance", "file": "out_allowance.npy", "role": "allowance", "dtype": "f16", "shape": []any{4, 896}, "sha256": sha})
		}), []string{`an allowance is f32`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest(tc.data, "golden/kernels/rmsnorm/c/manifest.json")
			if m != nil {
				t.Errorf("returned a manifest alongside the error")
			}
			wantErr(t, err, append(tc.want, "golden/kernels/rmsnorm/c/manifest.json: ")...)
		})
	}
}

// TestParseManifestReportsAllProblems checks problems are joined, each line naming the file.
func TestParseManifestReportsAllProblems(t *testing.T) {
	data := edit(t, func(m map[string]any) {
		m["tier"] = "x"
		file(m, 0)["dtype"] = "f8"
		file(m, 2)["sha256"] = "nope"
	})
	_, err := ParseManifest(data, "m.json")
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 problems, got %d: %v", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "m.json: ") {
			t.Errorf("line %q does not name the manifest", l)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Errorf("error is not a join of the individual problems")
	}
}

func TestParseManifestModelKind(t *testing.T) {
	data := edit(t, func(m map[string]any) {
		m["kind"] = "model"
		delete(m, "op")
		m["model"] = "qwen2.5-0.5b"
		m["generator"].(map[string]any)["transformers"] = "4.50.0"
		m["files"] = append(m["files"].([]any), map[string]any{
			"name": "config", "file": "config.json", "role": "checkpoint", "sha256": strings.Repeat("0", 64)})
	})
	m, err := ParseManifest(data, "m.json")
	if err != nil {
		t.Fatal(err)
	}
	if s := (&Set{Manifest: *m}); s.ID() != "qwen2.5-0.5b/qwen2.5-0.5b_rows4_eps1e-6" {
		t.Errorf("ID = %q", s.ID())
	}
}

func TestParseManifestParamsOptional(t *testing.T) {
	for _, p := range []any{nil, map[string]any{}} {
		data := edit(t, func(m map[string]any) { m["params"] = p })
		if _, err := ParseManifest(data, "m.json"); err != nil {
			t.Errorf("params %v: %v", p, err)
		}
	}
	data := edit(t, func(m map[string]any) { delete(m, "params") })
	if _, err := ParseManifest(data, "m.json"); err != nil {
		t.Errorf("no params: %v", err)
	}
}

// A kernel set may carry an allowance for an expected output; other kinds may not.
func TestParseManifestAllowance(t *testing.T) {
	allowance := func(m map[string]any) {
		m["files"] = append(m["files"].([]any), map[string]any{"name": "out_allowance", "file": "out_allowance.npy", "role": "allowance", "dtype": "f32", "shape": []any{4, 896}, "sha256": sha})
	}
	if _, err := ParseManifest(edit(t, allowance), "m.json"); err != nil {
		t.Fatal(err)
	}
	_, err := ParseManifest(edit(t, func(m map[string]any) {
		allowance(m)
		m["kind"], m["model"] = "sampling", nil
		delete(m, "op")
		delete(m, "model")
	}), "m.json")
	wantErr(t, err, `role "allowance": only kernel sets hold allowance files`)
}
