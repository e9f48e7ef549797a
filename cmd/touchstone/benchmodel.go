package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// peerRun is one transformers peer's timings in the output of tools/bench/model_peer.py.
type peerRun struct {
	Call                 string  `json:"call"`
	PrefillMs            float64 `json:"prefill_ms"`
	DecodeStepMs         float64 `json:"decode_step_ms"`
	DecodeLoopMsPerToken float64 `json:"decode_loop_ms_per_token"`
	CompileS             float64 `json:"compile_s"` // warm-up that compiled and captured, excluded
}

// modelPeer is the output of tools/bench/model_peer.py.
type modelPeer struct {
	Torch        string             `json:"torch"`
	Transformers string             `json:"transformers"`
	CUDA         string             `json:"cuda"`
	Device       string             `json:"device"`
	Peers        map[string]peerRun `json:"peers"`
	// The eager peer's fields at the top level: all that a script from before "peers" prints.
	Call         string  `json:"call"`
	PrefillMs    float64 `json:"prefill_ms"`
	DecodeStepMs float64 `json:"decode_step_ms"`
}

// peerNames are the peers model_peer.py runs, in the order of their table columns.
var peerNames = []string{"eager", "compile"}

// parsePeers reads -peers: a comma-separated subset of peerNames, each at most once.
func parsePeers(s string) ([]string, error) {
	var peers []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(peerNames, name) {
			return nil, fmt.Errorf("-peers: unknown peer %q (known: %s)", name, strings.Join(peerNames, ", "))
		}
		if slices.Contains(peers, name) {
			return nil, fmt.Errorf("-peers: %q given twice", name)
		}
		peers = append(peers, name)
	}
	return peers, nil
}

// parsePeerOutput decodes model_peer.py's stdout. A peer missing from "peers" is simply absent
// (the request may not have asked for it); output without "peers" is the eager peer alone, from
// its top-level fields. A peer present with a time that is not positive is an error, so a broken
// peer can never show up as a speedup.
func parsePeerOutput(out []byte) (*modelPeer, error) {
	var p modelPeer
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("peer output: %w", err)
	}
	if p.Peers == nil && p.PrefillMs != 0 {
		p.Peers = map[string]peerRun{"eager": {Call: p.Call, PrefillMs: p.PrefillMs, DecodeStepMs: p.DecodeStepMs}}
	}
	if len(p.Peers) == 0 {
		return nil, fmt.Errorf("peer output: no peer timings")
	}
	for name, r := range p.Peers {
		if !(r.PrefillMs > 0 && r.DecodeStepMs > 0) || math.IsInf(r.PrefillMs, 0) || math.IsInf(r.DecodeStepMs, 0) {
			return nil, fmt.Errorf("peer output: %s: prefill %v ms, decode step %v ms", name, r.PrefillMs, r.DecodeStepMs)
		}
	}
	return &p, nil
}

// benchModelHeader is the table's header: touchstone and the eager peer in the columns they
// have always had, then the compile peer's columns when it was asked for.
func benchModelHeader(withCompile bool) []string {
	h := []string{"model", "prefill ms", "HF eager ms", "HF / ours", "decode ms/token", "op by op ms/token", "tokens/s", "HF eager tokens/s", "ours / HF"}
	if withCompile {
		h = append(h, "compile prefill ms", "vs compile", "compile decode tok/s", "vs compile", "compile loop ms/token")
	}
	return h
}

// benchModelRow is one model's row under benchModelHeader(withCompile); peer may be nil (no
// peer ran, or it failed) and any peer may be missing from it: those cells read "-". A speedup
// is the peer's time over ours, above 1 where touchstone is faster.
func benchModelRow(modelName string, res *bench.ModelResult, peer *modelPeer, withCompile bool) []string {
	opByOp := "-"
	if res.DecodeOpByOpMs > 0 {
		opByOp = fmt.Sprintf("%.3f", res.DecodeOpByOpMs)
	}
	get := func(name string) (peerRun, bool) {
		if peer == nil {
			return peerRun{}, false
		}
		r, ok := peer.Peers[name]
		return r, ok
	}
	prefillCells := func(name string) []string {
		if r, ok := get(name); ok {
			return []string{fmt.Sprintf("%.2f", r.PrefillMs), fmt.Sprintf("%.2fx", r.PrefillMs/res.PrefillMs)}
		}
		return []string{"-", "-"}
	}
	decodeCells := func(name string) []string {
		if r, ok := get(name); ok {
			return []string{fmt.Sprintf("%.0f", 1000/r.DecodeStepMs), fmt.Sprintf("%.2fx", r.DecodeStepMs/res.DecodeStepMs)}
		}
		return []string{"-", "-"}
	}
	row := []string{modelName, fmt.Sprintf("%.2f", res.PrefillMs)}
	row = append(row, prefillCells("eager")...)
	row = append(row, fmt.Sprintf("%.3f", res.DecodeStepMs), opByOp, fmt.Sprintf("%.0f", res.TokensPerSec))
	row = append(row, decodeCells("eager")...)
	if withCompile {
		row = append(row, prefillCells("compile")...)
		row = append(row, decodeCells("compile")...)
		loop := "-"
		if r, ok := get("compile"); ok && r.DecodeLoopMsPerToken > 0 {
			loop = fmt.Sprintf("%.3f", r.DecodeLoopMsPerToken)
		}
		row = append(row, loop)
	}
	return row
}

// peerInfoLines says what each peer in peer ran, one line per peer in table order. The eager
// line is the same for every model; the compile line names the model, whose compile and capture
// time it states.
func peerInfoLines(modelName string, peer *modelPeer) []string {
	var lines []string
	for _, name := range peerNames {
		r, ok := peer.Peers[name]
		if !ok {
			continue
		}
		who := "peer " + name
		if name != "eager" {
			who += " (" + modelName + ")"
		}
		line := fmt.Sprintf("%s: transformers %s, torch %s (CUDA %s) on %s: %s", who, peer.Transformers, peer.Torch, peer.CUDA, peer.Device, r.Call)
		if r.CompileS > 0 {
			line += fmt.Sprintf("; compile+capture %.0f s, excluded", r.CompileS)
		}
		lines = append(lines, line)
	}
	return lines
}

// runBenchModel times whole-model prefill and decode of model sets on the GPU beside Hugging
// Face transformers on the same GPU in the same run: fp16 eager attention with a DynamicCache,
// and fp16 SDPA with a StaticCache and the decode step under torch.compile with CUDA graphs.
func runBenchModel(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	prompt := fs.Int("prompt", 128, "prompt tokens of the timed prefill")
	decode := fs.Int("decode", 64, "decode steps timed after each prefill")
	warmup := fs.Int("warmup", 2, "untimed prefill + decode rounds")
	repeats := fs.Int("repeats", 10, "timed prefill + decode rounds (medians over them)")
	hf := fs.Bool("hf", true, "time Hugging Face transformers peers in the same run (needs python3 with torch and transformers); false: none")
	peersFlag := fs.String("peers", "eager,compile", "transformers peers, comma-separated: eager (eager attention, DynamicCache), compile (SDPA, StaticCache, torch.compile reduce-overhead: CUDA graphs); empty: none")
	python := fs.String("python", "python3", "python interpreter for the transformers peer")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: touchstone bench-model [flags] <model set or checkpoint dir>...   (e.g. qwen2.5-0.5b gpt2-124m)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	if !*hf {
		peers = nil
	}
	withCompile := slices.Contains(peers, "compile")
	root, err := goldenRoot(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	prof, closeBackend, err := openProfiler("bench-model")
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	defer closeBackend()
	opts := bench.ModelOptions{PromptLen: *prompt, DecodeSteps: *decode, Warmup: *warmup, Repeats: *repeats, Seed: 1}
	info := prof.Info()
	fmt.Fprintf(stdout, "device %d (%s; the peers run on the same one); prefill of %d tokens and %d decode steps after it, %d timed rounds after %d warm-up, CUDA events, medians\n\n",
		info.Index, info.Name, *prompt, *decode, *repeats, *warmup)
	var rows [][]string
	var peerInfo []string
	status := 0
	for _, arg := range fs.Args() {
		dir, name, err := benchTarget(root, arg)
		if err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
			return 2
		}
		res, err := timeModelSet(prof, dir, opts)
		if err != nil {
			fmt.Fprintf(stderr, "touchstone: %s: %v\n", name, err)
			return 1
		}
		var peer *modelPeer
		if len(peers) > 0 {
			peer, err = runModelPeer(*python, filepath.Join(filepath.Dir(root), "tools", "bench", "model_peer.py"), dir, res, opts, info.Index, peers)
			if err != nil {
				fmt.Fprintf(stderr, "touchstone: %s: the transformers peers did not run: %v\n", name, err)
				status = 1
			} else {
				for _, p := range peers {
					if _, ok := peer.Peers[p]; !ok {
						fmt.Fprintf(stderr, "touchstone: %s: the transformers peer %q is missing from the peer's output\n", name, p)
						status = 1
					}
				}
				for _, line := range peerInfoLines(name, peer) {
					if !slices.Contains(peerInfo, line) {
						peerInfo = append(peerInfo, line)
					}
				}
			}
		}
		rows = append(rows, benchModelRow(name, res, peer, withCompile))
	}
	for _, line := range peerInfo {
		fmt.Fprintln(stdout, line)
	}
	if len(peerInfo) > 0 {
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "decode ms/token: the model's default, steps replayed from a graph captured during warm-up where the backend has graphs (%s=0 turns that off); op by op: every op issued from the host, timed in the same run\n\n", model.EnvGraphs)
	if withCompile {
		fmt.Fprint(stdout, "vs compile: the compile peer's time over ours (above 1: ours is faster), each decode step timed and synchronised as ours are; compile loop ms/token: its decode steps of a round issued back to back with no sync between them, over the steps\n\n")
	}
	header := benchModelHeader(withCompile)
	printTable(stdout, header, rows, *markdown)
	return status
}

// timeModelSet loads a set's checkpoint with a cache for the run and times it.
func timeModelSet(prof bench.Profiler, dir string, o bench.ModelOptions) (*bench.ModelResult, error) {
	m, err := model.Load(prof, dir, o.PromptLen+o.DecodeSteps)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return bench.TimeModel(prof, m, o)
}

func runModelPeer(python, script, modelDir string, res *bench.ModelResult, o bench.ModelOptions, device int, peers []string) (*modelPeer, error) {
	req, err := json.Marshal(map[string]any{
		"model_dir": modelDir, "prompt_ids": res.PromptIDs, "decode_ids": res.DecodeIDs,
		"warmup": o.Warmup, "repeats": o.Repeats, "device": fmt.Sprintf("cuda:%d", device),
		"peers": peers,
	})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", python, script, err)
	}
	return parsePeerOutput(out)
}

// printTable prints rows under header, aligned, or as a Markdown table.
func printTable(w io.Writer, header []string, rows [][]string, markdown bool) {
	if markdown {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(header, "\t")))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}
