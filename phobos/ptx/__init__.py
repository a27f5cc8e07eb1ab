# The PTX producer: thread-level Function -> PTX text.
#
#   isel.py      table: IR opcode -> PTX instructions on virtual registers
#   regalloc.py  liveness, linear scan per register class, peak pressure
#   emit.py      the one place PTX text is formatted
