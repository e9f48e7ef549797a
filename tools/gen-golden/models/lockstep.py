"""Lockstep: the greedy and seeded references (and the calibration forward) on threads of their
own, their split linear calls grouped so that each read of the weights serves them all (see
below)."""

import threading

from models.threads import _worker_init

# ---------------------------------------------------------------------------------------------
# Lockstep: the references and the calibration sharing each read of the weights
#
# At full size a one-token step of the fp32 reference is bound by the host's memory bandwidth:
# its linear layers stream the whole fp32 model (15 GB for Phi-3-mini) through the cores, at
# 54-56 GB/s on a 16-core GPU host (docs/PERF.md). run_reference and run_sampled each take
# prefill + 31 such steps over the same weights, and for an fp16 checkpoint the calibration's
# run_rounded (prefill + 8 steps, teacher-forced on the greedy tokens: a TokenFeed) uses the very
# same weights too. So run_lockstep runs them at the same time, one per thread, and groups their
# split linear calls: the k-th call of each thread meets the k-th of the others (the same module:
# they run the same model, which calls its layers in the same order whatever the tokens), and one
# set of pool tasks computes the group (blocked). Nothing else is shared: each thread runs its own
# forward with its own cache, each row's GEMM is the op it is alone, the hooks of the Recorder and
# of the Rounder act on their own thread's pass only (TapCapture.owner), and RoPE is wrapped per
# thread (thread_rope). So the bytes are those of the three run one after the other (the
# selftest's lockstep builds; models --check; the full-tier sets compared on the GPU host).


class Lockstep:
    """Groups the split linear calls of `members` threads (see above): a call waits until every
    thread still in the lockstep has posted its own, then one of them computes the group.
    `groups` counts the groups by size (1: a call run alone, once the others have left)."""

    class _Call:
        def __init__(self, mod, x):
            self.mod, self.x = mod, x
            self.result = self.error = None
            self.taken = False

    def __init__(self, members=2):
        self.cond = threading.Condition()
        self.posted = []         # calls waiting for their group
        self.members = members   # threads still in the lockstep (leave() when one is done)
        self.failed = None       # the error that ended the lockstep
        self.groups = {}

    @property
    def paired(self):
        return sum(n for k, n in self.groups.items() if k > 1)

    @property
    def alone(self):
        return self.groups.get(1, 0)

    def leave(self, error=None):
        with self.cond:
            self.members -= 1
            if error is not None and self.failed is None:
                self.failed = error
            self.cond.notify_all()

    def _take(self):
        """The posted group, when it is complete (the caller holds the lock)."""
        if not self.posted or len(self.posted) < self.members:
            return None
        group, self.posted = self.posted, []
        for c in group:
            c.taken = True
        self.groups[len(group)] = self.groups.get(len(group), 0) + 1
        return group

    def call(self, mod, x, run):
        """run(xs) -> [y for each x]; returns this thread's y, computed with the other threads'
        matching calls or alone."""
        with self.cond:
            if self.failed is not None:
                raise RuntimeError("lockstep: another reference failed: %r" % (self.failed,))
            mine = self._Call(mod, x)
            self.posted.append(mine)
            group = self._take()
            while group is None and not mine.taken:
                self.cond.wait()
                if self.failed is not None and not mine.taken:
                    self.posted.remove(mine)
                    raise RuntimeError("lockstep: another reference failed: %r" % (self.failed,))
                group = self._take()
            if group is None:  # another thread computes this call's group
                while mine.result is None and mine.error is None:
                    self.cond.wait()
                if mine.error is not None:
                    raise RuntimeError("lockstep: the grouped call failed") from mine.error
                return mine.result
        try:
            for c in group:
                if c.mod is not mod or c.x.shape != x.shape:
                    raise RuntimeError("lockstep: the references are out of step (%s %s against "
                                       "%s %s)" % (type(mod).__name__, tuple(x.shape),
                                                   type(c.mod).__name__, tuple(c.x.shape)))
            ys = run([c.x for c in group])
        except BaseException as e:
            with self.cond:
                for c in group:
                    if c is not mine:
                        c.error = e
                self.cond.notify_all()
            raise
        with self.cond:
            for c, y in zip(group, ys):
                c.result = y
            self.cond.notify_all()
        return mine.result


def run_lockstep(lockstep, first, *others):
    """first() on this thread and each of others() on a new one, grouped through `lockstep`
    (whose split_linears must be active; lockstep.members == 1 + len(others)). Returns their
    results in order."""
    boxes = [{} for _ in others]

    def target(fn, box):
        try:
            _worker_init()  # this thread's torch ops on one thread too, without autograd
            box["result"] = fn()
        except BaseException as e:  # re-raised on the caller's thread
            box["error"] = e
            lockstep.leave(e)
        else:
            lockstep.leave()

    threads = [threading.Thread(target=target, args=(fn, box), name="gen-golden-lockstep-%d" % i)
               for i, (fn, box) in enumerate(zip(others, boxes))]
    for t in threads:
        t.start()
    try:
        a = first()
    except BaseException as e:
        lockstep.leave(e)
        for t in threads:
            t.join()
        raise
    lockstep.leave()
    for t in threads:
        t.join()
    for box in boxes:
        if "error" in box:
            raise box["error"]
    return (a,) + tuple(box["result"] for box in boxes)


class TokenFeed:
    """The greedy reference's tokens as it chooses them, for the calibration forward teacher-
    forced on them in the same lockstep: feed[i] waits for token i."""

    def __init__(self):
        self.cond = threading.Condition()
        self.tokens = []
        self.closed = False

    def put(self, tok):
        with self.cond:
            self.tokens.append(int(tok))
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def __getitem__(self, i):
        with self.cond:
            while len(self.tokens) <= i and not self.closed:
                self.cond.wait()
            if len(self.tokens) <= i:
                raise RuntimeError("the greedy reference ended before its token %d" % i)
            return self.tokens[i]
