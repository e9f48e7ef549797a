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
	"strconv"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// parseBatches reads -batch: comma-separated batch sizes in 1..model.MaxBatch, each once.
func parseBatches(s string) ([]int, error) {
	return parseDistinctInts("-batch", "batch sizes", s, 1, model.MaxBatch)
}

// parseDistinctInts reads a flag's comma-separated integers in lo..hi, each once; the error
// names the flag, its value and what it wants.
func parseDistinctInts(flag, what, s string, lo, hi int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi || seen[n] {
			return nil, fmt.Errorf("%s %q: want distinct %s in %d..%d, comma-separated", flag, s, what, lo, hi)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// benchTarget resolves a timing command's model argument: a model set (its name or directory),
// or a bare checkpoint directory (config.json and safetensors, no manifest: what `gen-golden
// checkpoint` writes in seconds, the set's shapes and scales). Returns the directory and the
// name to print.
func benchTarget(root, arg string) (dir, name string, err error) {
	if _, err := os.Stat(filepath.Join(arg, golden.ManifestName)); err != nil {
		if st, err := os.Stat(filepath.Join(arg, "config.json")); err == nil && !st.IsDir() {
			return arg, filepath.Base(filepath.Clean(arg)), nil
		}
	}
	set, err := findModelSet(root, arg)
	if err != nil {
		return "", "", err
	}
	return set.Dir, set.Manifest.Model, nil
}

// parseGemvRows reads -gemv-rows: distinct row limits in 0..maxGemvRows, comma-separated, or
// empty (time the library's own setting only).
func parseGemvRows(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return parseDistinctInts("-gemv-rows", "row limits", s, 0, maxGemvRows)
}

// maxGemvRows is the largest row limit the library accepts (ts_set_gemv_rows: the gemv's row
// tiles are 1, 2 and 4).
const maxGemvRows = 4

// batchKernels is one kernel setting a batch is timed under.
type batchKernels struct {
	label     string
	invariant bool
	gemvRows  int // -1: the library's own setting
}

// runBenchBatch times batched decode throughput of model sets at several batch sizes beside
// transformers' static cache under torch.compile (CUDA graphs) at the same batch, in the same
// run on the same GPU, fed the same tokens.
func runBenchBatch(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-batch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	batches := fs.String("batch", "1,4,16", "batch sizes, comma-separated (1..64; -invariant times those up to 16)")
	prompt := fs.Int("prompt", 128, "prompt tokens of every sequence")
	decode := fs.Int("decode", 64, "decode steps timed after the prefills")
	warmup := fs.Int("warmup", 2, "untimed rounds")
	repeats := fs.Int("repeats", 5, "timed rounds (medians over them)")
	hf := fs.Bool("hf", true, "time the torch.compile peer in the same run (python3 with torch and transformers)")
	python := fs.String("python", "python3", "python interpreter for the peer")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	invariant := fs.Bool("invariant", false, "time with the batch-invariant kernels (ts_set_batch_invariant) as well")
	gemvRowsFlag := fs.String("gemv-rows", "", "time the default kernels under each of these gemv row limits (ts_set_gemv_rows, 0..4, comma-separated) instead of the library's own")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: touchstone bench-batch [flags] <model set or checkpoint dir>...   (e.g. qwen2.5-0.5b llama3.2-1b)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sizes, err := parseBatches(*batches)
	var gemvRows []int
	if err == nil {
		gemvRows, err = parseGemvRows(*gemvRowsFlag)
	}
	if err != nil || fs.NArg() == 0 {
		if err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
		}
		fs.Usage()
		return 2
	}
	root, err := goldenRoot(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	prof, closeBackend, err := openProfiler("bench-batch")
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	defer closeBackend()
	modes, restore, err := batchModes(prof, gemvRows, *invariant)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	info := prof.Info()
	fmt.Fprintf(stdout, "device %d (%s; the peer runs on the same one); every sequence %d prompt tokens, then %d decode steps of the whole batch; %d timed rounds after %d warm-up, CUDA events, medians\n\n",
		info.Index, info.Name, *prompt, *decode, *repeats, *warmup)
	header := []string{"model", "batch", "kernels", "ours ms/step", "ours tok/s", "compile ms/step", "compile tok/s", "vs compile"}
	var rows [][]string
	status := 0
	var fastest []string
	for _, arg := range fs.Args() {
		dir, name, err := benchTarget(root, arg)
		if err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
			return 2
		}
		m, err := model.Load(prof, dir, *prompt+*decode)
		if err != nil {
			fmt.Fprintf(stderr, "touchstone: %s: %v\n", name, err)
			return 1
		}
		results := map[string]*bench.BatchResult{}
		for _, k := range modes {
			if err := applyBatchKernels(prof, k); err != nil {
				m.Close()
				fmt.Fprintln(stderr, "touchstone:", err)
				return 1
			}
			for _, n := range sizes {
				if k.invariant && n > model.MaxInvariantBatch {
					continue // beyond the batch-invariant kernels' range (model.Batch refuses it)
				}
				o := bench.BatchOptions{Batch: n, PromptLen: *prompt, DecodeSteps: *decode, Warmup: *warmup, Repeats: *repeats, Seed: 1}
				res, err := bench.TimeBatch(prof, m, o)
				if err != nil {
					m.Close()
					fmt.Fprintf(stderr, "touchstone: %s at batch %d (%s): %v\n", name, n, k.label, err)
					return 1
				}
				results[fmt.Sprintf("%d/%s", n, k.label)] = res
			}
		}
		m.Close()
		if err := applyBatchKernels(prof, restore); err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
			return 1
		}
		if len(gemvRows) > 1 {
			fastest = append(fastest, fastestGemvRows(name, sizes, modes, results))
		}
		for _, n := range sizes {
			var peer *peerRun
			if *hf {
				res := results[fmt.Sprintf("%d/%s", n, modes[0].label)]
				p, err := runBatchPeer(*python, filepath.Join(filepath.Dir(root), "tools", "bench", "model_peer.py"), dir, res, *warmup, *repeats, info.Index)
				if err != nil {
					fmt.Fprintf(stderr, "touchstone: %s at batch %d: the torch.compile peer did not run: %v\n", name, n, err)
					status = 1
				} else {
					peer = p
				}
			}
			for _, k := range modes {
				res := results[fmt.Sprintf("%d/%s", n, k.label)]
				if res == nil {
					continue
				}
				row := []string{name, strconv.Itoa(n), k.label, fmt.Sprintf("%.3f", res.LoopMsPerStep), fmt.Sprintf("%.0f", res.TokensPerSec), "-", "-", "-"}
				if peer != nil {
					row[5] = fmt.Sprintf("%.3f", peer.DecodeLoopMsPerToken)
					row[6] = fmt.Sprintf("%.0f", float64(n)*1000/peer.DecodeLoopMsPerToken)
					row[7] = fmt.Sprintf("%.2fx", peer.DecodeLoopMsPerToken/res.LoopMsPerStep)
				}
				rows = append(rows, row)
			}
		}
	}
	fmt.Fprint(stdout, "ms/step: one decode step of the whole batch, a round's steps issued back to back (events around the loop, over the steps); ours replay each step from a graph; compile: transformers SDPA + StaticCache at the same batch, the decode step under torch.compile(mode='reduce-overhead') (CUDA graphs); tok/s = batch x 1000 / ms/step; vs compile: its ms/step over ours (above 1: ours is faster)\n\n")
	printTable(stdout, header, rows, *markdown)
	for _, line := range fastest {
		fmt.Fprintln(stdout, line)
	}
	return status
}

// runBatchPeer runs tools/bench/model_peer.py's compile peer at res's batch on its tokens.
func runBatchPeer(python, script, modelDir string, res *bench.BatchResult, warmup, repeats, device int) (*peerRun, error) {
	req, err := json.Marshal(map[string]any{
		"model_dir": modelDir, "batch": res.Batch, "prompt_ids": res.PromptIDs, "decode_ids": res.DecodeIDs,
		"warmup": warmup, "repeats": repeats, "device": fmt.Sprintf("cuda:%d", device), "peers": []string{"compile"},
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
	p, err := parsePeerOutput(out)
	if err != nil {
		return nil, err
	}
	run, ok := p.Peers["compile"]
	if !ok || run.DecodeLoopMsPerToken <= 0 {
		return nil, fmt.Errorf("%s: no compile peer timing in its output", script)
	}
	return &run, nil
}
