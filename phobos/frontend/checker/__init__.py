# The checker, by concern: an ast.Kernel and one autotune configuration ->
# a CheckedKernel (names, types, shapes and constants; errors: PhobosError
# with a Loc).  The entry points are in ../sema.py.
#
#   checked.py        what leaves: CheckedKernel and the Symbols, Frames,
#                     Loops and Inlined calls its side tables hold
#   config.py         the autotune space, the configurations checked before
#                     any call, the one a caller asks for
#   core.py           Checker: the state of one check, the tables STATEMENTS,
#                     EXPRESSIONS and BUILTIN_RULES, scopes, the kernel's
#                     parameters and sizes, the walk, the type relations
#   statements.py     let, var, assignment, for, while, if, break, continue,
#                     return
#   expressions.py    literals, names, operators and their folding, indexing
#                     of tensors and tiles
#   calls.py          a call: to a builtin's typing rule or a device function;
#                     reading a builtin's arguments
#   functions.py      device functions: inlined and checked at each call, and
#                     as the combine function of a scan or reduction
#   math_rules.py     typing rules of element-wise builtins and casts
#   tile_rules.py     typing rules of arange, full, reshape, permute, join,
#                     split, concat and dot
#   reduce_rules.py   typing rules of reductions and scans
#   program_rules.py  typing rules of program ids, atomics, device_print and
#                     device_assert
#
# The concern modules register their rules in core's tables and import core
# and checked; of each other, statements.py imports expressions.py, calls.py
# imports functions.py, the *_rules modules import calls.py, reduce_rules.py
# imports functions.py and program_rules.py imports expressions.py - never in
# a circle.  core.py imports config.py and checked.py, and none of the
# concern modules.  A new builtin: its entry in ../builtins.py, and, when no
# typing rule fits, a function `rule(ck, call)` decorated with
# `@BUILTIN_RULES.on("rule")` in the *_rules module of its concern (a new
# module is imported by ../sema.py).
