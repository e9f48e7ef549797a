# touchstone — conformance harness for LLM inference kernels.
#
#   make check        conformance table on the best available backend (the CPU without a GPU)
#   make test         vet, formatting, unit tests and every Ginkgo suite on the CPU backend (CI)
#   make golden       regenerate the committed golden sets (needs tools/gen-golden/requirements.txt)
#   make golden-full  generate the full-scale tier into golden/.cache (GPU hosts)
#   make cuda         build cuda/build/libtouchstone_cuda.so with nvcc (CUDA_ARCH ?= sm_90)
#   make cuda-test    the C ABI's bad-argument tests against that library
#   make bundle       precompiled suites + ginkgo + touchstone + runner in dist/ (for GPU hosts)
#   make bundle-archive   the same as build/dist.tar.xz
#   make sanitize     compute-sanitizer over the kernel suite (GPU host, after cuda and bundle)

SHELL        := bash
GO           ?= go
PYTHON       ?= python3
GINKGO       := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
REPORTS      := build/reports
GINKGO_FLAGS ?= --randomize-all --fail-on-pending --fail-on-empty --keep-going \
                --junit-report=junit.xml --json-report=report.json --output-dir=$(REPORTS)
FUZZTIME     ?= 20s

.PHONY: check test vet fmt-check unit suites fuzz golden golden-full golden-check golden-verify \
        cuda cuda-test bundle bundle-archive sanitize clean

CUDA_ARCH    ?= sm_90
SUITES       := $(patsubst %/,%,$(dir $(wildcard suites/*/*_suite_test.go)))

check:
	$(GO) run ./cmd/touchstone check

test: vet fmt-check unit suites

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test ./engine/... ./cmd/...

suites:
	@mkdir -p $(REPORTS)
	TOUCHSTONE_BACKEND=$${TOUCHSTONE_BACKEND:-cpu} $(GINKGO) -r $(GINKGO_FLAGS) suites

# Short coverage-guided runs of every parser of outside data.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeNPY -fuzztime=$(FUZZTIME) ./engine/tensor/
	$(GO) test -run='^$$' -fuzz=FuzzParseManifest -fuzztime=$(FUZZTIME) ./engine/golden/
	$(GO) test -run='^$$' -fuzz=FuzzParseTolerances -fuzztime=$(FUZZTIME) ./engine/compare/
	$(GO) test -run='^$$' -fuzz=FuzzParseHeader -fuzztime=$(FUZZTIME) ./engine/model/safetensors/
	$(GO) test -run='^$$' -fuzz=FuzzOpen -fuzztime=$(FUZZTIME) ./engine/model/safetensors/
	$(GO) test -run='^$$' -fuzz=FuzzParseConfig -fuzztime=$(FUZZTIME) ./engine/model/
	$(GO) test -run='^$$' -fuzz=FuzzParseGolden -fuzztime=$(FUZZTIME) ./engine/sample/

golden:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden
	$(PYTHON) tools/gen-golden models --tier committed --out golden
	$(PYTHON) tools/gen-golden sampling --out golden

# Full-scale sets: ~2 GB of kernel cases, and Qwen2.5-0.5B, Phi-3-mini-4k (~17 GB of RAM to
# generate) and GPT-2 124M model sets with synthetic weights.
golden-full:
	$(PYTHON) tools/gen-golden kernels --tier full --out golden/.cache
	$(PYTHON) tools/gen-golden models --tier full --out golden/.cache

# Regenerates into a temporary directory and fails if any committed byte differs.
golden-check:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden --check
	$(PYTHON) tools/gen-golden models --tier committed --out golden --check
	$(PYTHON) tools/gen-golden sampling --out golden --check

golden-verify:
	$(GO) run ./cmd/touchstone golden verify

cuda:
	$(MAKE) -C cuda CUDA_ARCH=$(CUDA_ARCH)

# The C ABI's own tests, straight against the library: argument checks (no GPU needed) and
# the sticky-error and graph-capture contracts (on a GPU; exit 2 = no device, reported as not run).
cuda-test: cuda
	@for t in abi_args sticky graph; do \
	  $(CC) -std=c11 -Wall -Wextra -Werror -Icuda/include cuda/tests/$$t.c -Lcuda/build -ltouchstone_cuda \
	    -Wl,-rpath,$(CURDIR)/cuda/build -lm -o cuda/build/$$t || exit 1; \
	done
	cuda/build/abi_args
	cuda/build/sticky; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]
	cuda/build/graph; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 2 ]

# Everything a GPU host without Go needs: built here (cgo + dlopen, no CUDA at build time),
# run there with `make cuda && dist/run`.
bundle:
	@rm -rf dist && mkdir -p dist/bin
	@for s in $(SUITES); do \
	  echo "go test -c ./$$s"; \
	  $(GO) test -c -ldflags="-s -w" -o dist/bin/$$(basename $$s).test ./$$s || exit 1; \
	done
	$(GO) build -ldflags="-s -w" -o dist/bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
	$(GO) build -ldflags="-s -w" -o dist/bin/touchstone ./cmd/touchstone
	cp tools/bundle/run dist/run

# dist/ as one compressed artifact (about a third of its size) for GPU runners that receive
# an upload: unpack with `tar -xJf build/dist.tar.xz` in the repository root.
bundle-archive: bundle
	@mkdir -p build
	tar -cJf build/dist.tar.xz dist
	@ls -l build/dist.tar.xz

sanitize:
	dist/run sanitize

clean:
	rm -rf build dist
	$(MAKE) -C cuda clean 2>/dev/null || true
