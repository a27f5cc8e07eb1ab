# Kernels called like functions: mod.k(...).
#
#   launcher.py  Module / KernelFunction: load, bind, choose a configuration, launch
#   binding.py   Python arguments -> BoundCall (sizes, dtypes, scalars checked)
#   autotune.py  screening and timing of configurations
#   cache.py     compiled kernels, ptxas reports and tuning choices on disk
#
# What enters is source text and a call's arguments; what leaves is a launch
# on a backend (phobos.run).
