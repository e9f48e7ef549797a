package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// modelPeer is the output of tools/bench/model_peer.py.
type modelPeer struct {
	Torch        string  `json:"torch"`
	Transformers string  `json:"transformers"`
	CUDA         string  `json:"cuda"`
	Device       string  `json:"device"`
	Call         string  `json:"call"`
	PrefillMs    float64 `json:"prefill_ms"`
	DecodeStepMs float64 `json:"decode_step_ms"`
}

// runBenchModel times whole-model prefill and decode of model sets on the GPU beside Hugging
// Face transformers (fp16, eager attention) on the same GPU in the same run.
func runBenchModel(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	prompt := fs.Int("prompt", 128, "prompt tokens of the timed prefill")
	decode := fs.Int("decode", 64, "decode steps timed after each prefill")
	warmup := fs.Int("warmup", 2, "untimed prefill + decode rounds")
	repeats := fs.Int("repeats", 10, "timed prefill + decode rounds (medians over them)")
	hf := fs.Bool("hf", true, "time Hugging Face transformers fp16 eager in the same run (needs python3 with torch and transformers)")
	python := fs.String("python", "python3", "python interpreter for the transformers peer")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: touchstone bench-model [flags] <model set>...   (e.g. qwen2.5-0.5b gpt2-124m)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
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
	fmt.Fprintf(stdout, "device %s; prefill of %d tokens and %d decode steps after it, %d timed rounds after %d warm-up, CUDA events, medians\n\n",
		info.Name, *prompt, *decode, *repeats, *warmup)
	header := []string{"model", "prefill ms", "HF eager ms", "HF / ours", "decode ms/token", "op by op ms/token", "tokens/s", "HF eager tokens/s", "ours / HF"}
	var rows [][]string
	var peerInfo string
	status := 0
	for _, name := range fs.Args() {
		set, err := findModelSet(root, name)
		if err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
			return 2
		}
		res, err := timeModelSet(prof, set.Dir, opts)
		if err != nil {
			fmt.Fprintf(stderr, "touchstone: %s: %v\n", name, err)
			return 1
		}
		opByOp := "-"
		if res.DecodeOpByOpMs > 0 {
			opByOp = fmt.Sprintf("%.3f", res.DecodeOpByOpMs)
		}
		row := []string{set.Manifest.Model, fmt.Sprintf("%.2f", res.PrefillMs), "", "", fmt.Sprintf("%.3f", res.DecodeStepMs),
			opByOp, fmt.Sprintf("%.0f", res.TokensPerSec), "", ""}
		if *hf {
			peer, err := runModelPeer(*python, filepath.Join(filepath.Dir(root), "tools", "bench", "model_peer.py"), set.Dir, res, opts, info.Index)
			if err != nil {
				fmt.Fprintf(stderr, "touchstone: %s: the transformers peer did not run: %v\n", name, err)
				status = 1
			} else {
				row[2], row[3] = fmt.Sprintf("%.2f", peer.PrefillMs), fmt.Sprintf("%.2fx", peer.PrefillMs/res.PrefillMs)
				row[7], row[8] = fmt.Sprintf("%.0f", 1000/peer.DecodeStepMs), fmt.Sprintf("%.2fx", peer.DecodeStepMs/res.DecodeStepMs)
				peerInfo = fmt.Sprintf("peer: transformers %s, torch %s (CUDA %s) on %s: %s", peer.Transformers, peer.Torch, peer.CUDA, peer.Device, peer.Call)
			}
		}
		rows = append(rows, row)
	}
	if peerInfo != "" {
		fmt.Fprintf(stdout, "%s\n\n", peerInfo)
	}
	fmt.Fprintf(stdout, "decode ms/token: the model's default, steps replayed from a graph captured during warm-up where the backend has graphs (%s=0 turns that off); op by op: every op issued from the host, timed in the same run\n\n", model.EnvGraphs)
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

func runModelPeer(python, script, modelDir string, res *bench.ModelResult, o bench.ModelOptions, device int) (*modelPeer, error) {
	req, err := json.Marshal(map[string]any{
		"model_dir": modelDir, "prompt_ids": res.PromptIDs, "decode_ids": res.DecodeIDs,
		"warmup": o.Warmup, "repeats": o.Repeats, "device": fmt.Sprintf("cuda:%d", device),
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
	var p modelPeer
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("peer output: %w", err)
	}
	return &p, nil
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
