package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/bench"
)

// bothPeers is model_peer.py's output for a request with "peers": ["eager", "compile"]
// (timing lists shortened).
const bothPeers = `{"torch": "2.11.0+cu130", "transformers": "5.17.0", "cuda": "13.0", "device": "NVIDIA H100 80GB HBM3",
 "peers": {
  "eager": {"call": "eager call", "prefill_ms": 10.0, "decode_step_ms": 2.0, "decode_loop_ms_per_token": 1.9,
            "compile_s": 0.0, "prefill_times": [10.0], "decode_times": [2.0], "decode_loop_times": [1.9]},
  "compile": {"call": "compile call", "prefill_ms": 4.0, "decode_step_ms": 1.0, "decode_loop_ms_per_token": 0.8,
              "compile_s": 41.6, "graphs": 1, "max_abs_logit_diff_vs_uncompiled": 0.01,
              "prefill_times": [4.0], "decode_times": [1.0], "decode_loop_times": [0.8]}},
 "call": "eager call", "prefill_ms": 10.0, "decode_step_ms": 2.0, "prefill_times": [10.0], "decode_times": [2.0]}`

// eagerOnly is the output for "peers": ["eager"], the request's default.
const eagerOnly = `{"torch": "2.11.0+cu130", "transformers": "5.17.0", "cuda": "13.0", "device": "NVIDIA H100 80GB HBM3",
 "peers": {"eager": {"call": "eager call", "prefill_ms": 10.0, "decode_step_ms": 2.0, "decode_loop_ms_per_token": 1.9, "compile_s": 0.0}},
 "call": "eager call", "prefill_ms": 10.0, "decode_step_ms": 2.0}`

// legacy is the output of model_peer.py before it had "peers": the eager peer alone.
const legacy = `{"torch": "2.11.0+cu130", "transformers": "5.17.0", "cuda": "13.0", "device": "NVIDIA H100 80GB HBM3",
 "call": "eager call", "prefill_ms": 10.0, "decode_step_ms": 2.0, "prefill_times": [10.0], "decode_times": [2.0]}`

// ours is touchstone's side of the rows below: 2 ms prefill, 0.5 ms a decode step.
var ours = &bench.ModelResult{PrefillMs: 2, DecodeStepMs: 0.5, TokensPerSec: 2000}

func TestParsePeerOutputBothPeers(t *testing.T) {
	p, err := parsePeerOutput([]byte(bothPeers))
	if err != nil {
		t.Fatal(err)
	}
	if p.Transformers != "5.17.0" || p.Torch != "2.11.0+cu130" || p.CUDA != "13.0" || p.Device != "NVIDIA H100 80GB HBM3" {
		t.Errorf("versions and device: %+v", p)
	}
	want := map[string]peerRun{
		"eager":   {Call: "eager call", PrefillMs: 10, DecodeStepMs: 2, DecodeLoopMsPerToken: 1.9},
		"compile": {Call: "compile call", PrefillMs: 4, DecodeStepMs: 1, DecodeLoopMsPerToken: 0.8, CompileS: 41.6},
	}
	if !reflect.DeepEqual(p.Peers, want) {
		t.Errorf("peers:\n got %+v\nwant %+v", p.Peers, want)
	}
}

func TestParsePeerOutputEagerOnly(t *testing.T) {
	for name, out := range map[string]string{"eager only": eagerOnly, "before peers existed": legacy} {
		t.Run(name, func(t *testing.T) {
			p, err := parsePeerOutput([]byte(out))
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Peers) != 1 {
				t.Fatalf("peers %v, want eager alone", p.Peers)
			}
			e := p.Peers["eager"]
			if e.Call != "eager call" || e.PrefillMs != 10 || e.DecodeStepMs != 2 || e.CompileS != 0 {
				t.Errorf("eager %+v", e)
			}
			// The compile columns of a run that has no compile peer are placeholders, not zeros.
			row := benchModelRow("Qwen2.5-0.5B", ours, p, true)
			if got, want := row[9:], []string{"-", "-", "-", "-", "-"}; !reflect.DeepEqual(got, want) {
				t.Errorf("compile cells %q, want %q", got, want)
			}
			if got, want := row[2:4], []string{"10.00", "5.00x"}; !reflect.DeepEqual(got, want) {
				t.Errorf("eager prefill cells %q, want %q", got, want)
			}
		})
	}
}

func TestParsePeerOutputMalformed(t *testing.T) {
	for name, out := range map[string]string{
		"empty":               ``,
		"not json":            `model_peer: Traceback (most recent call last)`,
		"truncated":           bothPeers[:len(bothPeers)/2],
		"no timings":          `{"torch": "2.11.0", "transformers": "5.17.0"}`,
		"empty peers":         `{"torch": "2.11.0", "peers": {}}`,
		"string time":         `{"peers": {"eager": {"prefill_ms": "fast", "decode_step_ms": 2.0}}}`,
		"peers not an object": `{"peers": ["eager"]}`,
		"zero prefill":        `{"peers": {"compile": {"prefill_ms": 0, "decode_step_ms": 1.0}}}`,
		"negative decode":     `{"peers": {"compile": {"prefill_ms": 4.0, "decode_step_ms": -1.0}}}`,
		"missing decode":      `{"peers": {"eager": {"prefill_ms": 4.0}}}`,
		"NaN":                 `{"peers": {"eager": {"prefill_ms": NaN, "decode_step_ms": 1.0}}}`,
		"huge":                `{"peers": {"eager": {"prefill_ms": 1e999, "decode_step_ms": 1.0}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if p, err := parsePeerOutput([]byte(out)); err == nil {
				t.Errorf("accepted %q as %+v", out, p)
			}
		})
	}
}

func TestParsePeers(t *testing.T) {
	for in, want := range map[string][]string{
		"eager,compile":     {"eager", "compile"},
		"compile":           {"compile"},
		" compile , eager ": {"compile", "eager"},
		"eager,":            {"eager"},
		"":                  nil,
	} {
		got, err := parsePeers(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parsePeers(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "eager,eager", "eager;compile", "Eager"} {
		if got, err := parsePeers(in); err == nil {
			t.Errorf("parsePeers(%q) = %q, want an error", in, got)
		}
	}
}

func TestBenchModelRow(t *testing.T) {
	p, err := parsePeerOutput([]byte(bothPeers))
	if err != nil {
		t.Fatal(err)
	}
	withOpByOp := *ours
	withOpByOp.DecodeOpByOpMs = 0.75
	for _, tc := range []struct {
		name        string
		res         *bench.ModelResult
		peer        *modelPeer
		withCompile bool
		want        []string
	}{
		{"both peers", &withOpByOp, p, true,
			[]string{"M", "2.00", "10.00", "5.00x", "0.500", "0.750", "2000", "500", "4.00x", "4.00", "2.00x", "1000", "2.00x", "0.800"}},
		{"eager columns only", ours, p, false,
			[]string{"M", "2.00", "10.00", "5.00x", "0.500", "-", "2000", "500", "4.00x"}},
		{"no peer ran", ours, nil, true,
			[]string{"M", "2.00", "-", "-", "0.500", "-", "2000", "-", "-", "-", "-", "-", "-", "-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := benchModelRow("M", tc.res, tc.peer, tc.withCompile)
			if !reflect.DeepEqual(row, tc.want) {
				t.Errorf("row\n got %q\nwant %q", row, tc.want)
			}
			if h := benchModelHeader(tc.withCompile); len(h) != len(row) {
				t.Errorf("%d header columns %q for %d cells", len(h), h, len(row))
			}
		})
	}
}

func TestBenchModelHeader(t *testing.T) {
	eager := []string{"model", "prefill ms", "HF eager ms", "HF / ours", "decode ms/token", "op by op ms/token", "tokens/s", "HF eager tokens/s", "ours / HF"}
	if got := benchModelHeader(false); !reflect.DeepEqual(got, eager) {
		t.Errorf("header without compile %q, want the eager layout %q", got, eager)
	}
	want := slices.Concat(eager, []string{"compile prefill ms", "vs compile", "compile decode tok/s", "vs compile", "compile loop ms/token"})
	if got := benchModelHeader(true); !reflect.DeepEqual(got, want) {
		t.Errorf("header with compile %q, want %q", got, want)
	}
}

func TestBenchModelMarkdownTable(t *testing.T) {
	p, err := parsePeerOutput([]byte(bothPeers))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printTable(&b, benchModelHeader(true), [][]string{benchModelRow("Qwen2.5-0.5B", ours, p, true)}, true)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("markdown table:\n%s", b.String())
	}
	for _, line := range lines {
		if n := strings.Count(line, "|"); n != 15 {
			t.Errorf("%d pipes, want 15 (14 columns): %s", n, line)
		}
	}
	if !strings.HasPrefix(lines[2], "| Qwen2.5-0.5B | 2.00 | 10.00 | 5.00x |") || !strings.HasSuffix(lines[2], "| 2.00x | 0.800 |") {
		t.Errorf("row: %s", lines[2])
	}
}

func TestPeerInfoLines(t *testing.T) {
	p, err := parsePeerOutput([]byte(bothPeers))
	if err != nil {
		t.Fatal(err)
	}
	lines := peerInfoLines("Qwen2.5-0.5B", p)
	want := []string{
		"peer eager: transformers 5.17.0, torch 2.11.0+cu130 (CUDA 13.0) on NVIDIA H100 80GB HBM3: eager call",
		"peer compile (Qwen2.5-0.5B): transformers 5.17.0, torch 2.11.0+cu130 (CUDA 13.0) on NVIDIA H100 80GB HBM3: compile call; compile+capture 42 s, excluded",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("peer lines\n got %q\nwant %q", lines, want)
	}
	e, err := parsePeerOutput([]byte(eagerOnly))
	if err != nil {
		t.Fatal(err)
	}
	if lines := peerInfoLines("Qwen2.5-0.5B", e); len(lines) != 1 || strings.Contains(lines[0], "compile") {
		t.Errorf("eager-only peer lines %q", lines)
	}
}

// fakePython writes an executable that stands in for the interpreter: it saves the request it
// is fed to req.json beside itself, prints out and exits with code.
func fakePython(t *testing.T, out string, code int) (python, reqPath string) {
	t.Helper()
	dir := t.TempDir()
	reqPath = filepath.Join(dir, "req.json")
	outPath := filepath.Join(dir, "out.json")
	if err := os.WriteFile(outPath, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	python = filepath.Join(dir, "python")
	script := "#!/bin/sh\ncat > '" + reqPath + "'\ncat '" + outPath + "'\nexit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(python, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return python, reqPath
}

func TestRunModelPeerSendsPeersAndParses(t *testing.T) {
	python, reqPath := fakePython(t, bothPeers, 0)
	res := &bench.ModelResult{PromptIDs: []int32{5, 6, 7}, DecodeIDs: []int32{8, 9}}
	opts := bench.ModelOptions{Warmup: 2, Repeats: 5}
	p, err := runModelPeer(python, "model_peer.py", "/sets/qwen", res, opts, 1, []string{"eager", "compile"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Peers["compile"]; !ok {
		t.Errorf("no compile peer in %+v", p.Peers)
	}
	data, err := os.ReadFile(reqPath)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		ModelDir  string   `json:"model_dir"`
		PromptIDs []int32  `json:"prompt_ids"`
		DecodeIDs []int32  `json:"decode_ids"`
		Warmup    int      `json:"warmup"`
		Repeats   int      `json:"repeats"`
		Device    string   `json:"device"`
		Peers     []string `json:"peers"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		t.Fatalf("request %s: %v", data, err)
	}
	if req.ModelDir != "/sets/qwen" || !reflect.DeepEqual(req.PromptIDs, res.PromptIDs) || !reflect.DeepEqual(req.DecodeIDs, res.DecodeIDs) ||
		req.Warmup != 2 || req.Repeats != 5 || req.Device != "cuda:1" || !reflect.DeepEqual(req.Peers, []string{"eager", "compile"}) {
		t.Errorf("request %s", data)
	}
}

func TestRunModelPeerFails(t *testing.T) {
	res := &bench.ModelResult{PromptIDs: []int32{5}, DecodeIDs: []int32{8}}
	python, _ := fakePython(t, bothPeers, 1)
	if _, err := runModelPeer(python, "model_peer.py", "/sets/qwen", res, bench.ModelOptions{Repeats: 1}, 0, []string{"compile"}); err == nil {
		t.Error("a peer that exits 1 was taken as a result")
	}
	python, _ = fakePython(t, "not json", 0)
	if _, err := runModelPeer(python, "model_peer.py", "/sets/qwen", res, bench.ModelOptions{Repeats: 1}, 0, []string{"compile"}); err == nil {
		t.Error("output that is not JSON was taken as a result")
	}
}
