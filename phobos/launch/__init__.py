# Kernels called like functions: mod.k(...).
#
#   launcher.py  Module / KernelFunction: load, bind, choose a configuration, launch
#   binding.py   Python arguments -> BoundCall (sizes, dtypes, scalars checked)
#   fastpath.py  call signatures and the launches prepared per signature
#   autotune.py  screening and timing of configurations
#   parallel.py  configurations compiled and assembled in worker processes
#   cache.py     compiled kernels, ptxas reports, cubins and tuning choices on disk
#   torch_ops.py a kernel registered as a torch custom op
#
# What enters is source text and a call's arguments; what leaves is a launch
# on a backend (phobos.run).
