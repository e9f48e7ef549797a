"""Peaked output rows: a synthetic checkpoint whose every greedy and seeded step has one dominant
token, as a trained model's steps mostly do, so that the token checks decide something.

Why: the logits of a random head are near-independent Gaussians across the vocabulary, and the
top two of 128k-152k such values are close (the mean top-2 gap of V standard normals is about
1 / sqrt(2 ln V), a fifth of the logits' spread). Numerical drift scales with the logits, so no
scale of the head makes the gap larger than the drift: the full-size sets' seeded runs decided
17-22 of 32 steps even with logits three times wider, and qwen2.5-0.5b-bf16 as drawn has 59 of
its 64 greedy and seeded steps below twice its margin epsilon (common/configs.py: what a correct
implementation's rounding can move a margin by, halved). A trained model's final hidden state points at
the row of the token it predicts; here the rows are made to point at the hidden states instead.

Construction (the reference's own fp32 forward, deterministic): run the set's greedy and seeded
generations from its prompt and record, at every step, the input h of the output projection
(the final norm's output at the last position) and the chosen token x. A step whose margin (the
top-2 margin; for a seeded step the sampling margin of sampling.model_margin) is below
PEAK_ACCEPT x margin_epsilon needs a boost b: the least increase of x's logit that brings the
margin to the target x margin_epsilon (PEAK_TARGETS) with the same token chosen. Row x of the output projection
gets b * d, where d is the dual vector of that step: d . h_k is 1 for the step's own h and 0 for
every other recorded h (d = H^T (H H^T)^-1 e_k over the distinct h's, H has at most 64 rows and a
hidden size of 96 or more). So at the recorded states a boost raises its own token at its own
step and moves no other logit. The row is rounded to the checkpoint's dtype again.

Seeded steps: at temperature 0.8 a decisive draw (far from every edge of its interval, and the
chosen token's logit far from its neighbours') is a draw of the top token unless the epsilon is
small next to the temperature, so greedy step j is also judged as seeded step j (both runs use
step j's draw where they share the context) and its token is boosted until that draw picks it
decisively; the runs part only where a draw of another token is decisive already, and a seeded
step past that point is boosted on its own. In practice the seeded run follows the greedy
tokens: what it adds is the engine's sampler drawing from the engine's logits at every step (the
sampling sets test every rank a draw can pick, bit for bit).

With a tied head the row is also the token's input embedding, and the trajectory moves a little;
the runs are repeated (at most PEAK_ROUNDS: the tiny tied sets, 2 layers of 96-224, take up to
~20, the full-size ones 3-4) until every step reaches PEAK_ACCEPT x epsilon. The rows changed
are recorded in the set (params.peak); every other value is the seeded draw. A checkpoint built
any other way (a real one, transformers' own initialisation) is left as it is: its token checks
decide what its logits decide, and say so."""

import json
import math
import os
import struct

import numpy as np
import torch

import sampling
from common.dtypes import F32, F64, TORCH_DTYPE, storage
from models import reference
from models.threads import split_linears
from models.generation import (GREEDY_TOKENS, SAMPLE_TEMPERATURE, SAMPLE_TOKENS, SAMPLE_TOP_K,
                               SAMPLE_TOP_P)

# The margin a boosted step is brought to, and the margin below which a step is boosted, in
# units of the set's margin_epsilon: a reference margin of 2 epsilon is at least 4 times the
# drift the selftest measured (it holds epsilon >= 2 drift), and a target of 3 leaves room for
# the rounding of the rows and, with a tied head, the moves of the trajectory. A tied model's
# trajectory is chaotic under the boosts (llama3-tiny-bf16 at target 3 settled on one token
# repeated 32 times): where a target ends in a run with fewer than MIN_DISTINCT distinct tokens,
# or does not settle in PEAK_ROUNDS, the next is tried from the drawn rows. An untied head keeps
# the drawn model's tokens (phi3-mini-4k repeats its own: 5 distinct in 32), so the first target
# that settles is taken there.
PEAK_TARGETS, PEAK_ACCEPT = (3.0, 4.0, 5.0, 6.0), 2.0
MIN_DISTINCT = 8
RIDGE = 1e-2  # of the mean |h|^2 (_duals)
# Where no target reaches MIN_DISTINCT, the settled attempt with the most distinct tokens, if it
# has at least this many (the selftest's bound for a generation that has not collapsed; the
# drawn llama3-tiny-bf16 itself had 4: 352 repeated 25 times).
MIN_DISTINCT_ANY = 4
PEAK_ROUNDS = 30  # the tiny tied sets took up to 21 with other targets (4 or 5 epsilon)
REPEAT_WINDOW = 4  # a boosted step of a tied head raises none of its last 4 tokens (_choice)
BOOST_MAX = 1e4  # logit units: no boost of a finite step comes near it


def head_tensor(family, tied):
    """The checkpoint tensor that holds the output projection's rows."""
    if not tied:
        return "lm_head.weight"
    return "transformer.wte.weight" if family == "gpt2" else "model.embed_tokens.weight"


class _Step:
    __slots__ = ("context", "h", "logits", "token", "margin", "kind", "step")

    def __init__(self, context, h, logits, token, margin, kind, step):
        self.context, self.h, self.logits = context, h, logits
        self.token, self.margin, self.kind, self.step = token, margin, kind, step


def _generate(model, prompt, seed, captured):
    """The greedy and the seeded run (reference.run_reference's and run_sampled's choices,
    without taps) as one batch of two sequences, so each step reads the weights once: [_Step]
    for each run, h as float64. The batched forward may round a little differently from the
    reference's two batch-1 runs; the build measures its margins on those, and the target
    leaves room for it."""
    assert GREEDY_TOKENS == SAMPLE_TOKENS
    greedy, seeded = [], []
    ids = [[int(t) for t in prompt] for _ in range(2)]
    with torch.no_grad():
        out = model(input_ids=prompt.to(torch.int64)[None].expand(2, -1).contiguous(),
                    use_cache=True)
        for j in range(GREEDY_TOKENS):
            logits = out.logits[:, -1]
            assert logits.dtype == F32
            hs = captured[-1]
            order = reference.top_k_stable(logits[0], 2)
            g = int(order[0])
            margin = float(logits[0, order[0]].double() - logits[0, order[1]].double())
            greedy.append(_Step(tuple(ids[0]), hs[0], logits[0].clone(), g, margin, "greedy", j))
            x = logits[1].clone()
            t, m = _draw(x.numpy(), None, 0.0, seed, j)
            seeded.append(_Step(tuple(ids[1]), hs[1], x, t, m, "seeded", j))
            if j == GREEDY_TOKENS - 1:
                break
            ids[0].append(g)
            ids[1].append(t)
            out = model(input_ids=torch.tensor([[g], [t]], dtype=torch.int64),
                        past_key_values=out.past_key_values, use_cache=True)
    return greedy + seeded


def _greedy_boost(logits, tok, target):
    """The increase of logits[tok] that makes it the top-1 by `target` (0 if it is already)."""
    others = logits.clone()
    others[tok] = -math.inf
    return max(0.0, float(others.max().double()) + target - float(logits[tok].double()))


# The draw reads the top SAMPLE_TOP_K ranks and the next one (the neighbour gap of
# sampling.model_margin): the construction draws from the CANDIDATES largest logits and the
# token it raises (indices in ascending order, so ties keep their canonical order), not all
# 128k-152k; the same token and margin (the selftest compares the set's stored draws, made from
# whole rows).
CANDIDATES = 64
assert CANDIDATES > SAMPLE_TOP_K + 1


def _draw(x, tok, b, seed, step):
    """The seeded draw of `step` from fp32 logits x (numpy) with x[tok] raised by b (tok None:
    as they are), from the CANDIDATES largest logits and tok: (token id, margin)."""
    idx = np.argpartition(-x, CANDIDATES)[:CANDIDATES] if len(x) > CANDIDATES + 1 \
        else np.arange(len(x))
    if tok is not None:
        idx = np.union1d(idx, [tok])
    idx = np.sort(idx)
    sub = x[idx].copy()
    if tok is not None:
        at = int(np.searchsorted(idx, tok))
        sub[at] = np.float32(float(sub[at]) + b)
    res = sampling.sample_row(sub, SAMPLE_TEMPERATURE, SAMPLE_TOP_K, SAMPLE_TOP_P, seed, step,
                              row=0)
    return int(idx[res.token]), math.inf if res.model_margin is None else res.model_margin


def _sampled_boost(logits, tok, seed, step, target, start=0.0):
    """The least increase of logits[tok] from `start` on (found by doubling, then bisection)
    after which the draw of `step` picks tok with a sampling margin of at least `target`."""
    x = logits.numpy()

    def ok(b):
        got, m = _draw(x, tok, b, seed, step)
        return got == tok and m >= target

    if ok(start):
        return start
    lo, hi = start, start + max(target, 0.25)
    while not ok(hi):
        lo, hi = hi, start + 2 * (hi - start)
        if hi > BOOST_MAX:
            raise RuntimeError("step %d: no boost up to %g makes token %d the draw" % (step, hi,
                                                                                      tok))
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _choice(s):
    """The token a step that needs a boost raises: its own, unless that repeats one of the last
    REPEAT_WINDOW tokens of its context; then the best-ranked token that does not. With a tied
    head a raised row is also the input embedding of the token fed next, and raising the token
    just fed makes it predict itself again. A natural (decisive, unraised) repeat stays."""
    recent = set(s.context[-REPEAT_WINDOW:])
    if s.token not in recent:
        return s.token
    for t in reference.top_k_stable(s.logits, REPEAT_WINDOW + 1):
        if int(t) not in recent:
            return int(t)
    raise AssertionError("no token outside the last %d" % REPEAT_WINDOW)


def _boosts(steps, epsilon, seed, target, tied):
    """{context: [h, token, boost]} for the distinct contexts of the runs' steps.

    The seeded run shares the greedy run's contexts until its first draw of another token, and
    step j of both uses the same draw, so each greedy step is judged as a seeded step too: its
    token is boosted until the draw picks it decisively, up to the first greedy step whose draw
    picks another token decisively (there the runs part, both decisive). A seeded step past that
    point is boosted on its own. With a tied head a boosted step may raise another token
    (_choice)."""
    choice = _choice if tied else (lambda s: s.token)
    accept, target = PEAK_ACCEPT * epsilon, target * epsilon
    by_context = {}
    parted = False
    for s in steps:
        if s.kind != "greedy":
            continue
        tok, b = s.token, 0.0
        if s.margin < accept:
            tok = choice(s)
            b = _greedy_boost(s.logits, tok, target)
        if not parted:
            t, m = _draw(s.logits.numpy(), tok, b, seed, s.step)
            if t != tok and m >= accept:
                parted = True
            elif m < accept:
                if b == 0.0:
                    tok = choice(s)
                    b = _greedy_boost(s.logits, tok, target)
                b = _sampled_boost(s.logits, tok, seed, s.step, target, start=b)
        by_context[s.context] = [s.h, tok, b]
    for s in steps:
        if s.kind == "greedy" or s.context in by_context:
            continue
        tok, b = s.token, 0.0
        if s.margin < accept:
            tok = choice(s)
            b = _sampled_boost(s.logits, tok, seed, s.step, target)
        by_context[s.context] = [s.h, tok, b]
    return by_context


def _duals(hs):
    """Columns d_k with h_j . d_k ~ [j == k] (hs: n x H float64, n < H): the ridge form
    H^T (H H^T + RIDGE mean(|h|^2) I)^-1. Exact duals of nearly parallel h's (a run that repeats
    a token passes through near-identical states) are huge vectors, and a huge row turns the
    16-bit rounding of the forward into logit errors of several units (llama3-tiny-bf16: a
    margin drift of 9.3 against an epsilon of 1.7); the ridge bounds them, and the rounds make
    up for the part of a boost it withholds."""
    gram = hs @ hs.T
    ridge = RIDGE * float(np.trace(gram)) / len(hs)
    return hs.T @ np.linalg.solve(gram + ridge * np.eye(len(hs)), np.eye(len(hs)))


def _attempt(model, weight, prompt, seed, epsilon, dtype, target, tied, captured, log):
    """Rounds of boosts at one target from the model's current rows. Returns (rows changed,
    rounds, the last run's steps) when a run needs no boost, else None after PEAK_ROUNDS."""
    changed = set()
    for rounds in range(1, PEAK_ROUNDS + 1):
        captured.clear()
        steps = _generate(model, prompt, seed, captured)
        by_context = _boosts(steps, epsilon, seed, target, tied)
        boosted = [(c, e) for c, e in by_context.items() if e[2] > 0]
        if log is not None:
            log("peak target %g, round %d: smallest margin %.2f epsilon, %d of %d steps to boost"
                % (target, rounds, min(s.margin for s in steps) / epsilon, len(boosted),
                   len(steps)))
        if not boosted:
            return sorted(changed), rounds, steps
        contexts = list(by_context)
        duals = _duals(np.stack([by_context[c][0] for c in contexts]))
        index = {c: i for i, c in enumerate(contexts)}
        delta = {}
        for c, (_, tok, b) in boosted:
            delta[tok] = delta.get(tok, 0.0) + b * duals[:, index[c]]
        with torch.no_grad():
            for tok, d in delta.items():
                row = weight[tok].to(F64) + torch.from_numpy(d)
                weight[tok] = storage(dtype)(row).to(weight.dtype)
                changed.add(tok)
    return None


def peak_head(model, prompt, seed, epsilon, dtype, tied, log=None):
    """Boost the model's output rows in place (fp32 parameter holding 16-bit values) until every
    greedy and seeded step's margin reaches PEAK_ACCEPT x epsilon and each run has at least
    MIN_DISTINCT distinct tokens (an untied head: the first target that settles), trying
    PEAK_TARGETS in order from the drawn rows (where none does, the settled attempt with the
    most, at least MIN_DISTINCT_ANY). Returns
    (the sorted token ids of the rows changed, the target, rounds run, the smallest margin of the
    last run in units of epsilon)."""
    head = model.get_output_embeddings()
    captured = []
    hook = head.register_forward_pre_hook(
        lambda _m, args: captured.append(args[0][:, -1].detach().to(F64).numpy().copy()))
    weight = head.weight
    drawn = weight.detach().clone()
    best = None  # (distinct, rows, target, rounds, smallest margin, rows' values)
    try:
        for target in PEAK_TARGETS:
            with torch.no_grad():
                weight.copy_(drawn)
            done = _attempt(model, weight, prompt, seed, epsilon, dtype, target, tied, captured,
                            log)
            if done is None:
                continue
            rows, rounds, steps = done
            distinct = min(len({s.token for s in steps if s.kind == k})
                           for k in ("greedy", "seeded"))
            worst = min(s.margin for s in steps) / epsilon
            if distinct >= MIN_DISTINCT or not tied:
                # an untied head keeps its tokens: its runs are the drawn model's, whatever the
                # target, so another would only repeat them
                return rows, target, rounds, worst
            if log is not None:
                log("peak target %g: a run has only %d distinct tokens" % (target, distinct))
            if best is None or distinct > best[0]:
                best = (distinct, rows, target, rounds, worst, weight.detach().clone())
        if best is None or best[0] < MIN_DISTINCT_ANY:
            raise RuntimeError("no peak target of %s makes every step decisive in %d rounds with "
                               "%d distinct tokens a run" % (PEAK_TARGETS, PEAK_ROUNDS,
                                                             MIN_DISTINCT_ANY))
        with torch.no_grad():
            weight.copy_(best[5])
        return best[1:5]
    finally:
        hook.remove()


def replace_tensor(path, name, t):
    """Overwrite tensor `name` of a safetensors file in place with t (its dtype and shape)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    e = header[name]
    data = np.ascontiguousarray(t.contiguous().view(torch.int16).numpy(), dtype="<i2")
    begin, end = e["data_offsets"]
    if list(t.shape) != e["shape"] or data.nbytes != end - begin:
        raise RuntimeError("%s: %s does not fit %s" % (path, tuple(t.shape), e))
    fd = os.open(path, os.O_WRONLY)
    try:
        view, offset = memoryview(data).cast("B"), 8 + n + begin
        while len(view):
            k = os.pwrite(fd, view, offset)
            view, offset = view[k:], offset + k
    finally:
        os.close(fd)


def peak_checkpoint(set_dir, family, tied, prompt, seed, epsilon, dtype, pool=None, threads=1,
                    log=None, quant=None):
    """Peak the synthetic checkpoint in set_dir (model.safetensors rewritten in place; the
    forwards' linears split over `pool`). quant: (format, group) of a quantized set, whose
    forward is the one peaked (models/quantize.py; the rows peaked are the 16-bit head's).
    Returns params.peak: {"tensor", "rows", "target", "accept", "rounds", "smallest_margin"}."""
    model = reference.load_model(set_dir, family, threads=threads)
    if quant is not None:
        from models.quantize import quantize_checkpoint
        quantize_checkpoint(model, set_dir, *quant, write=False)
    with split_linears(model, pool, threads):
        rows, target, rounds, worst = peak_head(model, prompt, seed, epsilon, dtype, tied, log)
    name = head_tensor(family, tied)
    if rows:
        w = model.get_output_embeddings().weight.detach().to(TORCH_DTYPE[dtype])
        replace_tensor(os.path.join(set_dir, "model.safetensors"), name, w)
    del model
    return {"tensor": name, "rows": [int(r) for r in rows], "target": target,
            "accept": PEAK_ACCEPT, "rounds": rounds, "smallest_margin": round(worst, 4)}
