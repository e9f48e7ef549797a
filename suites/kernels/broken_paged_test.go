package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of paged decode: each variant reads the paged cache the way paged kernels go wrong
// at page boundaries (the block table read one entry off, the last partial page dropped, one
// slot past the length read); the committed cases must reject each. The variants corrupt what
// such a kernel would effectively read (the table, the lengths), then run the correct CPU op.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken paged decode",
		func(bug pagedBug, mustCatch string) {
			expectRejectedBy("attention_decode_paged", setsOf("attention_decode_paged", "committed"), brokenPaged{cpu.New(), bug}, mustCatch)
		},
		Entry("attention_decode_paged: each position's page read from the next table entry", pagedBug{tableOffByOne: true}, "qwen2.5-0.5b_bs16_lens1-32-45"),
		Entry("attention_decode_paged: a sequence's last partial page dropped", pagedBug{dropLastPartial: true}, "gqa4_d128_bs16_len515"),
		Entry("attention_decode_paged: one slot past cache_lens read", pagedBug{pastLength: true}, "phi2-d80-gqa2"),
	)
	DescribeTable("rejects a deliberately broken paged prefill",
		func(bug pagedBug, mustCatch string) {
			expectRejectedBy("attention_prefill_paged", setsOf("attention_prefill_paged", "committed"), brokenPaged{cpu.New(), bug}, mustCatch)
		},
		Entry("attention_prefill_paged: the causal mask without the prefix offset (query i sees keys 0..i)", pagedBug{noPrefixOffset: true}, "gqa4_d64_bs16_pre40-0-18_new1-24-1"),
		Entry("attention_prefill_paged: each position's page read from the next table entry", pagedBug{tableOffByOne: true}, "mha_d128_bs8_b4_pre0-13-6-21_new5-1-9-4_mb5"),
		Entry("attention_prefill_paged: a sequence's last partial page dropped", pagedBug{dropLastPartial: true}, "gqa4_d128_bs16_pre21_new30"),
	)
	It("accepts the paged variants' host code without a bug", func() {
		for _, op := range []string{"attention_decode_paged", "attention_prefill_paged"} {
			sets := setsOf(op, "committed")
			Expect(sets).NotTo(BeEmpty())
			for _, s := range sets {
				verdicts, err := conformance.Check(brokenPaged{cpu.New(), pagedBug{}}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		}
	})
})

// pagedBug says how a broken paged decode kernel misbehaves; the zero value is the contract.
type pagedBug struct {
	tableOffByOne, dropLastPartial, pastLength bool
	noPrefixOffset                             bool
}

type brokenPaged struct {
	*cpu.Backend
	bug pagedBug
}

func (k brokenPaged) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg); err != nil {
		return err
	}
	blockTable, cacheLens, free, err := k.misread(kCache, blockTable, cacheLens, nil)
	if err != nil {
		return err
	}
	defer free()
	return k.Backend.AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg)
}

func (k brokenPaged) AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg); err != nil {
		return err
	}
	st, err := k.Download(qStarts)
	if err != nil {
		return err
	}
	qLens := make([]int32, len(st.I32)-1)
	for b := range qLens {
		qLens[b] = st.I32[b+1] - st.I32[b]
	}
	blockTable, kvLens, free, err := k.misread(kCache, blockTable, kvLens, qLens)
	if err != nil {
		return err
	}
	defer free()
	return k.Backend.AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg)
}

// misread returns the block table and lengths as the bug reads them (and a func that frees any
// copies): qLens are a prefill's new-token counts (nil for decode), which no length may drop
// under.
func (k brokenPaged) misread(kCache, blockTable, lens backend.Buffer, qLens []int32) (backend.Buffer, backend.Buffer, func(), error) {
	var frees []func()
	free := func() {
		for _, f := range frees {
			f()
		}
	}
	page, width := kCache.Shape()[1], blockTable.Shape()[1]
	lt, err := k.Download(lens)
	if err != nil {
		return nil, nil, free, err
	}
	if k.bug.tableOffByOne {
		// Entry i of a sequence read where entry i - 1 belongs (wrapping within the pages its
		// length reaches: a kernel indexing the table with p / block_size + 1).
		if blockTable, err = mutated(k, blockTable, func(t *tensor.Tensor) {
			for b, n := range lt.I32 {
				used := (int(n) + page - 1) / page
				row := t.I32[b*width : b*width+used]
				first := row[0]
				copy(row, row[1:])
				row[used-1] = first
			}
		}); err != nil {
			return nil, nil, free, err
		}
		frees = append(frees, blockTable.Free)
	}
	if k.bug.dropLastPartial || k.bug.pastLength || k.bug.noPrefixOffset {
		if lens, err = mutated(k, lens, func(t *tensor.Tensor) {
			for i, n := range t.I32 {
				part, floor := int(n)%page, int32(1)
				if qLens != nil {
					floor = qLens[i]
				}
				switch {
				case k.bug.noPrefixOffset:
					// the new tokens at positions 0.. (query i sees keys 0..i): the length
					// a kernel that forgets the prefix attends over
					t.I32[i] = qLens[i]
				case k.bug.dropLastPartial && part != 0 && n-int32(part) >= max(floor, 1):
					t.I32[i] = n - int32(part)
				case k.bug.pastLength && part != 0:
					// the next slot of the same page: a position a correct kernel never reads
					t.I32[i] = n + 1
				}
			}
		}); err != nil {
			return nil, nil, free, err
		}
		frees = append(frees, lens.Free)
	}
	return blockTable, lens, free, nil
}
