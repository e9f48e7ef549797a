package golden

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseManifest must never panic, and anything it accepts must survive being written back
// out and parsed again (so a tool that rewrites manifests cannot produce one it then rejects).
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(docManifest))
	f.Add([]byte(strings.Replace(docManifest, `"kind": "kernel",
  "op": "rmsnorm",`, `"kind": "model", "model": "qwen",`, 1)))
	f.Add([]byte(strings.Replace(docManifest, `"format_version": 1`, `"format_version": 2`, 1)))
	f.Add([]byte(strings.Replace(docManifest, `"seed": 3735928559,`, `"seed": 1, "seed": 2,`, 1)))
	f.Add([]byte(strings.Replace(docManifest, `[4, 896]`, `[-4, 896]`, 1)))
	f.Add([]byte(strings.Replace(docManifest, `"x.npy"`, `"../x.npy"`, 1)))
	f.Add([]byte(`{"format_version": 1, "params": {"a": {"a": [1, {"b": 2, "b": 3}]}}}`))
	f.Add([]byte(`{"format_version": 1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data, "fuzz.json")
		if err != nil {
			if m != nil {
				t.Fatal("manifest returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "fuzz.json: ") {
				t.Fatalf("error does not name the manifest: %v", err)
			}
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encoding an accepted manifest: %v", err)
		}
		if _, err := ParseManifest(out, "again.json"); err != nil {
			t.Fatalf("re-parsing an accepted manifest: %v\n%s", err, out)
		}
		s := &Set{Dir: "fuzz", Manifest: *m}
		_ = s.ID()
		var params map[string]any
		_ = s.DecodeParams(&params)
	})
}
