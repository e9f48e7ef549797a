package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/bench"
)

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	warmup := fs.Int("warmup", 10, "untimed launches before timing")
	repeats := fs.Int("repeats", 50, "timed launches; the median is reported")
	var ops multiFlag
	fs.Var(&ops, "op", "benchmark only this op (repeatable)")
	torch := fs.Bool("torch", true, "time PyTorch's equivalent op in the same run (needs python3 with torch on the GPU)")
	python := fs.String("python", "python3", "python interpreter for the PyTorch peer")
	peer := fs.String("peer", "", "path of tools/bench/torch_peer.py (default: found from the golden directory)")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	dtype := fs.String("dtype", "f16", "storage dtype of the 16-bit cases: f16, bf16, or both (each fp16 case followed by its bf16 twin, and a table of their time ratios)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	policy, err := unsupportedPolicy("")
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	opts := bench.Options{Warmup: *warmup, Repeats: *repeats, Seed: 1}
	runner, info, closeRunner, err := openCaseTimer(opts)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	defer closeRunner()
	all, err := bench.WithDType(bench.Cases(), *dtype)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	var cases []bench.Case
	for _, c := range all {
		if len(ops) == 0 || slices.Contains(ops, c.Op) {
			cases = append(cases, c)
		}
	}
	if info.Backend == "exec" {
		fmt.Fprintf(stdout, "external adapter %s on %s, its measured copy bandwidth %.0f GB/s (read + write)\n", info.Name, info.Device, runner.CopyBandwidthGBps())
		fmt.Fprintf(stdout, "each time: median of %d launches after %d warm-up, L2 flushed before each, the adapter's device events\n\n", *repeats, *warmup)
	} else {
		fmt.Fprintf(stdout, "device %s (%d SMs), measured copy bandwidth %.0f GB/s (read + write)\n", info.Name, info.Processors, runner.CopyBandwidthGBps())
		fmt.Fprintf(stdout, "each time: median of %d launches after %d warm-up, L2 flushed before each, CUDA events\n\n", *repeats, *warmup)
	}

	var results []*bench.Result
	var timed []bench.Case
	failed := 0
	for _, c := range cases {
		res, err := runner.Run(c)
		if policy.Skips(err) {
			// The rule of touchstone check: a case the backend does not implement has no
			// time and is listed, not failed, unless TOUCHSTONE_UNSUPPORTED=fail.
			fmt.Fprintln(stderr, "touchstone: unsupported, not timed:", err)
			continue
		}
		if err != nil {
			// The other cases' times still stand (an external adapter that fails one case
			// times the rest); the run fails at the end.
			fmt.Fprintln(stderr, "touchstone: FAILED, not timed:", err)
			failed++
			continue
		}
		results = append(results, res)
		timed = append(timed, c)
	}
	status := 0
	if failed > 0 {
		defer fmt.Fprintf(stderr, "touchstone: %d bench cases failed\n", failed)
		status = 1
	}

	var peers map[string]bench.PeerResult
	if *torch {
		script := *peer
		if script == "" {
			root, err := goldenRoot("")
			if err == nil {
				script = filepath.Join(filepath.Dir(root), "tools", "bench", "torch_peer.py")
			}
		}
		rep, err := bench.RunPeer(*python, script, info.PeerDevice, timed, opts)
		if err != nil {
			// Our timings still print: they were measured; the missing peer fails the run.
			printBench(stdout, results, nil, *markdown)
			fmt.Fprintln(stderr, "touchstone: the PyTorch peer did not run:", err)
			return 1
		}
		fmt.Fprintf(stdout, "peer: torch %s (CUDA %s) on %s, timed in the same run on the same GPU\n\n", rep.Torch, rep.CUDA, rep.Device)
		peers = rep.ByName()
	}
	printBench(stdout, results, peers, *markdown)
	if *dtype == "both" {
		printTwins(stdout, results, *markdown)
	}
	return status
}

// printTwins prints each bf16 twin's median time over its fp16 case's, measured in the same
// run: the bf16 kernels share their fp16 twins' structure, so the ratio should be 1 (within 3%).
func printTwins(w io.Writer, results []*bench.Result, markdown bool) {
	byName := map[string]*bench.Result{}
	for _, r := range results {
		byName[r.Case.Name] = r
	}
	var rows [][]string
	for _, r := range results {
		f16, ok := byName[strings.TrimSuffix(r.Case.Name, bench.BF16Suffix)]
		if !strings.HasSuffix(r.Case.Name, bench.BF16Suffix) || !ok {
			continue
		}
		rows = append(rows, []string{f16.Case.Name, fmt.Sprintf("%.4f", f16.MedianMs), fmt.Sprintf("%.4f", r.MedianMs),
			fmt.Sprintf("%.3f", r.MedianMs/f16.MedianMs)})
	}
	fmt.Fprintln(w)
	printTable(w, []string{"case", "fp16 ms", "bf16 ms", "bf16 / fp16"}, rows, markdown)
}

// caseTimer times bench cases: a bench.Runner on a GPU backend, or a bench.External over an
// adapter that times its own ops.
type caseTimer interface {
	Run(bench.Case) (*bench.Result, error)
	CopyBandwidthGBps() float64
}

// timerInfo is what bench prints of the backend that times its cases.
type timerInfo struct {
	Backend, Name string
	Processors    int
	// Device is the timing adapter's device, as its handshake names it.
	Device string
	// PeerDevice is the torch device of the PyTorch peer: the GPU of the cases.
	PeerDevice string
}

// openCaseTimer selects the backend from the environment: a GPU backend with device timers,
// or an external backend whose adapter times its ops.
func openCaseTimer(o bench.Options) (caseTimer, timerInfo, func(), error) {
	sel, err := backend.FromEnv()
	if err != nil {
		return nil, timerInfo{}, nil, err
	}
	if t, ok := sel.Backend.(backend.OpTimer); ok {
		ext, err := bench.NewExternal(sel.Backend, o)
		if err != nil {
			sel.Backend.Close()
			return nil, timerInfo{}, nil, err
		}
		dev, _ := t.TimingDevice()
		// The adapter's device is its own choice; the peer runs on the default GPU, which is
		// the adapter's unless it was told otherwise.
		return ext, timerInfo{Backend: "exec", Name: sel.Backend.Info().Name, Device: dev, PeerDevice: "cuda"}, func() { sel.Backend.Close() }, nil
	}
	prof, ok := sel.Backend.(bench.Profiler)
	if !ok {
		name := sel.Backend.Info().Backend
		sel.Backend.Close()
		return nil, timerInfo{}, nil, fmt.Errorf("bench needs a backend with device timers or a timing adapter; %s has none (set TOUCHSTONE_BACKEND=cuda)", name)
	}
	r, err := bench.NewRunner(prof, o)
	if err != nil {
		sel.Backend.Close()
		return nil, timerInfo{}, nil, err
	}
	info := prof.Info()
	return r, timerInfo{Backend: info.Backend, Name: info.Name, Processors: info.Processors, PeerDevice: fmt.Sprintf("cuda:%d", info.Index)},
		func() { r.Close(); sel.Backend.Close() }, nil
}

// openProfiler selects the backend from the environment and requires device timers.
func openProfiler(cmd string) (bench.Profiler, func(), error) {
	sel, err := backend.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	prof, ok := sel.Backend.(bench.Profiler)
	if !ok {
		name := sel.Backend.Info().Backend
		sel.Backend.Close()
		return nil, nil, fmt.Errorf("%s needs a backend with device timers; %s has none (set TOUCHSTONE_BACKEND=cuda)", cmd, name)
	}
	return prof, func() { sel.Backend.Close() }, nil
}

func printBench(w io.Writer, results []*bench.Result, peers map[string]bench.PeerResult, markdown bool) {
	header := []string{"case", "median ms", "GB/s", "% copy BW", "TFLOP/s", "torch ms", "torch / ours", "torch call"}
	rows := [][]string{}
	for _, r := range results {
		row := []string{r.Case.Name, fmt.Sprintf("%.4f", r.MedianMs), "", "", "", "", "", ""}
		if r.GBps > 0 {
			row[2], row[3] = fmt.Sprintf("%.0f", r.GBps), fmt.Sprintf("%.1f%%", r.CopyPct)
		}
		if r.TFLOPs > 0 {
			row[4] = fmt.Sprintf("%.1f", r.TFLOPs)
		}
		if p, ok := peers[r.Case.Name]; ok {
			if p.Error != "" {
				row[5] = "error: " + p.Error
			} else {
				row[5], row[6], row[7] = fmt.Sprintf("%.4f", p.MedianMs), fmt.Sprintf("%.2fx", p.MedianMs/r.MedianMs), p.TorchCall
			}
		}
		rows = append(rows, row)
	}
	if markdown {
		for _, row := range rows {
			if row[7] != "" {
				row[7] = "`" + row[7] + "`"
			}
		}
	}
	printTable(w, header, rows, markdown)
}
