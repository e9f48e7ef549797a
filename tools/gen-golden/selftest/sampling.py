"""`python3 tools/gen-golden selftest`, sampling part: sampling.py against docs/sampling.md, and the
golden sampling sets read back the way the Go side reads them.

  - Philox4x32-10: the three Random123 known answers, the key/counter layout of (seed, step, row),
    the uniform's bit layout, streams across the 2^32 and 2^64 step boundaries;
  - exp_ref: within 0.65 ulp of a 50-digit decimal exp, exact at 0, 0 below the subnormals;
  - the spec's worked example (u = 0.5: token 2, draw margin 0.0777);
  - greedy ties, -0.0 == +0.0, -inf handling, the canonical order against Python's own sort;
  - every validation error, with `sample`, the argument and the value in its message;
  - an independent implementation (numpy's exp, a blocked scan for the prefix sums, lexsort) picks
    the same tokens on random rows wherever the margin exceeds the epsilon;
  - 20000 seeded draws from a small distribution match its probabilities (chi-square), and the
    uniforms are uniform;
  - the model margin is sound: perturbations of the logits whose spread stays below it never
    change the token;
  - the golden sets: format, coverage of the configurations the contract asks for, every case
    re-sampled from logits.npy (alone and as row `row` of the whole batch), the independent
    implementation agreeing with every ordinary case and staying within the alternatives of every
    near-tie, and byte-identical regeneration.
"""

import hashlib
import json
import math
import os
import tempfile
import time
from decimal import Decimal, getcontext

import numpy as np

import sampling
import sampling_sets
from sampling import f32


class Fail(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# ---------------------------------------------------------------------------------------------
# Philox and the uniform

KAT = [  # Random123 tests/kat_vectors, philox4x32 10: counter, key -> output
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff, 0xffffffff), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def check_philox():
    for counter, key, want in KAT:
        got = sampling.philox4x32_10(counter, key)
        check(got == want, "Philox KAT %s/%s: got %s" % (counter, key, [hex(w) for w in got]))
    # (seed, step, row) -> key (seed lo, seed hi), counter (step lo, step hi, row, 0)
    for seed, step, row in ((0, 0, 0), (2**64 - 1, 2**64 - 1, 2**32 - 1), (2**32 + 5, 2**32, 3),
                            (0x0123456789ABCDEF, 0xFEDCBA9876543210, 7)):
        want = sampling.philox4x32_10((step & 0xFFFFFFFF, step >> 32, row, 0),
                                      (seed & 0xFFFFFFFF, seed >> 32))
        check(sampling.philox_words(seed, step, row) == want, "key/counter layout")
    check(sampling.philox_words(2**32 + 1, 5, 0) != sampling.philox_words(1, 5, 0)
          and sampling.philox_words(1, 2**32 + 5, 0) != sampling.philox_words(1, 5, 0),
          "the high words of seed and step must matter")
    # the uniform: 27 bits of x0 above 26 bits of x1, times 2^-53
    x0, x1 = KAT[0][2][0], KAT[0][2][1]
    check(sampling.uniform(0, 0, 0) == ((x0 >> 5) * 2**26 + (x1 >> 6)) / 2.0**53, "uniform")
    check(sampling.uniform_of((0xFFFFFFFF, 0xFFFFFFFF, 0, 0)) == 1 - 2.0**-53
          and sampling.uniform_of((0, 0, 7, 7)) == 0.0
          and sampling.uniform_of((0x1F, 0x3F, 0, 0)) == 0.0
          and sampling.uniform_of((0x20, 0, 0, 0)) == 2.0**-27
          and sampling.uniform_of((0, 0x40, 0, 0)) == 2.0**-53, "uniform bit layout")
    # streams: entry i is counter step + i (mod 2^64), carrying into the high word
    s = sampling.stream(9, 2**32 - 2, 1, 4)
    check(s[2] == sampling.philox_words(9, 2**32, 1), "stream across 2^32")
    s = sampling.stream(9, 2**64 - 1, 1, 2)
    check(s[1] == sampling.philox_words(9, 0, 1), "stream across 2^64 wraps to 0")
    for bad in (-1, 2**64, 1.0, True):
        try:
            sampling.philox_words(bad, 0, 0)
        except ValueError as e:
            check(str(e).startswith("sample: seed = "), str(e))
        else:
            raise Fail("seed %r accepted" % (bad,))


def check_exp():
    getcontext().prec = 50
    rng = np.random.default_rng(20261121)
    x = np.concatenate([rng.uniform(-40, 0, 20000), rng.uniform(-745, -700, 500),
                        -rng.uniform(0, 1e-3, 500)])
    got = sampling.exp_ref(x)
    worst = 0.0
    for xi, gi in zip(x, got):
        t = Decimal(float(xi)).exp()
        if t < Decimal(2.0**-1022):
            continue  # subnormal results: one more rounding (ldexp), nothing here depends on them
        ulp = Decimal(float(np.spacing(gi)))
        worst = max(worst, float(abs((Decimal(float(gi)) - t) / ulp)))
    check(worst <= 0.65, "exp_ref is %.3f ulp off" % worst)
    check(list(sampling.exp_ref(np.array([0.0, -0.0, -746.0, -1e300, -np.inf]))) ==
          [1.0, 1.0, 0.0, 0.0, 0.0], "exp_ref special values")
    return worst


# ---------------------------------------------------------------------------------------------
# The token


def check_worked_example():
    """docs/sampling.md, "Worked example"."""
    l = np.array([1.0, 3.0, 3.0, -np.inf, 2.0], dtype=np.float32)
    check(sampling.canonical_order(l).tolist() == [1, 2, 4, 0, 3], "example order")
    r = sampling.sample_with_uniform(l, 1.0, 3, 0.9, 0.5)
    check(r.token == 2 and r.rank == 1 and r.n == 3 and r.kept == 3, "example token: %s" % (r,))
    S = 2.0 + math.exp(-1.0)
    target = 0.5 * S  # between C_0 = 1 and C_1 = 2
    check(abs(r.draw_margin - min(target - 1.0, 2.0 - target) / S) < 1e-15
          and abs(r.draw_margin - 0.0777) < 5e-5, "example draw margin %r" % r.draw_margin)
    # the case margin also counts the top-p threshold: 0.9 S sits 0.131 above C_1 = 2
    p = f32(0.9)
    check(abs(r.topp_margin - (p * S - 2.0) / S) < 1e-15
          and r.margin == min(r.draw_margin, r.topp_margin), "example case margin")
    # and the other intervals: u below 1/S' picks index 1, above 2/S' index 4
    check(sampling.sample_with_uniform(l, 1.0, 3, 0.9, 0.4).token == 1
          and sampling.sample_with_uniform(l, 1.0, 3, 0.9, 0.9).token == 4, "example intervals")
    # top-p 0.8 < 2/S: the nucleus is ranks 0 and 1
    check(sampling.sample_with_uniform(l, 1.0, 3, 0.8, 0.9).kept == 2, "example top-p 0.8")


def check_greedy_and_order():
    cases = [
        ([1.0, 3.0, 3.0, -np.inf, 2.0], 1),
        ([-0.0, 0.0], 0), ([0.0, -0.0], 0), ([-1.0, -0.0, 0.0, -0.0], 1),
        ([-np.inf, 2.0, 2.0], 1), ([-np.inf, -np.inf, -5.0], 2), ([7.0], 0),
        ([3e38, -3e38, 3e38], 0), ([1e-45, 0.0, 1e-45], 0),
    ]
    for vals, want in cases:
        x = np.array(vals, dtype=np.float32)
        r = sampling.sample_row(x, 0.0, 0, 1.0, 0, 0)
        check(r.token == want and r.u is None and r.margin is None,
              "greedy %s: got %d, want %d" % (vals, r.token, want))
        # top_k 1 samples the same token through the sampling path, with no decision
        r = sampling.sample_row(x, 1.0, 1, 1.0, 123, 4)
        check(r.token == want and r.n == 1 and r.kept == 1 and r.margin is None, "top_k 1")
    # the canonical order against Python's sort on rows full of ties, signed zeros and -inf
    rng = np.random.default_rng(7)
    for _ in range(50):
        v = rng.integers(-3, 3, 200).astype(np.float32)
        v[rng.random(200) < 0.2] = -np.inf
        v[(v == 0) & (rng.random(200) < 0.5)] = -0.0
        want = sorted(range(len(v)), key=lambda i: (-float(v[i]), i))
        check(sampling.canonical_order(v).tolist() == want, "canonical order")


def check_inf():
    x = np.full(1000, -np.inf, dtype=np.float32)
    x[[17, 400, 401, 999]] = [1.0, 2.0, 2.0, -3.0]
    r = sampling.sample_row(x, 1.0, 100, 1.0, 1, 1)
    check(r.n == 4, "top_k beyond the finite logits keeps only them: n = %d" % r.n)
    seen = set()
    for step in range(400):
        seen.add(sampling.sample_row(x, 5.0, 0, 1.0, 3, step).token)
    check(seen == {17, 400, 401, 999}, "draws reach exactly the finite logits: %s" % seen)
    y = np.full(50, -np.inf, dtype=np.float32)
    y[49] = -1e30
    for step in range(20):
        r = sampling.sample_row(y, 1.0, 0, 0.5, 5, step)
        check(r.token == 49 and r.n == 1 and r.kept == 1 and r.margin is None, "one finite")


def expect_error(fn, want):
    try:
        fn()
    except ValueError as e:
        check(str(e).startswith("sample: ") and want in str(e),
              "error %r does not contain %r" % (str(e), want))
        return
    raise Fail("no error, want %r" % want)


def check_errors():
    ok = np.zeros((2, 5), dtype=np.float32)
    C = sampling.SampleConfig

    def v(cfg, logits=ok):
        return lambda: sampling.validate(cfg, logits)

    good = C(1.0, 0, 1.0, 0, 0)
    sampling.validate(good, ok)
    expect_error(v(good, np.zeros((2, 0), dtype=np.float32)), "vocab = 0: must be >= 1")
    expect_error(v(good, np.zeros((0, 5), dtype=np.float32)), "rows = 0: must be >= 1")
    expect_error(v(C(float("nan"), 0, 1.0, 0, 0)), "temperature = nan")
    expect_error(v(C(float("inf"), 0, 1.0, 0, 0)), "temperature = +inf")
    expect_error(v(C(1e39, 0, 1.0, 0, 0)), "temperature = +inf")  # overflows fp32
    expect_error(v(C(-1.0, 0, 1.0, 0, 0)), "temperature = -1: must be 0 (greedy) or finite")
    expect_error(v(C(1.0, -1, 1.0, 0, 0)), "top_k = -1: must be >= 0")
    expect_error(v(C(1.0, 2**31, 1.0, 0, 0)), "top_k = 2147483648")
    expect_error(v(C(1.0, 0, 0.0, 0, 0)), "top_p = 0: must be in (0, 1]")
    expect_error(v(C(1.0, 0, -0.5, 0, 0)), "top_p = -0.5: must be in (0, 1]")
    expect_error(v(C(1.0, 0, 1.5, 0, 0)), "top_p = 1.5: must be in (0, 1]")
    expect_error(v(C(1.0, 0, 1.0000001, 0, 0)), "top_p = 1.0000001: must be in (0, 1]")
    expect_error(v(C(1.0, 0, float("nan"), 0, 0)), "top_p = nan: must be in (0, 1]")
    expect_error(v(C(0.0, 0, 0.0, 0, 0)), "top_p = 0")  # greedy validates what it ignores
    expect_error(v(C(1.0, 0, 1.0, -1, 0)), "seed = -1")
    expect_error(v(C(1.0, 0, 1.0, 0, 2**64)), "step = 18446744073709551616")
    bad = ok.copy()
    bad[0, 3] = np.nan
    expect_error(v(good, bad), "logits[0][3] = nan: must be finite or -inf")
    bad = ok.copy()
    bad[1, 4] = np.inf
    expect_error(v(good, bad), "logits[1][4] = +inf: must be finite or -inf")
    bad = ok.copy()
    bad[1, :] = -np.inf
    expect_error(v(good, bad), "logits row 1 is all -inf")
    x = np.zeros(20, dtype=np.float32)
    x[17] = np.nan
    expect_error(lambda: sampling.sample_row(x, 0.0, 0, 1.0, 0, 0), "logits[0][17] = nan")
    expect_error(lambda: sampling.sample_row(x, 1.0, 0, 1.0, 0, 0, row=3), "logits[3][17] = nan")
    # the arguments are checked before the logits
    expect_error(lambda: sampling.sample_row(x, 1.0, 0, 0.0, 0, 0), "top_p = 0")


# ---------------------------------------------------------------------------------------------
# An independent implementation: another sort, numpy's exp, and a blocked scan (the order a
# parallel implementation sums in) instead of the sequential prefix sums.


def blocked_scan(w, block=256):
    n = len(w)
    pad = (-n) % block
    wb = np.concatenate([w, np.zeros(pad)]).reshape(-1, block)
    offsets = np.concatenate([[0.0], np.cumsum(wb.sum(axis=1))[:-1]])  # pairwise block sums
    return (offsets[:, None] + np.cumsum(wb, axis=1)).reshape(-1)[:n]


def alt_token(x, T, k, p, u):
    l = x.astype(np.float64)
    if T == 0:
        return int(np.lexsort((np.arange(len(l)), -l))[0])
    order = np.lexsort((np.arange(len(l)), -l))
    n = len(l) if k == 0 else min(k, len(l))
    n = min(n, int(np.isfinite(l).sum()))
    w = np.exp((l[order[:n]] - l[order[0]]) / np.float64(T))
    C = blocked_scan(w)
    S = C[-1]
    kept = n
    if p < 1.0:
        hit = np.flatnonzero(C >= p * S)
        kept = int(hit[0]) + 1 if hit.size else n
    target = u * C[kept - 1]
    hits = np.flatnonzero(C[:kept] > target)
    return int(order[hits[0] if hits.size else kept - 1])


def check_independent():
    rng = np.random.default_rng(11)
    compared = 0
    for trial in range(300):
        V = int(rng.integers(1, 3000))
        x = (rng.normal(0, rng.choice([0.5, 3.0, 20.0]), V)).astype(np.float32)
        if trial % 3 == 0:
            x = np.round(x).astype(np.float32)  # ties
        x[rng.random(V) < rng.choice([0.0, 0.5, 0.99])] = -np.inf
        if not np.isfinite(x).any():
            x[int(rng.integers(V))] = 0.0
        T = f32(rng.choice([0.0, 1e-3, 0.7, 1.0, 2.5, 100.0]))
        k = int(rng.choice([0, 1, 5, 40, V, V + 3]))
        p = f32(rng.choice([1.0, 0.95, 0.5, 1e-6]))
        seed, step = int(rng.integers(0, 2**63)), int(rng.integers(0, 2**40))
        r = sampling.sample_row(x, T, k, p, seed, step)
        if r.margin is not None and r.margin <= sampling_sets.EPSILON:
            continue
        if r.topp_margin is not None and r.topp_margin <= sampling_sets.EPSILON:
            continue
        u = 0.0 if r.u is None else r.u
        check(alt_token(x, T, k, p, u) == r.token,
              "independent implementation differs (V %d T %g k %d p %g)" % (V, T, k, p))
        compared += 1
    check(compared > 250, "too few comparable draws")
    return compared


def check_statistics():
    """20000 draws (one seed, steps 0..19999) from a 7-token row: each token's count matches the
    probability the spec defines (chi-square, 5 degrees of freedom), the -inf and cut tokens are
    never drawn, and the uniforms fill 20 bins evenly."""
    x = np.array([0.5, 2.0, -np.inf, 2.0, 1.0, -1.0, -3.0], dtype=np.float32)
    T, k, p = 0.7, 5, f32(0.99)
    l = x.astype(np.float64)
    order = [1, 3, 4, 0, 5]  # top 5 finite, ties by index
    w = np.exp((l[order] - 2.0) / f32(T))
    C = np.cumsum(w)
    kept = int(np.argmax(C >= p * C[-1])) + 1
    prob = np.zeros(len(x))
    prob[order[:kept]] = w[:kept] / C[kept - 1]
    N = 20000
    counts = np.zeros(len(x))
    us = np.empty(N)
    for step in range(N):
        r = sampling.sample_row(x, T, k, p, 987654321, step)
        counts[r.token] += 1
        us[step] = r.u
    check(counts[2] == 0 and counts[6] == 0, "a -inf or cut token was drawn")
    live = prob > 0
    chi2 = float(np.sum((counts[live] - N * prob[live]) ** 2 / (N * prob[live])))
    # 99.99th percentile of chi-square with 4 degrees of freedom: 23.5
    check(chi2 < 23.5, "token frequencies do not match the probabilities (chi2 %.1f)" % chi2)
    worst_z = float(np.max(np.abs(counts[live] - N * prob[live])
                           / np.sqrt(N * prob[live] * (1 - prob[live]))))
    check(worst_z < 4.5, "a token frequency is %.1f sigma off" % worst_z)
    bins = np.histogram(us, bins=20, range=(0, 1))[0]
    chi2u = float(np.sum((bins - N / 20) ** 2 / (N / 20)))
    check(chi2u < 50.0, "uniforms are not uniform (chi2 %.1f, 19 dof)" % chi2u)  # p ~ 1e-4
    return chi2, worst_z


def check_model_margin():
    """Soundness: a perturbation of spread below the model margin never changes the token. Each
    row is perturbed by group shifts at every rank cut (the worst case for the draw and top-p
    boundaries), by swaps of the chosen rank with its neighbours, and randomly."""
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(300):
        V = int(rng.integers(50, 400))
        x = rng.normal(0, 4.0, V).astype(np.float32)
        T, k, p = f32(rng.choice([0.5, 0.8, 1.5])), int(rng.choice([0, 40])), \
            f32(rng.choice([1.0, 0.95, 0.7]))
        r = sampling.sample_row(x, T, k, p, 42, trial)
        if r.model_margin is None or r.model_margin < 1e-3:
            continue
        D = 0.95 * min(r.model_margin, 2.0)
        order = sampling.canonical_order(x)
        pos = np.empty(V, dtype=np.int64)
        pos[order] = np.arange(V)
        deltas = []
        for cut in range(min(V - 1, r.kept + 3)):
            for s in (1.0, -1.0):
                deltas.append(np.where(pos <= cut, s * D / 2, -s * D / 2))
        for nb in (r.rank - 1, r.rank + 1):
            if 0 <= nb < V:
                d = np.zeros(V)
                d[order[r.rank]] = -D / 2 if nb < r.rank else D / 2
                d[order[nb]] = D / 2 if nb < r.rank else -D / 2
                deltas.append(d)
        deltas += [rng.uniform(-D / 2, D / 2, V) for _ in range(20)]
        for d in deltas:
            y = (x.astype(np.float64) + d).astype(np.float32)
            got = sampling.sample_with_uniform(y, T, k, p, r.u).token
            check(got == r.token, "a perturbation of spread %.4f < model margin %.4f changed the "
                  "token (V %d T %g k %d p %g)" % (D, r.model_margin, V, T, k, p))
        checked += 1
    check(checked > 200, "too few model-margin trials")
    # The neighbour term has teeth: a draw well inside rank 0's interval (u = 0.25 of two nearly
    # equal weights) still changes token when the two logits trade places.
    x = np.array([1.0, 1.001, -5.0, -6.0], dtype=np.float32)
    r = sampling.sample_with_uniform(x, 1.0, 0, 1.0, 0.25)
    check(r.token == 1 and r.draw_margin > 0.2 and abs(r.model_margin - 0.001) < 1e-6,
          "neighbour gap: %s" % (r,))
    y = np.array([1.0011, 0.9999, -5.0, -6.0], dtype=np.float32)  # spread 0.0022
    check(sampling.sample_with_uniform(y, 1.0, 0, 1.0, 0.25).token == 0, "the swap changes it")
    return checked


# ---------------------------------------------------------------------------------------------
# The golden sets

CASE_KEYS = ["name", "row", "temperature", "top_k", "top_p", "seed", "step", "token", "u",
             "philox", "candidates", "kept", "margin", "near_tie", "alternatives"]


def read_set(d):
    with open(os.path.join(d, "manifest.json"), "rb") as f:
        raw = f.read()
    m = json.loads(raw)
    check(raw.endswith(b"\n"), "manifest must end with a newline")
    check(list(m) == ["format_version", "generator", "kind", "case", "tier", "seed", "params",
                      "files"], "manifest keys %s" % list(m))
    check(m["format_version"] == 1 and m["kind"] == "sampling" and m["tier"] == "committed",
          "format_version / kind / tier")
    check(0 <= m["seed"] < 2**32 and m["seed"] == sampling_sets.set_seed(m["case"]), "seed")
    check(list(m["params"]) == ["vocab", "epsilon", "cases", "streams"], "params keys")
    check(len(m["files"]) == 1, "one file")
    e = m["files"][0]
    check(e["name"] == "logits" and e["file"] == "logits.npy" and e["role"] == "input"
          and e["dtype"] == "f32", "logits entry")
    check(set(os.listdir(d)) == {"manifest.json", "logits.npy"}, "unlisted files")
    with open(os.path.join(d, "logits.npy"), "rb") as f:
        data = f.read()
    check(data.startswith(b"\x93NUMPY\x01\x00") and hashlib.sha256(data).hexdigest() == e["sha256"],
          "logits.npy header / sha256")
    x = np.load(os.path.join(d, "logits.npy"), allow_pickle=False)
    check(x.dtype.str == "<f4" and list(x.shape) == e["shape"] == [4, m["params"]["vocab"]],
          "logits dtype / shape")
    return m, x


def check_rows(x):
    """Each row is what it is there for."""
    V = x.shape[1]
    check(np.all(np.isfinite(x[0])) and 2.5 < float(np.std(x[0])) < 3.5, "row 0: N(0, 9)")
    r1 = x[1]
    zeros = np.flatnonzero(r1 == 0)
    check(r1.max() == 0 and len(np.unique(r1)) <= 9 and len(zeros) > V // 20, "row 1: levels")
    check(np.signbit(r1[zeros[0]]) and not np.signbit(r1[zeros[1]]),
          "row 1: the first zero is -0.0, the next +0.0")
    # a total order with -0.0 < +0.0 would pick another greedy token
    total = np.lexsort((np.arange(V), -r1.astype(np.float64), np.signbit(r1)))[0]
    check(total != zeros[0], "row 1: a signed-zero bug must change the greedy token")
    fin = np.isfinite(x[2])
    check(not fin[0] and (fin.sum() <= 8 or fin.mean() < 0.5), "row 2: -inf")
    check(np.all(fin | (x[2] == -np.inf)), "row 2: only finite or -inf")
    top = np.sort(x[3])[::-1]
    check(top[0] == 20.0 and top[1] == 18.5 and top[2] < 6, "row 3: two dominant logits")


def check_set(d):
    m, x = read_set(d)
    p = m["params"]
    V, eps = p["vocab"], p["epsilon"]
    check(eps == sampling_sets.EPSILON, "epsilon")
    check_rows(x)
    cases = p["cases"]
    check(len(cases) >= 70, "%d cases" % len(cases))
    check(len({c["name"] for c in cases}) == len(cases), "case names unique")
    n_near = n_alt = 0
    for c in cases:
        name = c["name"]
        check(list(c) == CASE_KEYS, "%s: keys %s" % (name, list(c)))
        check(0 <= c["row"] < 4, name)
        for key in ("temperature", "top_p"):
            check(isinstance(c[key], float) and f32(c[key]) == c[key], "%s: %s not fp32" % (name,
                                                                                            key))
        for key in ("seed", "step", "top_k", "row", "token", "candidates", "kept"):
            check(isinstance(c[key], int) and not isinstance(c[key], bool), "%s: %s" % (name, key))
        check(0 <= c["seed"] < 2**64 and 0 <= c["step"] < 2**64, "%s: uint64" % name)
        cfg = sampling.SampleConfig(c["temperature"], c["top_k"], c["top_p"], c["seed"], c["step"])
        # as row `row` of the whole batch: one call, one config, every row valid
        batch = sampling.sample(x, cfg)
        r = batch[c["row"]]
        check(r.token == c["token"] and r.n == c["candidates"] and r.kept == c["kept"],
              "%s: token/candidates/kept do not follow from logits.npy" % name)
        check(r.margin == c["margin"], "%s: margin" % name)
        if c["temperature"] == 0:
            check(c["u"] is None and c["philox"] is None and c["margin"] is None, name)
        else:
            words = sampling.philox_words(c["seed"], c["step"], c["row"])
            check(c["philox"] == list(words) and c["u"] == sampling.uniform_of(words),
                  "%s: philox / u" % name)
            check(float(repr(c["u"])) == c["u"], "%s: u round trip" % name)
        u = 0.0 if c["u"] is None else c["u"]
        alt = alt_token(x[c["row"]], c["temperature"], c["top_k"], c["top_p"], u)
        if c["near_tie"]:
            n_near += 1
            check(c["margin"] is not None and c["margin"] < eps and len(c["alternatives"]) == 2
                  and c["token"] in c["alternatives"], "%s: near-tie record" % name)
            check(alt in c["alternatives"], "%s: independent token outside the alternatives"
                  % name)
            n_alt += alt != c["token"]
        else:
            check(c["alternatives"] == [], "%s: alternatives" % name)
            check(c["margin"] is None or c["margin"] >= sampling_sets.MIN_MARGIN,
                  "%s: ordinary case with margin %r" % (name, c["margin"]))
            check(r.topp_margin is None or r.topp_margin >= sampling_sets.MIN_MARGIN,
                  "%s: top-p margin" % name)
            check(alt == c["token"], "%s: the independent implementation picks %d, not %d"
                  % (name, alt, c["token"]))
    check(1 <= n_near <= 5, "deliberate near-ties: %d" % n_near)
    # coverage of what the contract asks for
    has = lambda f: any(f(c) for c in cases)  # noqa: E731
    need = {
        "greedy on every row": all(has(lambda c, r=r: c["temperature"] == 0 and c["row"] == r)
                                   for r in range(4)),
        "top_k 1": has(lambda c: c["top_k"] == 1 and c["temperature"] > 0),
        "top_k > vocab": has(lambda c: c["top_k"] > V),
        "top_p 1": has(lambda c: c["top_p"] == 1.0 and c["top_k"] == 0 and c["temperature"] > 0),
        "nucleus of 1": has(lambda c: c["top_p"] <= 1e-6 and c["kept"] == 1),
        "top_p 0.9 / 0.5": has(lambda c: abs(c["top_p"] - 0.9) < 1e-5)
        and has(lambda c: abs(c["top_p"] - 0.5) < 1e-5),
        "temperature 1e-3 / 100 / 1e4": all(has(lambda c, t=t: c["temperature"] == f32(t))
                                            for t in (1e-3, 100.0, 1e4)),
        "top_k with top_p": has(lambda c: 0 < c["top_k"] < V and c["top_p"] < 1),
        "every row sampled": all(has(lambda c, r=r: c["row"] == r and c["temperature"] > 0
                                     and c["kept"] > 1) for r in range(4)),
        "consecutive steps": any(sum(1 for c in cases if c["seed"] == s) >= 8
                                 for s in {c["seed"] for c in cases}),
    }
    for what in (0, 2**32 - 1, 2**32 + 5, 2**64 - 1):
        need["seed %d" % what] = has(lambda c: c["seed"] == what)
        need["step %d" % what] = has(lambda c: c["step"] == what)
    missing = [k for k, ok in need.items() if not ok]
    check(not missing, "not covered: %s" % missing)
    # streams
    streams = p["streams"]
    for s in streams:
        check(list(s) == ["seed", "step", "row", "n", "words"] and s["n"] == len(s["words"]) == 64,
              "stream keys")
        check(s["words"] == [list(w) for w in sampling.stream(s["seed"], s["step"], s["row"], 64)],
              "stream words")
    s0 = [s for s in streams if (s["seed"], s["step"], s["row"]) == (0, 0, 0)]
    check(s0 and tuple(s0[0]["words"][0]) == KAT[0][2], "seed 0 stream starts with the KAT")
    check(any((s["step"] >> 32) != ((s["step"] + 63) >> 32) for s in streams),
          "a stream across a 2^32 step boundary")
    check(any(s["seed"] == 2**64 - 1 for s in streams), "a seed 2^64-1 stream")
    return len(cases), n_near, n_alt


def digests(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = \
                    hashlib.sha256(fh.read()).hexdigest()
    return out


def run():
    t0 = time.time()
    check_philox()
    print("sampling: Philox4x32-10 known answers, key/counter layout, uniform bits, streams OK")
    ulp = check_exp()
    print("sampling: exp_ref within %.3f ulp of 50-digit exp" % ulp)
    check_worked_example()
    check_greedy_and_order()
    check_inf()
    check_errors()
    print("sampling: worked example, greedy ties, signed zeros, -inf, canonical order, "
          "every validation error OK")
    n = check_independent()
    chi2, z = check_statistics()
    mm = check_model_margin()
    print("sampling: independent implementation agrees on %d random draws; 20000 draws chi2 %.1f "
          "(worst %.1f sigma); model margin sound on %d rows" % (n, chi2, z, mm))
    with tempfile.TemporaryDirectory(prefix="gen-golden-selftest-") as tmp:
        for rep in ("a", "b"):
            sampling_sets.generate(os.path.join(tmp, rep), quiet=True)
        da, db = digests(os.path.join(tmp, "a")), digests(os.path.join(tmp, "b"))
        check(da == db, "two builds of the sampling sets differ")
        total = 0
        for name, _, _ in sampling_sets.SETS:
            cases, near, alt = check_set(os.path.join(tmp, "a", "sampling", name))
            total += cases
            print("%-18s %d cases (%d near-ties, %d decided otherwise by the independent "
                  "implementation) re-sampled from logits.npy OK" % (name, cases, near, alt))
    print("selftest sampling OK: %d cases in %d sets, %.1fs" % (total, len(sampling_sets.SETS),
                                                                time.time() - t0))
    return 0
