"""Seeded sampling: the Python reference of docs/sampling.md.

Pure Python and numpy, no torch: Philox4x32-10, the uniform, argument validation, and one row's
token with everything the draw saw (the Philox words, the uniform, the candidate and nucleus
sizes, the margins of docs/sampling.md and the tokens on either side of the nearest boundary).
The golden sampling sets (sampling_sets.py) and the seeded generation of the model sets
(models/reference.py) both sample through `sample_row`.

Determinism. Every step uses only IEEE operations that are correctly rounded (+, -, *, /,
comparisons, ldexp) in a fixed order, with one exception the spec allows, exp. numpy's float64 exp
dispatches to AVX512F code on some CPUs and to libm on others, and libm's exp is itself picked by
CPU features; either way the last bit may differ between the hosts the golden data is regenerated
on, and the margins written to the manifests would follow. `exp_ref` is therefore a fixed
algorithm (Cody-Waite reduction, degree-13 Taylor polynomial, ldexp) built from basic operations
only: the same bits on every host, within 0.65 ulp of the true value (glibc's is within 0.51; the
spec allows any last-bit difference and its margins budget for it). Prefix sums are
sequential (np.cumsum is add.accumulate, a left-to-right loop; np.sum would be pairwise). The one
libm call left is math.log in model_margin, whose result the model sets store as fp32.
"""

import math
from collections import namedtuple

import numpy as np

MASK32 = 0xFFFFFFFF
U64 = 1 << 64
# Philox4x32-10 (Salmon et al., SC11; Random123): round multipliers and the Weyl key increments.
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10


def philox4x32_10(counter, key):
    """The Philox4x32-10 bijection: counter (c0, c1, c2, c3), key (k0, k1), all uint32 -> the four
    output words. The key is bumped before rounds 2 to 10 (Random123's schedule)."""
    c0, c1, c2, c3 = (int(c) & MASK32 for c in counter)
    k0, k1 = (int(k) & MASK32 for k in key)
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c0, M1 * c2  # mulhilo: the 64-bit products, split below
        hi0, lo0 = p0 >> 32, p0 & MASK32
        hi1, lo1 = p1 >> 32, p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return (c0, c1, c2, c3)


def _check_u64(name, v):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= int(v) < U64:
        raise ValueError("sample: %s = %r: must be an integer in [0, 2^64)" % (name, v))
    return int(v)


def philox_words(seed, step, row=0):
    """The draw's Philox output: key (seed mod 2^32, seed >> 32), counter (step mod 2^32,
    step >> 32, row, 0)."""
    seed, step = _check_u64("seed", seed), _check_u64("step", step)
    if not 0 <= int(row) <= MASK32:
        raise ValueError("sample: row = %r: must be in [0, 2^32)" % (row,))
    return philox4x32_10((step & MASK32, step >> 32, int(row), 0), (seed & MASK32, seed >> 32))


def uniform_of(words):
    """u = ((x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53: 53 random bits, exact in fp64."""
    x0, x1 = int(words[0]), int(words[1])
    return float(((x0 >> 5) << 26) | (x1 >> 6)) * 2.0 ** -53


def uniform(seed, step, row=0):
    """The fp64 uniform in [0, 1) of row `row` at (seed, step)."""
    return uniform_of(philox_words(seed, step, row))


def stream(seed, step, row, n):
    """n consecutive outputs: entry i uses counter (step + i mod 2^64, row) (ts_philox's stream)."""
    return [philox_words(seed, (int(step) + i) % U64, row) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# A host-independent exp (see the module docstring)

_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
# 1/k! for k = 2..13 (1/2! enters as an exact halving): on |r| <= ln2/2 the first omitted term,
# r^14/14!, is below 2^-58.
_TAYLOR = [1.0 / math.factorial(k) for k in range(2, 14)]
_EXP_MIN, _EXP_MAX = -746.0, 709.0  # below: 0 (exp(-745.14) is the last subnormal); above: unused


def exp_ref(x):
    """exp of a float64 array with basic IEEE operations only: x = k ln2 + r, |r| <= ln2/2, then
    exp(r) = 1 + r + r^2 (1/2! + r (1/3! + ...)) with the rounding errors of r and 1 + r carried,
    and an exact scaling by 2^k (one more rounding for subnormal results). Within 0.65 ulp (the
    selftest measures it against 50-digit decimal exp); the same bits on every host. Inputs here
    are <= 0 (scaled logit differences)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(x > _EXP_MAX) or np.any(np.isnan(x)):
        raise ValueError("exp_ref: argument out of range")
    live = x >= _EXP_MIN
    xs = np.where(live, x, 0.0)
    k = np.rint(xs * _INV_LN2)
    hi = xs - k * _LN2_HI  # exact
    lo = k * _LN2_LO
    r = hi - lo
    r_err = (hi - r) - lo  # what rounding r dropped (Fast2Sum: exact while |hi| >= |lo|)
    q = np.full_like(r, _TAYLOR[-1])  # 1/3! + r/4! + ... + r^10/13!
    for c in reversed(_TAYLOR[1:-1]):
        q = q * r + c
    # exp(r) = 1 + r + r^2/2 + r^3 q, the two large terms accumulated as an unevaluated sum
    # (Fast2Sum: |1| > |r| and |1 + r| > r^2/2), so the only large rounding left is the final one.
    s = 1.0 + r
    t = (1.0 - s) + r
    h = 0.5 * (r * r)
    s2 = s + h
    t2 = (s - s2) + h
    e = s2 + (t2 + (t + (r_err + (r * r) * r * q)))
    return np.where(live, np.ldexp(e, k.astype(np.int64)), 0.0)


# ---------------------------------------------------------------------------------------------
# Validation

SampleConfig = namedtuple("SampleConfig", "temperature top_k top_p seed step")


def f32(v):
    """A Python number as the fp32 value a C caller passes (round to nearest), back as a float."""
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def fmt(v):
    """A value for an error message: fp32 values in their shortest form (0, 1e-06, nan, +inf)."""
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "+inf" if v > 0 else "-inf"
        s = str(np.float32(v))
        return s[:-2] if s.endswith(".0") else s
    return str(v)


def validate_args(temperature, top_k, top_p, seed=0, step=0):
    """The scalar checks of docs/sampling.md ("Errors"), in its order. temperature and top_p are
    taken as fp32 (rounded the way a C caller's float would be). Returns (T, p) as float64."""
    t, p = f32(temperature), f32(top_p)
    if math.isnan(t) or math.isinf(t) or t < 0:
        raise ValueError("sample: temperature = %s: must be 0 (greedy) or finite and > 0" % fmt(t))
    if not isinstance(top_k, (int, np.integer)) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError("sample: top_k = %s: must be >= 0 (0 = off)" % fmt(top_k))
    if top_k > 2**31 - 1:
        raise ValueError("sample: top_k = %s: must fit an int32" % fmt(top_k))
    if math.isnan(p) or not 0 < p <= 1:
        raise ValueError("sample: top_p = %s: must be in (0, 1]" % fmt(p))
    _check_u64("seed", seed)
    _check_u64("step", step)
    return t, p


def validate_row(values, r):
    """Row r of the logits (fp32): every value finite or -inf, and not all -inf."""
    x = np.asarray(values)
    if x.dtype != np.float32:
        raise TypeError("sample: logits must be float32, got %s" % x.dtype)
    bad = np.flatnonzero(np.isnan(x) | (x == np.inf))
    if bad.size:
        i = int(bad[0])
        raise ValueError("sample: logits[%d][%d] = %s: must be finite or -inf" % (r, i, fmt(x[i])))
    if not np.any(x != -np.inf):
        raise ValueError("sample: logits row %d is all -inf" % r)


def validate(config, logits):
    """Refuse a call the way docs/sampling.md says, before any token is chosen: logits fp32
    [rows, vocab], config a SampleConfig (or anything with its fields). Raises ValueError naming
    `sample`, the argument and its value."""
    x = np.asarray(logits)
    if x.ndim != 2:
        raise ValueError("sample: logits shape %s: must be [rows, vocab]" % (list(x.shape),))
    rows, vocab = x.shape
    if vocab < 1:
        raise ValueError("sample: vocab = %d: must be >= 1" % vocab)
    if rows < 1:
        raise ValueError("sample: rows = %d: must be >= 1" % rows)
    validate_args(config.temperature, config.top_k, config.top_p, config.seed, config.step)
    for r in range(rows):
        validate_row(x[r], r)


# ---------------------------------------------------------------------------------------------
# One row

Result = namedtuple("Result", [
    "token",         # the chosen index
    "rank",          # its rank in the canonical order
    "u",             # the uniform (None for greedy, which draws none)
    "philox",        # (x0, x1, x2, x3) behind u (None for greedy)
    "n",             # candidates after top-k and dropping -inf (1 for greedy)
    "kept",          # n', the nucleus size (1 for greedy)
    "draw_margin",   # docs/sampling.md, relative to S'; None when n' == 1 or greedy
    "topp_margin",   # relative to S; None when top_p == 1 or greedy
    "margin",        # the case margin: min of the two; None = no floating-point decision
    "boundary",      # which boundary is nearest: "draw", "top_p", "edge" (0 or S') or None
    "alternatives",  # [token a, token b] on either side of that boundary ([] when None)
    "model_margin",  # logit units (model sets), see model_margin(); None: nothing can change it
])


def canonical_order(x):
    """Indices by value, largest first; equal values (-0.0 == +0.0) by ascending index; -inf last.
    A stable sort of the negated float64 values: numpy compares with <, under which -0.0 and
    +0.0 are equal, and -(-inf) = +inf sorts last."""
    return np.argsort(-np.asarray(x, dtype=np.float64), kind="stable")


def _nucleus(C, S, p):
    """n': the smallest count whose prefix sum reaches p * S (C nondecreasing)."""
    if p == 1.0:
        return len(C)
    i = int(np.searchsorted(C, p * S, side="left"))
    return min(i + 1, len(C))  # i == len(C) only if rounding put p * S above S: keep them all


def _draw(C, kept, u):
    """(rank, target, S'): the first rank < kept with C_i > u * S', else the last kept rank."""
    total = float(C[kept - 1])
    target = u * total
    rank = int(np.searchsorted(C[:kept], target, side="right"))
    return min(rank, kept - 1), target, total


def sample_row(logits, temperature, top_k, top_p, seed, step, row=0):
    """One row's token as docs/sampling.md defines it, with the diagnostics in Result.

    logits: fp32 [vocab] (row `row` of a batch: `row` selects the Philox counter (step, row) and
    names the row in errors). temperature, top_p: converted to fp32, then exactly to fp64.
    """
    validate_args(temperature, top_k, top_p, seed, step)
    words = philox_words(seed, step, row)
    return sample_with_uniform(logits, temperature, top_k, top_p, uniform_of(words), row=row,
                               words=words)


def sample_with_uniform(logits, temperature, top_k, top_p, u, row=0, words=None):
    """sample_row with the uniform given instead of drawn (the spec's worked example, tests)."""
    x = np.asarray(logits)
    if x.ndim != 1 or x.shape[0] < 1:
        raise ValueError("sample: vocab = %d: must be >= 1" % (x.shape[0] if x.ndim == 1 else 0))
    T, p = validate_args(temperature, top_k, top_p)
    validate_row(x, row)
    l = x.astype(np.float64)  # exact
    order = canonical_order(l)

    if T == 0.0:  # 1. greedy: rank 0 of the canonical order (lowest index among equal maxima)
        tok = int(order[0])
        return Result(tok, 0, None, None, 1, 1, None, None, None, None, [],
                      model_margin(l, order, 0.0, p, None, 1, 0, None))

    # 3. top-k, then drop -inf (they sort last, so the finite candidates are a prefix)
    n = len(l) if top_k == 0 else min(int(top_k), len(l))
    n = min(n, int(np.count_nonzero(l != -np.inf)))
    ls = l[order[:n]]
    # 4. weights: subtract, divide, exp, each in fp64; w_0 = exp(0) = 1 exactly
    w = exp_ref((ls - ls[0]) / T)
    # 5. prefix sums, sequential in rank order
    C = np.cumsum(w)
    S = float(C[-1])
    # 6. top-p on the tempered weights
    kept = _nucleus(C, S, p)
    # 7. the draw
    rank, target, total = _draw(C, kept, u)
    tok = int(order[rank])

    # Margins (docs/sampling.md, "Margins"). The draw margin measures the target against both
    # edges of the chosen interval, C_{-1} = 0 and C_{n'-1} = S' included as the spec defines it
    # (those two are not real decision boundaries: "edge" below).
    draw_margin = topp_margin = None
    cands = []  # (distance, kind, alternatives)
    if kept > 1:
        lo = float(C[rank - 1]) if rank > 0 else 0.0
        hi = float(C[rank])
        d_lo, d_hi = abs(target - lo) / total, abs(hi - target) / total
        draw_margin = min(d_lo, d_hi)
        if rank > 0:
            cands.append((d_lo, "draw", [int(order[rank - 1]), tok]))
        else:
            cands.append((d_lo, "edge", [tok, tok]))
        if rank < kept - 1:
            cands.append((d_hi, "draw", [tok, int(order[rank + 1])]))
        else:
            cands.append((d_hi, "edge", [tok, tok]))
    if p < 1.0:
        thr = p * S
        d_in = abs(float(C[kept - 1]) - thr) / S  # C_{n'-1} >= pS: falling below grows n'
        topp_margin = d_in
        if kept < n:
            cands.append((d_in, "top_p", [tok, _token_with_nucleus(order, C, u, kept + 1)]))
        if kept > 1:
            d_out = abs(float(C[kept - 2]) - thr) / S  # C_{n'-2} < pS: reaching it shrinks n'
            topp_margin = min(d_in, d_out)
            cands.append((d_out, "top_p", [_token_with_nucleus(order, C, u, kept - 1), tok]))

    # The spec: greedy and n' == 1 draws make no floating-point decision (margin inf = None).
    margin = boundary = None
    alternatives = []
    if kept > 1:
        margin = draw_margin if topp_margin is None else min(draw_margin, topp_margin)
        _, boundary, alternatives = min(cands, key=lambda c: c[0])
    mm = model_margin(l, order, T, p, C, kept, rank, u)
    return Result(tok, rank, u, None if words is None else tuple(words), n, kept, draw_margin,
                  topp_margin, margin, boundary, alternatives, mm)


def _token_with_nucleus(order, C, u, kept):
    """The token the same draw gives with a nucleus of `kept` ranks (a top-p near-tie's other
    outcome)."""
    rank, _, _ = _draw(C, kept, u)
    return int(order[rank])


def _neighbour_gap(l, order, rank):
    """Logit distance from the chosen rank to its neighbours in the canonical order (the next
    rank counts even beyond the top-k cut or the nucleus; -inf neighbours are infinitely far).
    None when the row has no other finite logit."""
    gaps = []
    if rank > 0:
        gaps.append(float(l[order[rank - 1]] - l[order[rank]]))
    if rank + 1 < len(order) and l[order[rank + 1]] != -np.inf:
        gaps.append(float(l[order[rank]] - l[order[rank + 1]]))
    return min(gaps) if gaps else None


def _logit(q):
    return math.log(q) - math.log1p(-q)


def _spread(T, a, b):
    """The spread of logit perturbation that moves a mass fraction from a to b (0 < a < 1): with
    the fraction's own ranks shifted by +D/2 and the rest by -D/2 (the most any perturbation of
    spread D can do), logit(fraction) moves by exactly D / T. None when b is 0 (never reached)."""
    if b <= 0.0:
        return None
    return T * abs(_logit(b) - _logit(a))


def _edge_terms(C, kept, rank, u, T):
    """model_margin's draw terms: for each interior edge of the chosen interval, the spread that
    moves its fraction F = C_e / S' of the kept mass onto u."""
    total = float(C[kept - 1])
    terms = []
    for e in (rank - 1, rank):  # the edges C_{rank-1} and C_rank
        if 0 <= e < kept - 1:
            F = float(C[e]) / total
            if 0 < F < 1:
                d = _spread(T, F, u)
                if d is not None:
                    terms.append(d)
    return terms


def model_margin(l, order, T, p, C, kept, rank, u):
    """How far the logits must move to change the token, in logit units: the smallest spread
    D = max_j delta_j - min_j delta_j of a perturbation delta of the logits that reaches a
    boundary where the token changes, each boundary taken on its own. greedy_top2_margin is this
    quantity for greedy decoding (tokens 0 and 1 trade places once delta_1 - delta_0 reaches it),
    so the same margin_epsilon applies. Boundaries (l: fp64 logits, C: prefix sums over the n
    candidates, S = C[-1]):
      - the draw: each interior edge of the chosen interval, a fraction F = C_e / S' compared with
        u. Shifting the ranks up to e by +D/2 and the other kept ranks by -D/2 moves logit(F) by
        D / T, and no perturbation of spread D moves it further, so the draw crosses the edge once
        D >= T |logit(u) - logit(F)| (first order: T |u - F| / (F (1 - F))). The outer edges
        (F = 0 and F = 1) never move;
      - top-p, when top_p < 1: a nucleus of m > n' ranks needs G = C_{m-2} / S below p, one of
        m < n' needs G = C_{m-1} / S at p, likewise D >= T |logit(p) - logit(G)|. Changing the
        nucleus only moves the target (u * S'), so if the same u picks the same rank from the
        other nucleus, the token changes only if the perturbation also crosses a draw edge of that
        nucleus: the term is then the larger of the two;
      - the logit gap between the chosen rank and its neighbours in the canonical order: when they
        cross, the two indices trade places (their weights are equal there, so every prefix sum is
        continuous) and the same draw lands on the other index. The next rank counts beyond the
        top-k cut and the nucleus too. A crossing of two ranks the draw did not choose changes
        nothing (the top-k cut included, unless the chosen rank is the last one kept); the group
        shifts above never reorder ranks except across the chosen rank's own gaps.
    Greedy (T = 0): the neighbour gap alone, the top-2 margin. None when nothing can change the
    token (a single finite logit, no decision). math.log may differ in its last bit between hosts;
    the model sets store this value as fp32, which absorbs that."""
    terms = []
    if T > 0:
        terms += _edge_terms(C, kept, rank, u, T)
    g = _neighbour_gap(l, order, rank)
    if g is not None:
        terms.append(g)
    if T > 0 and p < 1:
        # Every other nucleus size m, outwards from n': reaching m takes G_e = C_e / S across p
        # for e = m - 2 (growing: every edge from n'-1 up to it must fall below p) or e = m - 1
        # (shrinking), a spread that grows with |m - n'|, so the walk stops once it passes the
        # best term so far.
        S = float(C[-1])
        for step in (1, -1):
            m = kept + step
            while 1 <= m <= len(C):
                G = float(C[m - 2 if step > 0 else m - 1]) / S
                if not 0 < G < 1:
                    break
                t_p = _spread(T, G, p)
                if terms and t_p >= min(terms):
                    break
                if _draw(C, m, u)[0] != rank:
                    terms.append(t_p)
                else:
                    after = _edge_terms(C, m, rank, u, T)
                    if after:
                        terms.append(max(t_p, min(after)))
                m += step
    return min(terms) if terms else None


def sample(logits, config):
    """A batch, as ts_sample takes it: logits fp32 [rows, vocab], one config; row r draws with
    counter (step, r). Validates everything first. Returns one Result per row."""
    x = np.asarray(logits)
    validate(config, x)
    return [sample_row(x[r], config.temperature, config.top_k, config.top_p, config.seed,
                       config.step, row=r) for r in range(x.shape[0])]
