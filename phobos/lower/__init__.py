# Lowering: tile-level Function -> thread-level Function.
#
#   lowering.py  tiles onto the threads of a CTA: layouts, masks and the edge
#                contract, dot through shared memory, reductions, pipelines
#   layout.py    where each element of a tile lives (thread digits + registers)
#   mathlib.py   math builtins expanded into PTX-level operations
#
# What leaves holds scalars only, ready for instruction selection (phobos.ptx).
