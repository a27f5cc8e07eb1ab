# The middle: checked kernel -> optimised tile-level SSA.
#
#   ir.py       Values, Ops, Blocks and Functions (structured SSA) and the verifier
#   irgen.py    CheckedKernel -> ir.Function at tile level
#   passes/     fold, cse, dce, licm, fuse-dot: Function -> Function, one pass a file
#   index_reach.py  the 32-bit values slice starts are computed from, which a
#               launch with 64-bit indices checks for wrapping
#
# The same IR classes carry the thread-level program that lowering produces.
