# Lowering: tile-level Function -> thread-level Function.
#
#   driver.py     lower(func, smem_limit, cp_async, ...): the entry point
#   core.py       the state of one lowering, the HANDLERS table (IR opcode ->
#                 handler), thread coordinates, the shared-memory scratch
#                 buffer and relayout, the loop builder, the walk over ops
#   placement.py  threads per CTA, a layout per tile value, program order
#   fusion.py     which stores are lowered together with their loads
#   ordering.py   which tensor accesses need a barrier before them
#   values.py     params, constants, program ids, arange, element-wise ops,
#                 broadcast, reshape, extract
#   control.py    for, while, if, yield
#   memory.py     loads and stores of slices: the edge contract, bounds and
#                 alignment tests, vector accesses, fused stores
#   dot.py        dot through shared memory: DotPlan, staging, FMA order
#   mma_plan.py   which dots run on the tensor cores, and how (MmaPlan)
#   mma.py        dot on the tensor cores: mma.sync fragments, wgmma
#                 descriptors, the operands' shared-memory layouts
#   pipeline.py   cp.async pipelining of a matrix product's K loop
#   reduce.py     reductions: in thread, butterfly shuffles, across warps
#   scan.py       scans (and reductions with a combine function): in thread,
#                 shfl.up across lanes, across warps and chunks through shared memory
#   indexed.py    gathers, scatters and atomics: an address per element
#   rearrange.py  permute, join, concat through shared memory
#   debug.py      device_print and device_assert: vprintf and trap
#   layout.py     where each element of a tile lives (thread digits + registers)
#   mathlib.py    math builtins (and % of floats) expanded into PTX-level
#                 operations: the f32 approximations, else libm's f64 ones
#   libm.py       the f64 math library (within 2 ulp): its builder and
#                 algorithms; mathlib_tables.py, its constants and fits
#                 (written by tools/fit_mathlib.py)
#
# The concern modules (values ... reduce) register their handlers in
# core.HANDLERS and import core, placement, fusion and layout; of each other,
# only pipeline.py imports memory.py, dot.py and mma.py, dot.py imports
# mma.py, control.py imports pipeline.py, indexed.py imports memory.py,
# reduce.py imports scan.py, rearrange.py imports dot.py and debug.py imports
# indexed.py and values.py; mathlib.py imports libm.py, which imports
# mathlib_tables.py.  mma_plan.py writes no IR: placement.py and
# core.py read its plans.  A new op: a function `handler(low, op)` decorated with
# `@HANDLERS.on("opcode")` in the module of its concern (a new module is
# imported by driver.py).
#
# What leaves holds scalars only, ready for instruction selection (phobos.ptx).
