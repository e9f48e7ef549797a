# touchstone — conformance harness for LLM inference kernels.
#
#   make check        conformance table on the best available backend (the CPU without a GPU)
#   make test         vet, formatting, unit tests and every Ginkgo suite on the CPU backend (CI)
#   make golden       regenerate the committed golden sets (needs tools/gen-golden/requirements.txt)
#   make golden-full  generate the full-scale tier into golden/.cache (GPU hosts); incremental:
#                     a set whose generator inputs are unchanged is reused (SETS=..., FORCE=1)
#   make golden-full-key   one hash of the full tier's generator inputs (a CI cache key)
#   make cuda         build cuda/build/libtouchstone_cuda.so with nvcc (CUDA_ARCH ?= sm_90)
#   make cuda-test    the C ABI's bad-argument tests against that library
#   make bundle       precompiled suites + ginkgo + touchstone + runner in dist/ (for GPU hosts)
#   make bundle-archive   the same as build/dist.tar.xz
#   make sanitize     compute-sanitizer over the kernel suite (GPU host, after cuda and bundle)
#   make mutate       plant the catalogue of Go-side bugs one at a time and report which the
#                     committed tier catches (tools/mutate; same as mutate-go, run by CI)
#   make mutate-cuda  the CUDA-side bugs on a GPU host (after bundle): dist/bin/mutate -side cuda
#   make mutate-cuda-check   apply and compile every CUDA-side bug with nvcc, run none (no GPU)

SHELL        := bash
GO           ?= go
PYTHON       ?= python3
GINKGO       := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
REPORTS      := build/reports
GINKGO_FLAGS ?= --randomize-all --fail-on-pending --fail-on-empty --keep-going \
                --junit-report=junit.xml --json-report=report.json --output-dir=$(REPORTS)
FUZZTIME     ?= 20s

.PHONY: check test vet fmt-check unit suites suites-external fuzz golden golden-full golden-full-key golden-check golden-verify \
        cuda cuda-test fused-bytes bundle bundle-check bundle-devices-check bundle-hang-check bundle-archive sanitize mutate mutate-go mutate-cuda mutate-cuda-check clean

CUDA_ARCH    ?= sm_90
# Where `make cuda` builds libtouchstone_cuda.so (relative to cuda/, or absolute): a second
# directory keeps a baseline build beside the working one for `touchstone compare`.
CUDA_BUILD   ?= build
SUITES       := $(patsubst %/,%,$(dir $(wildcard suites/*/*_suite_test.go)))

check:
	$(GO) run ./cmd/touchstone check

test: vet fmt-check unit suites suites-external

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test ./engine/... ./cmd/... ./tools/...

suites:
	@mkdir -p $(REPORTS)
	TOUCHSTONE_BACKEND=$${TOUCHSTONE_BACKEND:-cpu} TOUCHSTONE_REPORTS=$${TOUCHSTONE_REPORTS:-$(CURDIR)/$(REPORTS)} \
	  $(GINKGO) -r $(GINKGO_FLAGS) suites

# The kernels suite against the numpy reference adapter (docs/external-backends.md): accepted as
# it is, and rejected with RoPE's pairs planted interleaved (every rope spec must fail). Without
# python3 and numpy it is skipped, saying so, unless TOUCHSTONE_REQUIRE_ADAPTERS=1 (CI).
NUMPY_ADAPTER := exec:$(PYTHON) $(CURDIR)/tools/adapters/numpy/adapter.py
suites-external:
	@if ! $(PYTHON) -c 'import numpy' >/dev/null 2>&1; then \
	  if [ "$$TOUCHSTONE_REQUIRE_ADAPTERS" = 1 ]; then echo "suites-external: $(PYTHON) has no numpy"; exit 1; fi; \
	  echo "suites-external: skipped, $(PYTHON) has no numpy"; exit 0; fi; \
	mkdir -p $(REPORTS)/external; \
	TOUCHSTONE_BACKEND="$(NUMPY_ADAPTER)" TOUCHSTONE_REPORTS=$(CURDIR)/$(REPORTS)/external \
	  $(GINKGO) --fail-on-empty --keep-going --succinct --no-color suites/kernels || exit 1; \
	if TOUCHSTONE_NUMPY_ADAPTER_BUG=rope-interleaved TOUCHSTONE_BACKEND="$(NUMPY_ADAPTER)" \
	  TOUCHSTONE_REPORTS=$(CURDIR)/$(REPORTS)/external $(GINKGO) --label-filter='op:rope && !tightness' \
	  --keep-going --succinct --no-color suites/kernels > $(REPORTS)/external/rope-interleaved.log 2>&1; then \
	  echo "suites-external: an adapter with RoPE's pairs interleaved passed the rope specs"; exit 1; fi; \
	grep -q -- "-- 0 Passed " $(REPORTS)/external/rope-interleaved.log || { \
	  echo "suites-external: some rope spec passed the interleaved adapter:"; tail -20 $(REPORTS)/external/rope-interleaved.log; exit 1; }; \
	TOUCHSTONE_BACKEND="$(NUMPY_ADAPTER)" TOUCHSTONE_REPORTS=$(CURDIR)/$(REPORTS)/external \
	  $(GINKGO) --fail-on-empty --keep-going --succinct --no-color suites/sampling || exit 1; \
	for bug in sample-temperature-ignored sample-top-p-one-more sample-shared-uniform; do \
	  if TOUCHSTONE_NUMPY_ADAPTER_BUG=$$bug TOUCHSTONE_BACKEND="$(NUMPY_ADAPTER)" \
	    TOUCHSTONE_REPORTS=$(CURDIR)/$(REPORTS)/external $(GINKGO) --focus='own random numbers.*gpt2' \
	    --keep-going --succinct --no-color suites/sampling > $(REPORTS)/external/$$bug.log 2>&1; then \
	    echo "suites-external: a sampler with the bug $$bug passed the own-RNG sampling specs"; exit 1; fi; \
	  grep -q "FAIL.*as often as the reference" $(REPORTS)/external/$$bug.log || { \
	    echo "suites-external: the distribution spec let $$bug through:"; tail -20 $(REPORTS)/external/$$bug.log; exit 1; }; \
	done; \
	echo "suites-external: the numpy adapter passes; with RoPE's pairs interleaved every rope spec fails;" \
	  "each planted sampler bug fails the distribution spec"

# Short coverage-guided runs of every parser of outside data.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeNPY -fuzztime=$(FUZZTIME) ./engine/tensor/
	$(GO) test -run='^$$' -fuzz=FuzzFP8MatchesNearestCode -fuzztime=$(FUZZTIME) ./engine/tensor/
	$(GO) test -run='^$$' -fuzz=FuzzInt4WordsRoundTrip -fuzztime=$(FUZZTIME) ./engine/tensor/
	$(GO) test -run='^$$' -fuzz=FuzzParseManifest -fuzztime=$(FUZZTIME) ./engine/golden/
	$(GO) test -run='^$$' -fuzz=FuzzParseCalibration -fuzztime=$(FUZZTIME) ./engine/golden/
	$(GO) test -run='^$$' -fuzz=FuzzParseTolerances -fuzztime=$(FUZZTIME) ./engine/compare/
	$(GO) test -run='^$$' -fuzz=FuzzParseHeader -fuzztime=$(FUZZTIME) ./engine/model/safetensors/
	$(GO) test -run='^$$' -fuzz=FuzzOpen -fuzztime=$(FUZZTIME) ./engine/model/safetensors/
	$(GO) test -run='^$$' -fuzz=FuzzParseConfig -fuzztime=$(FUZZTIME) ./engine/model/
	$(GO) test -run='^$$' -fuzz=FuzzParseGolden -fuzztime=$(FUZZTIME) ./engine/sample/
	$(GO) test -run='^$$' -fuzz=FuzzAdapterLines -fuzztime=$(FUZZTIME) ./engine/backend/exec/

golden:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden
	$(PYTHON) tools/gen-golden models --tier committed --out golden
	$(PYTHON) tools/gen-golden batches --tier committed --out golden
	$(PYTHON) tools/gen-golden sampling --out golden

# Full-scale sets (tools/gen-golden/README.md, "Full tier"): 7.3 GB of kernel cases, nine model
# sets with synthetic weights (Phi-3-mini-4k needs ~17 GB of RAM) and two batch sets, 35 GB in all.
# Incremental: a set whose key (generator sources, spec, seed, library versions) is unchanged and
# whose files verify is reused, so a second run takes seconds. SETS=pattern[,pattern] builds only
# the sets those names or labels match (shell globs: an op, a model or batch set, a family,
# kernels/models/batches, f16/bf16), e.g. `make golden-full SETS=rope,qwen2.5-0.5b`; FORCE=1
# rebuilds them regardless of their keys.
SETS        ?=
FORCE       ?=
FULL_FLAGS  := $(if $(SETS),--sets '$(SETS)') $(if $(FORCE),--force)

golden-full:
	$(if $(SETS),@$(PYTHON) tools/gen-golden list --tier full --sets '$(SETS)' > /dev/null)
	$(PYTHON) tools/gen-golden kernels --tier full --out golden/.cache $(FULL_FLAGS)
	$(PYTHON) tools/gen-golden models --tier full --out golden/.cache $(FULL_FLAGS)
	$(PYTHON) tools/gen-golden batches --tier full --out golden/.cache $(FULL_FLAGS)

# The key of the whole full tier: changes exactly when `make golden-full` would rebuild a set.
# A CI runner caches golden/.cache under it (tools/gen-golden/README.md, "Caching the full tier").
golden-full-key:
	@$(PYTHON) tools/gen-golden key --tier full

# Regenerates into a temporary directory and fails if any committed byte differs.
golden-check:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden --check
	$(PYTHON) tools/gen-golden models --tier committed --out golden --check
	$(PYTHON) tools/gen-golden batches --tier committed --out golden --check
	$(PYTHON) tools/gen-golden sampling --out golden --check

golden-verify:
	$(GO) run ./cmd/touchstone golden verify

cuda:
	$(MAKE) -C cuda CUDA_ARCH=$(CUDA_ARCH) BUILD=$(CUDA_BUILD)

# The C ABI's own tests, straight against the library: argument checks (no GPU needed) and
# the sticky-error, graph-capture and workspace-growth contracts (on a GPU; exit 2 = no device,
# reported as not run), and devices (every call on the library's device from any thread; two
# GPUs, else not run; it calls the CUDA runtime itself, found beside nvcc as cuda/Makefile does).
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(abspath $(dir $(realpath $(shell command -v $(NVCC) 2>/dev/null || echo $(NVCC))))/..)
cuda-test: cuda
	@for t in abi_args sticky graph workspace deadline; do \
	  $(CC) -std=c11 -Wall -Wextra -Werror -Icuda/include cuda/tests/$$t.c -Lcuda/build -ltouchstone_cuda \
	    -Wl,-rpath,$(CURDIR)/cuda/build -lm -o cuda/build/$$t || exit 1; \
	done
	$(CC) -std=c11 -Wall -Wextra -Werror -Icuda/include -I$(CUDA_HOME)/include cuda/tests/devices.c -Lcuda/build \
	  -ltouchstone_cuda -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcudart -Wl,-rpath,$(CURDIR)/cuda/build \
	  -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib -lpthread -o cuda/build/devices
	cuda/build/abi_args
	cuda/build/sticky; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]
	cuda/build/graph; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]
	cuda/build/workspace; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]
	cuda/build/deadline; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]
	cuda/build/devices; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]

# The DRAM bytes each fused op and its unfused composition move at decode shapes, counted by
# Nsight Compute (docs/PERF.md, "Bytes moved"); a GPU host with ncu.
fused-bytes: cuda
	$(CC) -std=c11 -Wall -Wextra -Werror -Icuda/include cuda/tests/fused_bytes.c -Lcuda/build -ltouchstone_cuda \
	  -Wl,-rpath,$(CURDIR)/cuda/build -o cuda/build/fused_bytes
	ncu --csv --page raw --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
	  cuda/build/fused_bytes

# Everything a GPU host without Go needs: built here (cgo + dlopen, no CUDA at build time),
# run there with `make cuda && dist/run`.
bundle:
	@rm -rf dist && mkdir -p dist/bin
	@for s in $(SUITES); do \
	  n=$$(basename $$s); echo "go test -c ./$$s"; \
	  $(GO) test -c -ldflags="-s -w" -o dist/bin/$$n.test ./$$s || exit 1; \
	  mkdir -p dist/suites/$$n && ln -s ../../bin/$$n.test dist/suites/$$n/$$n.test; \
	done
	$(GO) build -ldflags="-s -w" -o dist/bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
	$(GO) build -ldflags="-s -w" -o dist/bin/touchstone ./cmd/touchstone
	$(GO) build -ldflags="-s -w" -o dist/bin/mutate ./tools/mutate
	$(GO) build -ldflags="-s -w" -o dist/bin/reportcheck ./tools/bundle/reportcheck
	$(GO) build -ldflags="-s -w" -o dist/bin/resume ./tools/bundle/resume
	cp tools/bundle/run dist/run
	cp tools/bundle/multigpu dist/multigpu

# The bundle run on the CPU backend, its merged reports checked: every suite in report.json and
# junit.xml by its name, with the specs it ran (a few specs of each suite).
bundle-check: bundle
	@rm -rf build/bundle-check
	TOUCHSTONE_BACKEND=cpu TOUCHSTONE_REPORTS=$(CURDIR)/build/bundle-check dist/run --no-color --succinct \
	  --label-filter='op:residual_add || (model:qwen2-tiny && !tightness) || (sampling && !model)'
	$(GO) run ./tools/bundle/reportcheck -reports build/bundle-check \
	  -suite "Kernel conformance" -suite "Model conformance" -suite "Seeded sampling"
	@$(MAKE) --no-print-directory bundle-devices-check
	@$(MAKE) --no-print-directory bundle-hang-check

# ginkgo -p over two devices, through the bundle's ginkgo and kernel suite, on the fake library
# (engine/backend/cuda/testdata/fakets.c, reporting two devices): each process must open its own
# device, (process-1) mod 2, as its backend report entry says. The same check on a GPU host:
# dist/run -p --procs=2, then reportcheck -devices 2 (README, "Several GPUs").
bundle-devices-check:
	@rm -rf build/bundle-devices && mkdir -p build/bundle-devices/fake
	$(CC) -shared -fPIC -O1 -Wall -Werror -Icuda/include -o build/bundle-devices/fake/libtouchstone_cuda.so \
	  engine/backend/cuda/testdata/fakets.c -lm
	TOUCHSTONE_BACKEND=cuda TOUCHSTONE_CUDA_LIB=$(CURDIR)/build/bundle-devices/fake/libtouchstone_cuda.so FAKETS_DEVICES=2 \
	  TOUCHSTONE_GOLDEN=$(CURDIR)/golden TOUCHSTONE_UNSUPPORTED=fail \
	  dist/bin/ginkgo -p --procs=2 --no-color --succinct --fail-on-empty --label-filter='op:residual_add && !device-memory' \
	  --json-report=report.json --junit-report=junit.xml --output-dir=build/bundle-devices dist/suites/kernels/kernels.test
	$(GO) run ./tools/bundle/reportcheck -reports build/bundle-devices -suite "Kernel conformance" -devices 2

# A kernel that never finishes costs its own spec, not the run: with the fake library the 6th
# download never returns, the backend gives up at the deadline (1 s) plus its grace, the spec
# fails as HANG and the suite aborts, and dist/run restarts it without the specs already
# reported; the merged reports must hold every residual_add spec, exactly one of them HANG.
bundle-hang-check:
	@rm -rf build/bundle-hang && mkdir -p build/bundle-hang/fake build/bundle-hang/dist/suites
	$(CC) -shared -fPIC -O1 -Wall -Werror -Icuda/include -o build/bundle-hang/fake/libtouchstone_cuda.so \
	  engine/backend/cuda/testdata/fakets.c -lm
	cp dist/run build/bundle-hang/dist/run && ln -s $(CURDIR)/dist/bin build/bundle-hang/dist/bin && \
	  ln -s $(CURDIR)/dist/suites/kernels build/bundle-hang/dist/suites/kernels
	@# a download that never returns (the backend's watchdog gives up on it), then a launch that
	@# never returns (the monitor interrupts the suite, which aborts with the hang after the grace period)
	@for hang in ts_copy_to_host:6 ts_residual_add:4; do \
	  name=$${hang%%:*}; \
	  TOUCHSTONE_BACKEND=cuda TOUCHSTONE_CUDA_LIB=$(CURDIR)/build/bundle-hang/fake/libtouchstone_cuda.so \
	    TOUCHSTONE_DEADLINE=1 FAKETS_HANG=$$hang FAKETS_HANG_ONCE=$(CURDIR)/build/bundle-hang/hung-$$name \
	    TOUCHSTONE_GOLDEN=$(CURDIR)/golden TOUCHSTONE_REPORTS=$(CURDIR)/build/bundle-hang/reports-$$name \
	    build/bundle-hang/dist/run --no-color --succinct --label-filter='op:residual_add && !device-memory'; \
	  st=$$?; [ $$st -eq 1 ] || { echo "bundle-hang-check: $$hang: dist/run exited $$st, want 1 (one spec failed as HANG)"; exit 1; }; \
	  $(GO) run ./tools/bundle/reportcheck -reports build/bundle-hang/reports-$$name -suite "Kernel conformance" -hangs 1 || exit 1; \
	done

# dist/ as one compressed artifact (about a third of its size) for GPU runners that receive
# an upload: unpack with `tar -xJf build/dist.tar.xz` in the repository root.
bundle-archive: bundle
	@mkdir -p build
	tar -cf - dist | xz -9e -T0 > build/dist.tar.xz
	@ls -l build/dist.tar.xz

sanitize:
	dist/run sanitize

# Mutation testing (tools/mutate): each mutant of the catalogue is a realistic bug planted in a
# copy of the sources; the run rebuilds, runs the committed tier of the suites meant to catch
# it and fails when a non-equivalent mutant survives. Reports: build/reports/mutate-*.{md,json}.
# MUTATE_FLAGS passes more flags, e.g. MUTATE_FLAGS='-only go-rope-.*'.
MUTATE_JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
MUTATE_FLAGS ?=
NVCC_CHECK   ?= build/cuda-toolchain/nvidia/cu13/bin/nvcc

mutate: mutate-go

# Go side, on the CPU backend: a few minutes on 2 cores (CI runs it after make test).
mutate-go:
	$(GO) run ./tools/mutate -side go -j $(MUTATE_JOBS) \
	  -markdown $(REPORTS)/mutate-go.md -json $(REPORTS)/mutate-go.json $(MUTATE_FLAGS)

# CUDA side, on a GPU host without Go: the bundled binary builds each mutant's library with
# make -C cuda and runs dist/bin/*.test against it (docs/gpu-runbook.md, "Mutation testing (CUDA side)").
mutate-cuda:
	dist/bin/mutate -side cuda \
	  -markdown $(REPORTS)/mutate-cuda.md -json $(REPORTS)/mutate-cuda.json $(MUTATE_FLAGS)

# Without a GPU: every CUDA mutant applies and compiles (the nvcc of .ci/nvcc-check).
mutate-cuda-check:
	@[ -x $(NVCC_CHECK) ] || bash .ci/nvcc-check
	$(GO) run ./tools/mutate -side cuda -compile-only -nvcc $(abspath $(NVCC_CHECK)) -j $(MUTATE_JOBS) $(MUTATE_FLAGS)

clean:
	rm -rf build dist
	$(MAKE) -C cuda clean 2>/dev/null || true
