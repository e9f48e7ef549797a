"""Every set the generator writes, as incremental.Job: its name and directory, its labels (what
--sets matches), the inputs its key is computed from and how it is built. The tables themselves
are kernels/cases.py (kernel cases), common/configs.py (model sets) and batches.py (batch sets).
"""

import os

import batches
from common import configs, manifest
from common.seeds import case_seed
from incremental import Job, describe
from kernels import cases as kernel_cases
from kernels import ops as kernel_ops
from models import build as model_build
from models import generation, threads

KINDS = ("kernels", "models", "batches")


def _write_case(case, set_dir, ahead=None):
    seed, params, inputs, expected = kernel_cases.build(case)
    return manifest.write_set(set_dir, op=case.op, case=case.name, tier=case.tier, seed=seed,
                              params=params, inputs=inputs, expected=expected)


# Ops whose inputs are no 16-bit storage type: their label is the inputs' type, not f16.
INPUT_DTYPE = {"gemm_fp8": "f8e4m3"}


def kernel_job(case):
    """A kernel case: labels "kernels", its op and its input dtype (f16, bf16, f32; f8e4m3)."""
    return Job("kernels", "%s/%s" % (case.op, case.name),
               "/".join(("kernels", case.op, case.name)),
               ("kernels", case.op, case.kwargs.get("dtype", INPUT_DTYPE.get(case.op, "f16"))),
               {"op": case.op, "case": case.name, "seed": case_seed(case.op, case.name),
                "kwargs": describe(case.kwargs)},
               lambda set_dir, ahead=None: _write_case(case, set_dir))


def kernel_jobs(tier, ops=None):
    """The cases of `tier` for ops (default: every op), op by op in OPS order."""
    return [kernel_job(c) for op in (ops or list(kernel_ops.OPS))
            for c in kernel_cases.cases_for(tier, [op])]


def model_job(spec):
    """A synthetic model set: labels "models", its family and its dtype."""
    return Job("models", spec.name, "models/" + spec.name, ("models", spec.family, spec.dtype),
               {"spec": describe(spec._asdict()), "seed": generation.set_seed(spec.name),
                "threads": threads.tier_threads(spec.tier)},
               lambda set_dir, ahead=None: model_build.build_synthetic(spec, set_dir, ahead),
               spec=spec)


def model_jobs(tier, names=None, layers=None):
    specs = configs.models_for(tier, names)
    if layers:
        specs = [configs.with_layers(s, layers) for s in specs]
    return [model_job(s) for s in specs]


def checkpoint_job(src, name, tier):
    """The set of a real checkpoint directory: never reused (the key cannot see its files)."""
    return Job("models", name, "models/" + name, ("models", "checkpoint"), None,
               lambda set_dir, ahead=None: model_build.build_checkpoint(src, name, tier, set_dir))


def batch_job(spec, models_root):
    """A batch set, computed from the model set models_root/models/<model>: labels "batches",
    the model set and its family. Its key includes the model set's; a set on disk made from
    other checkpoint files than the model set's now is not reused."""
    model = configs.BY_NAME[spec.model]

    def check(m):
        mm = manifest.read_manifest(os.path.join(models_root, "models", spec.model))
        if mm is None or m.get("params", {}).get("checkpoint") != batches.checkpoint_params(mm):
            return "model set %s changed" % spec.model
        return None

    return Job("batches", spec.name, "batches/" + spec.name, ("batches", spec.model, model.family),
               {"spec": describe(spec._asdict()), "seed": batches.set_seed(spec.name),
                "prompt_lens": batches.prompt_lens(spec),
                "threads": threads.tier_threads(spec.tier)},
               lambda set_dir, ahead=None: batches.build(spec, set_dir, models_root),
               depends=model_job(model), spec=spec, check=check)


def batch_jobs(tier, names=None, models_root=""):
    return [batch_job(s, models_root) for s in batches.batches_for(tier, names)]


def all_jobs(tier):
    """Every set of a tier's tables, kernels then models then batches (as `make golden-full`
    writes them)."""
    return kernel_jobs(tier) + model_jobs(tier) + batch_jobs(tier)
