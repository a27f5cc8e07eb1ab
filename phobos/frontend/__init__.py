# The front end: source text -> checked kernel.
#
#   lexer.py     text -> tokens (each with its Loc)
#   parser.py    tokens -> ast.Program (PLY LALR grammar, EBNF in each rule);
#                lalr_tables.json keeps its tables as data (python -m
#                phobos.frontend.parser writes them)
#   ast.py       the syntax tree; every node carries a Loc
#   builtins.py  the one registry of builtin functions that the checker, the
#                interpreter and the docs read
#   sema.py      names, types, shapes and constants under one autotune
#                configuration -> CheckedKernel (errors: PhobosError with a Loc):
#                the entry points check_kernel and check_program
#   checker/     the checker itself, one module per concern (its __init__.py
#                lists them)
#   launch_rules.py  @derive, @require and @key: checked, and evaluated per
#                call for the launcher (which configurations serve the sizes)
#
# Nothing here imports a later stage.
