"""What every kind of set shares, imported by kernels/, models/, batches.py and the sampling sets
and importing none of them: the seeds (seeds.py), the numeric types and the rounding to them
(dtypes.py), every model configuration and the model set table (configs.py), the scaled-RoPE spec
(rope_scaling.py) and the set writer (manifest.py). Nothing here is run at import but the tables'
own checks."""
