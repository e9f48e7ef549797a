// Command touchstone runs the conformance check outside Ginkgo and maintains golden data.
//
//	touchstone check [flags]          conformance table of every kernel, model and sampling set
//	touchstone golden verify [flags]  checksums, headers and manifests of every golden set
//	touchstone bench [flags]          kernel timings beside PyTorch on the same GPU
//	touchstone bench-model <set>...   whole-model prefill and decode timings beside transformers
//	touchstone bench-batch <set>...   batched decode throughput at B = 1, 4, 16 beside torch.compile
//	touchstone diff <model set>       layer-diff table of a model set on a backend
//	touchstone compare [flags]        a candidate build of the kernels against a baseline
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage: touchstone <command> [flags]

commands:
  check            run every kernel, model and sampling golden set on a backend and print the conformance table
  golden verify    verify every golden set: manifest, checksums, .npy headers, unlisted files
  bench            time every kernel on the GPU beside PyTorch's equivalent op
  bench-model <m>  time whole-model prefill and decode on the GPU beside transformers (eager; static cache + torch.compile)
  bench-batch <m>  batched decode throughput (tokens/s at B = 1, 4, 16) beside torch.compile with a static cache at the same batch
  diff <model>     layer-diff table of a model set: every tap in forward order, first failure marked
  compare          a candidate build of the kernels against a baseline: accuracy and speed per case

environment:
  TOUCHSTONE_BACKEND     cpu | cuda | auto (default auto: cuda when it loads, else cpu)
  TOUCHSTONE_REQUIRE_GPU 1: fail instead of falling back to the CPU
  TOUCHSTONE_DEVICE      GPU ordinal
  TOUCHSTONE_GOLDEN      golden directory (default: golden/ above the working directory)
  TOUCHSTONE_UNSUPPORTED skip | fail: what a case the backend does not implement counts as
                         in check and bench (default skip; dist/run sets fail)

Run 'touchstone <command> -h' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit status: 0 all good, 1 a check
// failed, 2 the command could not run (bad usage, missing data, no backend).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "bench-model":
		return runBenchModel(args[1:], stdout, stderr)
	case "bench-batch":
		return runBenchBatch(args[1:], stdout, stderr)
	case "diff":
		return runDiff(args[1:], stdout, stderr)
	case "compare":
		return runCompare(args[1:], stdout, stderr)
	case "golden":
		if len(args) < 2 || args[1] != "verify" {
			fmt.Fprint(stderr, "usage: touchstone golden verify [flags]\n")
			return 2
		}
		return runGoldenVerify(args[2:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "touchstone: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
