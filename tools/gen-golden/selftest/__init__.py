"""`python3 tools/gen-golden selftest`: the references checked against independent code, one
module per kind of set (kernels.py, models.py, batches.py, sampling.py), and the generator's own
structure (imports.py: no import cycle)."""
