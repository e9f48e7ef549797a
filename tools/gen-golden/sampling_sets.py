"""Golden sampling sets (docs/golden-format.md, "Sampling sets"): logits and the tokens that
docs/sampling.md gives for them.

One set per vocabulary size, golden/sampling/<set>/ with manifest.json + logits.npy. logits is fp32
[R, V] with R = 4 rows of different character:
  row 0  realistic: N(0, 3^2);
  row 1  exact ties: values quantised to nine levels in [-4, 0], the top level a mix of -0.0 and
         +0.0 whose lowest index is -0.0 and the next +0.0 (greedy must pick the -0.0: the two are
         equal, and the lower index wins);
  row 2  -inf: a large share of -inf (or, in one set, only a handful of finite values, two of them
         equal), so top-k often reaches past the finite candidates;
  row 3  peaked: N(0, 1) with two dominant logits, 20 (at the last index) and 18.5.

Each case is (row, temperature, top_k, top_p, seed, step) and is sampled as row `row` of the whole
[R, V] batch: the Philox counter is (step, row), so a backend can sample every row in one call
with the case's config and compare row `row`'s token. Ordinary cases keep a margin of at least
MIN_MARGIN (1000x the suite's epsilon): when a draw lands closer than that to a boundary by
chance, the case takes the next step until it does not. A few deliberate near-ties sit below the
epsilon and are flagged.

The logits are drawn like every kernel input: float64 torch draws from the set's seed, rounded to
fp32. The sampling itself is sampling.py (numpy, host-independent bits).
"""

import hashlib
import os
import re
import shutil

import numpy as np
import torch

import sampling
from common import manifest, seeds
from sampling import f32

ROWS = 4
EPSILON = 1e-9      # docs/sampling.md: the suite demands the exact token above this margin
MIN_MARGIN = 1e-6   # what the generator keeps every ordinary case above
U64_MAX = 2**64 - 1
STREAM_LEN = 64

# (set name, vocab, row-2 variant): ("share", fraction of -inf) or ("handful", finite count)
SETS = [
    ("qwen2.5-v151936", 151936, ("share", 0.6)),
    ("phi3-v32064", 32064, ("handful", 6)),
    ("gpt2-v50257", 50257, ("share", 0.9)),
]
BY_NAME = {s[0]: s for s in SETS}


def set_seed(name):
    return seeds.case_seed("sampling", name)


def case_seed64(set_name, case_name):
    """A case's uint64 RNG key: sha256("<master>:sampling/<set>/<case>")[:8], big-endian, so both
    key words (seed mod 2^32 and seed >> 32) are exercised."""
    text = "%d:sampling/%s/%s" % (seeds.MASTER_SEED, set_name, case_name)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


# ---------------------------------------------------------------------------------------------
# Logits


def make_logits(name):
    """The [ROWS, V] fp32 logits of a set."""
    _, V, row2 = BY_NAME[name]
    r = seeds.Draw(set_seed(name))
    rows = []
    # 0: realistic
    rows.append((3.0 * r.randn((V,))).to(torch.float32))
    # 1: ties. -|N(0, 1.5^2)| rounded to halves, clipped to [-4, 0]: levels 0, -0.5, ..., -4, the
    # top one about 13% of the row. Zeros get a random sign, then the first is forced to -0.0 and
    # the second to +0.0, so "+0.0 > -0.0" would change the greedy token.
    q = -torch.clamp(torch.round(1.5 * r.randn((V,)).abs() * 2.0) / 2.0, max=4.0)
    sign = torch.where(r.rand((V,)) < 0.5, -1.0, 1.0).to(torch.float64)
    q = torch.where(q == 0, sign * 0.0, q).to(torch.float32)
    zeros = torch.nonzero(q == 0).flatten()
    assert zeros.numel() >= 8, "ties row needs a populated top level"
    q[zeros[0]], q[zeros[1]] = -0.0, 0.0
    rows.append(q)
    # 2: -inf
    base = 3.0 * r.randn((V,))
    kind, amount = row2
    if kind == "share":
        x = torch.where(r.rand((V,)) < amount, -torch.inf, base).to(torch.float32)
    else:
        keep = torch.randperm(V, generator=r.g)[:amount]
        x = torch.full((V,), -torch.inf, dtype=torch.float32)
        x[keep] = base[keep].to(torch.float32)
        x[keep[1]] = x[keep[0]]  # an exact tie among the few
    x[0] = -torch.inf  # index 0 excluded: an argmax that starts from logits[0] must not win
    rows.append(x)
    # 3: peaked
    x = r.randn((V,)).to(torch.float32)
    second = int(r.randint(1, V - 1, (1,))[0])
    x[V - 1], x[second] = 20.0, 18.5
    rows.append(x)
    out = torch.stack(rows)
    assert out.dtype == torch.float32 and out.shape == (ROWS, V)
    return out


# ---------------------------------------------------------------------------------------------
# The case table

T_LOW, T_MID, T_HIGH, T_HUGE = f32(1e-3), 1.0, 100.0, 1e4
P_TINY = f32(1e-6)


def case_table(set_name, V, gen_seed):
    """[(name, row, temperature, top_k, top_p, seed, step, fixed)] of ordinary cases.
    temperature and top_p are fp32 values. A case given no seed gets one derived from its name
    and may move to a later step (ordinary_case); one given a seed keeps its seed and step
    (extreme values, and gen_seed's consecutive steps of one generation and one counter across
    the rows)."""
    c = []

    def add(name, row, t, k, p, seed=None, step=0):
        assert float(np.float32(t)) == t and float(np.float32(p)) == p, name
        fixed = seed is not None
        c.append((name, row, t, k, p, case_seed64(set_name, name) if seed is None else seed,
                  step, fixed))

    R = range(ROWS)
    # greedy: ties, -0.0 / +0.0, -inf rows; top_k, top_p, seed and step are checked, not used
    for r in R:
        add("greedy-r%d" % r, r, 0.0, 0, 1.0)
    add("greedy-k5-p0.5-r1", 1, 0.0, 5, 0.5, seed=U64_MAX, step=U64_MAX)
    add("greedy-k40-p0.9-r2", 2, 0.0, 40, f32(0.9), seed=2**32 + 5, step=7)
    # top_k 1 is greedy through the sampling path (n = 1, no decision)
    for r in R:
        add("k1-r%d" % r, r, T_MID, 1, 1.0, step=r)
    # top_k at and beyond the vocabulary: every token a candidate
    add("k-vocab-r0", 0, T_MID, V, 1.0, step=11)
    add("k-vocab1-r2", 2, T_MID, V + 1, 1.0, step=12)
    add("k-int32max-r1", 1, f32(0.7), 2**31 - 1, 1.0, step=13)
    # plain temperature 1, no top-k / top-p
    for r in R:
        add("t1-r%d" % r, r, T_MID, 0, 1.0, step=100 + r)
    # a nucleus of one
    for r in R:
        add("p1e-6-r%d" % r, r, T_MID, 0, P_TINY, step=200 + r)
    # top_p 0.9 and 0.5
    for p in (0.9, 0.5):
        for r in R:
            add("p%g-r%d" % (p, r), r, T_MID, 0, f32(p), step=300 + r)
    # temperature extremes
    for t, tag in ((T_LOW, "t1e-3"), (T_HIGH, "t100"), (T_HUGE, "t1e4")):
        for r in R:
            add("%s-r%d" % (tag, r), r, t, 0, 1.0, step=400 + r)
    # top-k and top-p together (the first is the model sets' config)
    for t, k, p in ((0.8, 40, 0.95), (0.7, 50, 0.9), (1.5, 10, 0.5), (1.0, 1000, 0.99)):
        for r in R:
            add("t%g-k%d-p%g-r%d" % (t, k, p, r), r, f32(t), k, f32(p), step=500 + r)
    # one seed, consecutive steps (a generation), and one (seed, step) across all four rows
    for s in range(8):
        add("gen-step%d-r0" % s, 0, f32(0.8), 40, f32(0.95), seed=gen_seed, step=s)
    for r in range(1, ROWS):  # with gen-step3-r0, one whole batch
        add("batch-step3-r%d" % r, r, f32(0.8), 40, f32(0.95), seed=gen_seed, step=3)
    # extreme seeds and steps: both key words, both counter words, the 2^32 carry
    add("seed0-step0-r0", 0, T_MID, 0, 1.0, seed=0, step=0)
    add("seed4294967295-step4294967295-r3", 3, f32(0.8), 40, f32(0.95), seed=2**32 - 1,
        step=2**32 - 1)
    add("seed4294967301-step4294967301-r0", 0, T_MID, 0, f32(0.9), seed=2**32 + 5,
        step=2**32 + 5)
    add("seed4294967301-step4294967296-r0", 0, f32(0.8), 40, f32(0.95), seed=2**32 + 5,
        step=2**32)
    add("seed18446744073709551615-step18446744073709551615-k40-r2", 2, T_MID, 40, 1.0,
        seed=U64_MAX, step=U64_MAX)
    add("seed18446744073709551615-step0-r0", 0, f32(0.8), 40, f32(0.95), seed=U64_MAX, step=0)
    # the -inf row: top_k beyond its finite values, and a nucleus over them
    add("k100-r2", 2, T_MID, 100, 1.0, step=600)
    add("t2-k20-p0.8-r2", 2, 2.0, 20, f32(0.8), step=601)
    return c


# ---------------------------------------------------------------------------------------------
# Building cases


def _record(name, row, t, k, p, seed, step, res, near_tie):
    return {
        "name": name, "row": row, "temperature": t, "top_k": k, "top_p": p,
        "seed": seed, "step": step, "token": res.token,
        "u": res.u, "philox": None if res.philox is None else list(res.philox),
        "candidates": res.n, "kept": res.kept, "margin": res.margin,
        "near_tie": near_tie, "alternatives": list(res.alternatives) if near_tie else [],
    }


class FixedCaseError(RuntimeError):
    pass


def ordinary_case(logits, name, row, t, k, p, seed, step, fixed):
    """Sample one case, keeping its margins at MIN_MARGIN or more. A draw that lands closer than
    that to a boundary by chance takes the next step. The top-p margin does not depend on the
    step (nor is it part of the case margin when n' == 1, by the spec's rule), and on the ties
    row, where hundreds of equal small weights sit next to each other, the threshold p * S often
    falls within 1e-6 of a prefix sum: top_p then moves down one fp32 ulp at a time until it
    does not (the case records the value it used)."""
    x = logits[row]
    for _ in range(10000):
        res = sampling.sample_row(x, t, k, p, seed, step, row)
        if res.topp_margin is not None and res.topp_margin < MIN_MARGIN:
            p = float(np.nextafter(np.float32(p), np.float32(0)))
            continue
        if res.margin is None or res.margin >= MIN_MARGIN:
            return _record(name, row, t, k, p, seed, step, res, False)
        if fixed:
            raise FixedCaseError("%s: margin %.3g < %g at its fixed seed and step"
                                 % (name, res.margin, MIN_MARGIN))
        step = (step + 1) % 2**64
    raise RuntimeError("%s: no step and top_p with margins >= %g" % (name, MIN_MARGIN))


def _f32_bits(v):
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def _f32_from_bits(b):
    return float(np.array(b, dtype=np.uint32).view(np.float32))


def draw_near_tie(logits, name, row, k, seed, step, u_ok, t_lo=1e-3, t_hi=1e4, tries=20000):
    """A deliberate near-tie of the draw: the temperature (an fp32 value) at which the target
    u * S' meets the prefix sum C_0, i.e. the edge between ranks 0 and 1 (top_p 1).

    For a fixed u the chosen rank grows with the temperature (the tempered mass of the top ranks
    shrinks), so a bisection over fp32 bit patterns finds the two adjacent temperatures where
    rank 0 turns into rank 1; the one nearer the edge is kept if its margin is below EPSILON,
    else the next step (a new u) is tried. u_ok(u) picks the u worth trying: F_0 = C_0/S' spans
    (1/n, 1), and the gap between neighbouring fp32 temperatures, in units of F_0, shrinks with
    F_0 (so a small u makes a margin below 1e-9 likely on a full-vocabulary row)."""
    x = logits[row]
    lo_bits, hi_bits = _f32_bits(t_lo), _f32_bits(t_hi)  # positive floats order like their bits

    def rank_at(bits):
        return sampling.sample_row(x, _f32_from_bits(bits), k, 1.0, seed, step, row).rank

    for _ in range(tries):
        u = sampling.uniform(seed, step, row)
        if u_ok(u) and rank_at(lo_bits) == 0 and rank_at(hi_bits) > 0:
            a, b = lo_bits, hi_bits
            while b - a > 1:
                mid = (a + b) // 2
                if rank_at(mid) == 0:
                    a = mid
                else:
                    b = mid
            best = None
            for bits in (a, b):
                t = _f32_from_bits(bits)
                res = sampling.sample_row(x, t, k, 1.0, seed, step, row)
                if res.boundary == "draw" and res.margin < EPSILON and \
                        (best is None or res.margin < best[1].margin):
                    best = (t, res)
            if best is not None:
                t, res = best
                return _record(name, row, t, k, 1.0, seed, step, res, True)
        step = (step + 1) % 2**64
    raise RuntimeError("%s: no near-tie found" % name)


def near_tie_cases(set_name, logits):
    """Three deliberate near-ties, margins below EPSILON:
      - top-p exactly on a prefix sum: the ties row's top level (weights exactly 1) with top_k 4
        and top_p 0.5 puts p * S = 2 = C_1, margin 0; either nucleus (2 or 3) is acceptable;
      - the draw on the edge between ranks 0 and 1 of the peaked row, top_k 2;
      - the same on the realistic row over the whole vocabulary."""
    out = []
    name = "near-tie-topp-k4-p0.5-r1"
    seed = case_seed64(set_name, name)
    step = 0
    while True:  # a step whose two outcomes differ (u in [1/3, 1/2) or [2/3, 1))
        res = sampling.sample_row(logits[1], 1.0, 4, 0.5, seed, step, 1)
        assert res.boundary == "top_p" and res.margin == 0.0 and res.kept == 2, res
        if res.alternatives[0] != res.alternatives[1]:
            break
        step += 1
    out.append(_record(name, 1, 1.0, 4, 0.5, seed, step, res, True))
    name = "near-tie-draw-k2-r3"
    out.append(draw_near_tie(logits, name, 3, 2, case_seed64(set_name, name), 0,
                             u_ok=lambda u: 0.55 < u < 0.95))
    name = "near-tie-draw-r0"
    out.append(draw_near_tie(logits, name, 0, 0, case_seed64(set_name, name), 0,
                             u_ok=lambda u: 1e-3 < u < 5e-3))
    return out


def streams(set_index):
    """Raw Philox streams (ts_philox): entry i is the output for counter (step + i mod 2^64, row).
    Every set has seed 0 / step 0 / row 0 (entry 0 is the first Random123 known answer), a stream
    across the 2^32 step carry and one keyed by seed 2^64 - 1; the other values differ per set
    (the last set's crosses the 2^64 wrap)."""
    specs = [
        [(0, 0, 0), (0x0123456789ABCDEF, 2**32 - 32, 1), (U64_MAX, 2**40 + 7, 3)],
        [(0, 0, 0), (2**32 + 5, 2**32 - 1, 0xFFFFFFFF), (U64_MAX, 12345, 2)],
        [(0, 0, 0), (2**32 - 1, 3 * 2**32 - 40, 0), (U64_MAX, 2**64 - 32, 7)],
    ][set_index]
    return [{"seed": s, "step": st, "row": r, "n": STREAM_LEN,
             "words": [list(w) for w in sampling.stream(s, st, r, STREAM_LEN)]}
            for s, st, r in specs]


def build(name):
    """(seed, params, logits tensor) of one set."""
    _, V, _ = BY_NAME[name]
    logits = make_logits(name)
    x = logits.numpy()
    # The generation cases keep their steps (they are consecutive), so their seed is the first
    # of a deterministic sequence under which every one of them keeps its margin.
    for i in range(100):
        gen_seed = case_seed64(name, "generation-%d" % i)
        try:
            cases = [ordinary_case(x, *row) for row in case_table(name, V, gen_seed)]
            break
        except FixedCaseError:
            continue
    else:
        raise RuntimeError("%s: no generation seed keeps every fixed case's margin" % name)
    cases += near_tie_cases(name, x)
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case name"
    for c in cases:
        assert re.fullmatch(r"[a-z0-9._-]+", c["name"]), c["name"]
    params = {"vocab": V, "epsilon": EPSILON, "cases": cases,
              "streams": streams([s[0] for s in SETS].index(name))}
    return set_seed(name), params, logits


def generate(out, names=None, quiet=False, log=print):
    """Write every set under out/sampling/<set>/ and delete directories there that no set owns.
    Returns (sets, bytes)."""
    names = names or [s[0] for s in SETS]
    root = os.path.join(out, "sampling")
    n_sets = n_bytes = 0
    for name in names:
        seed, params, logits = build(name)
        files, size = manifest.write_sampling_set(
            os.path.join(root, name), case=name, tier="committed", seed=seed, params=params,
            logits=logits)
        n_sets += 1
        n_bytes += size
        if not quiet:
            nt = sum(c["near_tie"] for c in params["cases"])
            log("%-50s %2d files %11d bytes  %d cases (%d near-ties)"
                % ("sampling/" + name, files, size, len(params["cases"]), nt))
    for name in stale_dirs(root):
        shutil.rmtree(os.path.join(root, name))
        if not quiet:
            log("removed stale sampling/%s" % name)
    return n_sets, n_bytes


def stale_dirs(root):
    """Directories under golden/sampling that are no set of the table."""
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root)
                  if n not in BY_NAME and os.path.isdir(os.path.join(root, n)))
