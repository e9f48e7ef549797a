"""Kernel sets (docs/golden-format.md, "Kernel sets"): inputs.py (the input distributions),
ops.py (one reference function per op), cases.py (the case table and build(case))."""
