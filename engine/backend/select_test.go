package backend_test

import (
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	_ "github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestSelectCPU(t *testing.T) {
	for _, e := range []map[string]string{{"TOUCHSTONE_BACKEND": "cpu"}, {}} {
		sel, err := backend.Select(env(e), 0)
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
		if sel.Backend.Info().Backend != "cpu" {
			t.Fatalf("%v selected %s", e, sel.Backend.Info().Backend)
		}
	}
}

func TestAutoFallbackExplainsWhy(t *testing.T) {
	sel, err := backend.Select(env(map[string]string{}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Requested != "auto" || !strings.Contains(sel.Fallback, "cuda") {
		t.Fatalf("auto without a GPU: requested %q fallback %q", sel.Requested, sel.Fallback)
	}
}

func TestGPUDemandsFailLoudly(t *testing.T) {
	for name, e := range map[string]map[string]string{
		"cuda asked":           {"TOUCHSTONE_BACKEND": "cuda"},
		"require gpu":          {"TOUCHSTONE_REQUIRE_GPU": "1"},
		"require gpu with cpu": {"TOUCHSTONE_REQUIRE_GPU": "1", "TOUCHSTONE_BACKEND": "cpu"},
		"unknown backend":      {"TOUCHSTONE_BACKEND": "rocm"},
		"bad device":           {"TOUCHSTONE_DEVICE": "gpu0"},
	} {
		if _, err := backend.Select(env(e), 0); err == nil {
			t.Errorf("%s: selected a backend", name)
		} else if !strings.Contains(err.Error(), "TOUCHSTONE_") && !strings.Contains(err.Error(), "rocm") {
			t.Errorf("%s: error does not name the setting: %v", name, err)
		}
	}
}

func TestDuplicateRegistrationPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering cpu twice did not panic")
		}
	}()
	backend.Register("cpu", nil)
}
