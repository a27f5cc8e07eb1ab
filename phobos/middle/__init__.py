# The middle: checked kernel -> optimised tile-level SSA.
#
#   ir.py       Values, Ops, Blocks and Functions (structured SSA) and the verifier
#   irgen.py    CheckedKernel -> ir.Function at tile level
#   passes/     fold, cse, dce, licm, fuse-dot: Function -> Function, one pass a file
#
# The same IR classes carry the thread-level program that lowering produces.
