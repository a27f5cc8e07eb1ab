# The Phobos parser: tokens -> AST (phobos/frontend/ast.py).
#
# A PLY LALR grammar in the style of pycparser: one `p_` function per rule with
# the rule in its docstring (PLY reads it) and the EBNF it implements above it,
# operator precedence in PLY's `precedence` table rather than in layered rules.
# The tables are made when the first parser is made, by PLY's own table
# generator called directly (`_lalr_parser`): `yacc.yacc()` would first import
# a `parsetab` module beside this one and run it, so a stray or planted
# parsetab.py could change the grammar or break every parse.  No parser.out.
# The tables are also kept beside this file as data, lalr_tables.json, which a
# process reads instead of generating them (a few milliseconds instead of 0.15 s
# and more, in every process and in every compile worker) where its signature,
# PLY's of the grammar's rules, tokens and precedence, is this grammar's; reading
# JSON runs nothing.  `python -m phobos.frontend.parser` writes it, and
# tests/test_frontend.py fails while it is out of date.
#
# A syntax error raises ParseError at the offending token and
# names the tokens that could have come there, found by running the LALR tables
# forward from the parser's stack (the action table alone over-approximates:
# LALR merges states, so a `}` ending a kernel would seem to accept `else`).
# An error at the end of the file, or at a token that cannot stand inside
# brackets, caused by a bracket left open says which one, with a note at it.
#
# The tree a parse returns is at most MAX_NESTING levels deep, so that the
# recursive walks of later stages stay far from Python's recursion limit.
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import ply.yacc as yacc

from . import ast
from .builtins import BUILTINS
from ..errors import Loc, Note, ParseError, PhobosError, SemanticError, SourceFile
from .lexer import Lexer, Token, scan

TOKEN_TEXT = {
    "PLUS": "'+'", "MINUS": "'-'", "TIMES": "'*'", "DIVIDE": "'/'", "MOD": "'%'",
    "EQ": "'=='", "NE": "'!='", "LT": "'<'", "LE": "'<='", "GT": "'>'", "GE": "'>='",
    "AND": "'&&'", "OR": "'||'", "NOT": "'!'", "ASSIGN": "'='", "PLUSEQ": "'+='",
    "MINUSEQ": "'-='", "TIMESEQ": "'*='", "DIVEQ": "'/='", "LPAREN": "'('", "RPAREN": "')'",
    "LBRACKET": "'['", "RBRACKET": "']'", "LBRACE": "'{'", "RBRACE": "'}'", "COMMA": "','",
    "SEMI": "';'", "COLON": "':'", "SLICE": "':+'", "AT": "'@'", "NEWLINE": "a newline",
    "ID": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string", "$end": "end of file",
    "AMP": "'&'", "PIPE": "'|'", "CARET": "'^'", "TILDE": "'~'", "SHL": "'<<'", "SHR": "'>>'",
    "ANDEQ": "'&='", "OREQ": "'|='", "XOREQ": "'^='", "SHLEQ": "'<<='", "SHREQ": "'>>='", "ARROW": "'->'",
}


COMPARISONS = {"EQ", "NE", "LT", "LE", "GT", "GE"}
BINARY_OPERATORS = COMPARISONS | {"PLUS", "MINUS", "TIMES", "DIVIDE", "MOD", "AND", "OR",
                                  "AMP", "PIPE", "CARET", "SHL", "SHR"}
EXPRESSION_STARTS = {"ID", "INT", "FLOAT", "STRING", "TRUE", "FALSE", "LPAREN", "LBRACKET", "MINUS", "NOT",
                     "TILDE"}
STATEMENT_STARTS = {"LET", "VAR", "FOR", "WHILE", "IF", "RETURN", "BREAK", "CONTINUE", "ID", "INT", "FLOAT",
                    "STRING", "LPAREN", "MINUS", "NOT", "TILDE"}
COMPOUND_ASSIGNMENTS = {"PLUSEQ", "MINUSEQ", "TIMESEQ", "DIVEQ", "ANDEQ", "OREQ", "XOREQ", "SHLEQ", "SHREQ"}
CLOSERS = {"LPAREN": "RPAREN", "LBRACKET": "RBRACKET", "LBRACE": "RBRACE"}
# Tokens that cannot appear inside () or []: meeting one there means a bracket was left open.
NEVER_IN_BRACKETS = {"LET", "VAR", "FOR", "WHILE", "IF", "ELSE", "KERNEL", "FN", "RETURN", "BREAK", "CONTINUE",
                     "AT", "LBRACE", "RBRACE", "SEMI"} | COMPOUND_ASSIGNMENTS
MAX_NESTING = 100


def _describe(tok_type: str) -> str:
    if tok_type in TOKEN_TEXT:
        return TOKEN_TEXT[tok_type]
    return f"'{tok_type.lower()}'"  # keywords


class _TokenStream:
    """Feeds a list of tokens to PLY, which asks for them one at a time."""

    def __init__(self, tokens: list[Token]):
        self.token = partial(next, iter(tokens), None)  # None at the end, as PLY wants


def _innermost_unclosed(tokens: list[Token]) -> Token | None:
    """The last bracket of `tokens` that is still open at their end."""
    open_brackets: list[Token] = []
    for tok in tokens:
        if tok.type in CLOSERS:
            open_brackets.append(tok)
        elif open_brackets and tok.type == CLOSERS[open_brackets[-1].type]:
            open_brackets.pop()
    return open_brackets[-1] if open_brackets else None


def _check_nesting(program: ast.Program) -> None:
    """Reject a tree deeper than MAX_NESTING, at the first node (in source order) beyond it."""
    stack = [(program, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            advice = "; split the expression with 'let'" if isinstance(node, ast.Expr) else ""
            raise ParseError(f"nested too deeply: at most {MAX_NESTING} levels of expressions and blocks "
                             f"are allowed{advice}", node.loc)
        stack.extend((child, depth + 1) for child in reversed(ast.children(node)))


class Parser:
    tokens = Lexer.tokens

    precedence = (
        ("left", "OR"),
        ("left", "AND"),
        ("nonassoc", "EQ", "NE", "LT", "LE", "GT", "GE"),
        ("left", "PIPE"),
        ("left", "CARET"),
        ("left", "AMP"),
        ("left", "SHL", "SHR"),
        ("left", "PLUS", "MINUS"),
        ("left", "TIMES", "DIVIDE", "MOD"),
        ("right", "UNARY"),
    )

    def __init__(self):
        self.filename = "<source>"
        self.source_tokens: list[Token] = []
        self.end = Loc(self.filename, 1, 1)
        self.parser = _lalr_parser(self, "program")

    def parse(self, text: str, filename: str = "<source>") -> ast.Program:
        """Parse one file; raises LexError or ParseError on the first problem."""
        self.filename = filename
        self.source_tokens, self.end = scan(text, filename)
        try:
            prog = self.parser.parse(lexer=_TokenStream(self.source_tokens), tracking=False)
        finally:
            self.source_tokens = []  # needed only while parsing, to explain a syntax error
        _check_nesting(prog)
        return prog

    # --------------------------------------------------------------- helpers
    @staticmethod
    def _loc(p, i: int) -> Loc:
        """The location of the i-th symbol of a production: a token's, or a node's."""
        sym = p.slice[i]
        if isinstance(sym, Token):
            return sym.loc
        return p[i].loc

    # ------------------------------------------------------------ top level
    # program ::= { kernel | function }
    def p_program(self, p):
        """program : item_list"""
        kernels = [x for x in p[1] if isinstance(x, ast.Kernel)]
        functions = [x for x in p[1] if isinstance(x, ast.Function)]
        by_name: dict[str, ast.Function] = {}
        for f in functions:
            if f.name in BUILTINS:
                raise ParseError(f"'{f.name}' is a builtin function; give the device function another name", f.loc)
            if f.name in by_name:
                raise ParseError(f"function '{f.name}' is defined twice", f.loc,
                                 [Note("previous definition is here", by_name[f.name].loc)])
            by_name[f.name] = f
        for k in kernels:
            k.functions = by_name
        p[0] = ast.Program(Loc(self.filename, 1, 1), kernels, functions)

    def p_item_list(self, p):
        """item_list : item_list kernel
                     | item_list function
                     | empty"""
        p[0] = p[1] + [p[2]] if len(p) == 3 else []

    # function ::= 'fn' NAME '(' [fn_param {',' fn_param} [',']] ')' ['->' type] block
    def p_function(self, p):
        """function : FN ID LPAREN fn_params RPAREN opt_result block"""
        p[0] = ast.Function(self._loc(p, 2), p[2], p[4], p[6], p[7])

    def p_fn_params(self, p):
        """fn_params : fn_param_list
                     | fn_param_list COMMA
                     | empty"""
        p[0] = p[1] or []

    def p_fn_param_list(self, p):
        """fn_param_list : fn_param_list COMMA fn_param
                         | fn_param"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    # fn_param ::= NAME [':' type]
    def p_fn_param(self, p):
        """fn_param : ID
                    | ID COLON type"""
        p[0] = ast.FnParam(self._loc(p, 1), p[1], p[3] if len(p) == 4 else None)

    def p_opt_result(self, p):
        """opt_result : ARROW type
                      | empty"""
        p[0] = p[2] if len(p) == 3 else None

    # kernel ::= decorator* 'kernel' NAME '(' [param {',' param} [',']] ')' block
    def p_kernel(self, p):
        """kernel : decorator_list KERNEL ID LPAREN params RPAREN block"""
        p[0] = ast.Kernel(self._loc(p, 2), p[3], p[5], p[1], p[7])

    def p_decorator_list(self, p):
        """decorator_list : decorator_list decorator
                          | empty"""
        p[0] = p[1] + [p[2]] if len(p) == 3 else []

    # decorator ::= '@' NAME '(' [decorator_item {',' decorator_item} [',']] ')'
    # decorator_item ::= autotune_param | NAME '=' expr | expr
    # (which items a decorator takes is the checker's business: @autotune the first kind,
    # @derive the second, @require and @key the third)
    def p_decorator(self, p):
        """decorator : AT ID LPAREN decorator_items RPAREN"""
        items = p[4]
        params = [item for item in items if isinstance(item, ast.AutotuneParam)]
        args = [item for item in items if not isinstance(item, ast.AutotuneParam)]
        p[0] = ast.Decorator(self._loc(p, 1), p[2], params, args)

    def p_decorator_items(self, p):
        """decorator_items : decorator_item_list
                           | decorator_item_list COMMA
                           | empty"""
        p[0] = p[1] or []

    def p_decorator_item_list(self, p):
        """decorator_item_list : decorator_item_list COMMA decorator_item
                               | decorator_item"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    def p_decorator_item(self, p):
        """decorator_item : autotune_param
                          | arg"""
        p[0] = p[1]

    # autotune_param ::= NAME 'in' '[' expr {',' expr} ']'
    def p_autotune_param(self, p):
        """autotune_param : ID IN LBRACKET expr_list RBRACKET"""
        p[0] = ast.AutotuneParam(self._loc(p, 1), p[1], p[4])

    def p_params(self, p):
        """params : param_list
                  | param_list COMMA
                  | empty"""
        p[0] = p[1] or []

    def p_param_list(self, p):
        """param_list : param_list COMMA param
                      | param"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    # param ::= NAME ':' type
    def p_param(self, p):
        """param : ID COLON type"""
        p[0] = ast.Param(self._loc(p, 1), p[1], p[3])

    # type ::= 'tensor' '<' DTYPE '>' '[' expr {',' expr} ']'
    #        | 'tile' '<' DTYPE '>' '[' expr {',' expr} ']'
    #        | DTYPE
    def p_type_shaped(self, p):
        """type : TENSOR LT ID GT LBRACKET expr_list RBRACKET
                | TILE LT ID GT LBRACKET expr_list RBRACKET"""
        p[0] = ast.TypeExpr(self._loc(p, 1), p[1], p[3], self._loc(p, 3), p[6])

    def p_type_scalar(self, p):
        """type : ID"""
        p[0] = ast.TypeExpr(self._loc(p, 1), "scalar", p[1], self._loc(p, 1))

    # ----------------------------------------------------------- statements
    # block ::= '{' [stmt] {(NEWLINE | ';') [stmt]} '}'
    def p_block(self, p):
        """block : LBRACE stmt_seq RBRACE"""
        p[0] = ast.Block(self._loc(p, 1), [s for s in p[2] if s is not None])

    def p_stmt_seq(self, p):
        """stmt_seq : stmt_seq separator opt_stmt
                    | opt_stmt"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    def p_separator(self, p):
        """separator : NEWLINE
                     | SEMI"""

    def p_opt_stmt(self, p):
        """opt_stmt : stmt
                    | empty"""
        p[0] = p[1]

    # stmt ::= ('let' | 'var') NAME [':' type] '=' expr
    def p_stmt_let(self, p):
        """stmt : LET ID opt_type ASSIGN expr
                | VAR ID opt_type ASSIGN expr"""
        p[0] = ast.Let(self._loc(p, 1), p[2], self._loc(p, 2), p[3], p[5], p[1] == "var")

    # stmt ::= ('let' | 'var') '(' NAME {',' NAME} ')' '=' expr
    def p_stmt_unpack(self, p):
        """stmt : LET LPAREN name_list RPAREN ASSIGN expr
                | VAR LPAREN name_list RPAREN ASSIGN expr"""
        names = p[3]
        p[0] = ast.Unpack(self._loc(p, 1), [n for n, _ in names], [loc for _, loc in names], p[6], p[1] == "var")

    def p_name_list(self, p):
        """name_list : name_list COMMA ID
                     | ID"""
        if len(p) == 4:
            p[0] = p[1] + [(p[3], self._loc(p, 3))]
        else:
            p[0] = [(p[1], self._loc(p, 1))]

    def p_opt_type(self, p):
        """opt_type : COLON type
                    | empty"""
        p[0] = p[2] if len(p) == 3 else None

    # stmt ::= target ('=' | '+=' | '-=' | '*=' | '/=' | '&=' | '|=' | '^=' | '<<=' | '>>=') expr
    # target ::= NAME | postfix '[' ... ']'
    def p_stmt_assign(self, p):
        """stmt : expr ASSIGN expr
                | expr PLUSEQ expr
                | expr MINUSEQ expr
                | expr TIMESEQ expr
                | expr DIVEQ expr
                | expr ANDEQ expr
                | expr OREQ expr
                | expr XOREQ expr
                | expr SHLEQ expr
                | expr SHREQ expr"""
        target = p[1]
        if not isinstance(target, (ast.Name, ast.Index)):
            raise ParseError(f"cannot assign to this expression: the left side of '{p[2]}' must be a "
                             f"variable or a tensor slice, like x or T[i :+ 64]", ast.start_loc(target))
        p[0] = ast.Assign(self._loc(p, 2), target, p[2], p[3])

    # stmt ::= expr          (a call evaluated for its effect)
    def p_stmt_expr(self, p):
        """stmt : expr"""
        p[0] = ast.ExprStmt(p[1].loc, p[1])

    # stmt ::= 'for' NAME 'in' 'range' '(' expr ',' expr [',' expr] ')' block
    def p_stmt_for(self, p):
        """stmt : FOR ID IN ID LPAREN call_args RPAREN block"""
        if p[4] != "range":
            raise ParseError(f"expected 'range' after 'in', found '{p[4]}'", self._loc(p, 4))
        args = p[6]
        pos = [a for a in args if not isinstance(a, ast.Keyword)]
        if len(pos) != len(args) or len(pos) not in (2, 3):
            raise ParseError("range takes (start, end) or (start, end, step)", self._loc(p, 4))
        p[0] = ast.For(self._loc(p, 1), p[2], self._loc(p, 2), pos[0], pos[1],
                       pos[2] if len(pos) == 3 else None, p[8])

    # stmt ::= 'while' expr block
    def p_stmt_while(self, p):
        """stmt : WHILE expr block"""
        p[0] = ast.While(self._loc(p, 1), p[2], p[3])

    # stmt ::= 'break' | 'continue' | 'return' [expr]
    def p_stmt_jump(self, p):
        """stmt : BREAK
                | CONTINUE
                | RETURN
                | RETURN expr"""
        loc = self._loc(p, 1)
        if p[1] == "break":
            p[0] = ast.Break(loc)
        elif p[1] == "continue":
            p[0] = ast.Continue(loc)
        else:
            p[0] = ast.Return(loc, p[2] if len(p) == 3 else None)

    # stmt ::= 'if' expr block ['else' (block | if_stmt)]
    def p_stmt_if(self, p):
        """stmt : if_stmt"""
        p[0] = p[1]

    def p_if_stmt(self, p):
        """if_stmt : IF expr block
                   | IF expr block ELSE block
                   | IF expr block ELSE if_stmt"""
        orelse = None
        if len(p) == 6:
            orelse = p[5] if isinstance(p[5], ast.Block) else ast.Block(p[5].loc, [p[5]])
        p[0] = ast.If(self._loc(p, 1), p[2], p[3], orelse)

    # ---------------------------------------------------------- expressions
    # expr ::= expr BINOP expr | ('-' | '!') expr | postfix
    def p_expr_binary(self, p):
        """expr : expr OR expr
                | expr AND expr
                | expr EQ expr
                | expr NE expr
                | expr LT expr
                | expr LE expr
                | expr GT expr
                | expr GE expr
                | expr PLUS expr
                | expr MINUS expr
                | expr TIMES expr
                | expr DIVIDE expr
                | expr MOD expr
                | expr AMP expr
                | expr PIPE expr
                | expr CARET expr
                | expr SHL expr
                | expr SHR expr"""
        p[0] = ast.Binary(self._loc(p, 2), p[2], p[1], p[3])

    def p_expr_unary(self, p):
        """expr : MINUS expr %prec UNARY
                | NOT expr %prec UNARY
                | TILDE expr %prec UNARY"""
        p[0] = ast.Unary(self._loc(p, 1), p[1], p[2])

    def p_expr_postfix(self, p):
        """expr : postfix"""
        p[0] = p[1]

    # postfix ::= primary {'[' subscript {',' subscript} ']'}
    def p_postfix_index(self, p):
        """postfix : postfix LBRACKET subscripts RBRACKET"""
        p[0] = ast.Index(self._loc(p, 2), p[1], p[3])

    def p_postfix_primary(self, p):
        """postfix : primary"""
        p[0] = p[1]

    def p_subscripts(self, p):
        """subscripts : subscripts COMMA subscript
                      | subscript"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    # subscript ::= expr ':+' expr | expr
    def p_subscript(self, p):
        """subscript : expr SLICE expr
                     | expr"""
        if len(p) == 4:
            p[0] = ast.Slice(self._loc(p, 2), p[1], p[3])
        else:
            p[0] = p[1]

    # primary ::= INT | FLOAT | STRING | 'true' | 'false' | NAME | call | '(' expr ')'
    #           | '(' expr ',' expr {',' expr} ')' | '[' expr {',' expr} ']'
    def p_primary_int(self, p):
        """primary : INT"""
        p[0] = ast.IntLit(self._loc(p, 1), *p[1])

    def p_primary_float(self, p):
        """primary : FLOAT"""
        p[0] = ast.FloatLit(self._loc(p, 1), p[1][0], p[1][1])

    def p_primary_string(self, p):
        """primary : STRING"""
        p[0] = ast.StrLit(self._loc(p, 1), p[1])

    def p_primary_tuple(self, p):
        """primary : LPAREN expr COMMA expr_list RPAREN"""
        p[0] = ast.TupleLit(self._loc(p, 1), [p[2]] + p[4])

    def p_primary_bool(self, p):
        """primary : TRUE
                   | FALSE"""
        p[0] = ast.BoolLit(self._loc(p, 1), p[1] == "true")

    def p_primary_name(self, p):
        """primary : ID"""
        p[0] = ast.Name(self._loc(p, 1), p[1])

    def p_primary_paren(self, p):
        """primary : LPAREN expr RPAREN"""
        p[0] = p[2]

    def p_primary_list(self, p):
        """primary : LBRACKET expr_list RBRACKET"""
        p[0] = ast.ListLit(self._loc(p, 1), p[2])

    # call ::= NAME '(' [arg {',' arg} [',']] ')'     arg ::= expr | NAME '=' expr
    def p_primary_call(self, p):
        """primary : ID LPAREN call_args RPAREN"""
        args = p[3]
        pos = [a for a in args if not isinstance(a, ast.Keyword)]
        kws = [a for a in args if isinstance(a, ast.Keyword)]
        for i, a in enumerate(args):
            if not isinstance(a, ast.Keyword) and any(isinstance(b, ast.Keyword) for b in args[:i]):
                raise ParseError("positional argument after a keyword argument", a.loc)
        p[0] = ast.Call(self._loc(p, 1), p[1], pos, kws)

    def p_call_args(self, p):
        """call_args : arg_list
                     | arg_list COMMA
                     | empty"""
        p[0] = p[1] or []

    def p_arg_list(self, p):
        """arg_list : arg_list COMMA arg
                    | arg"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    def p_arg(self, p):
        """arg : expr
               | ID ASSIGN expr"""
        p[0] = ast.Keyword(self._loc(p, 1), p[1], p[3]) if len(p) == 4 else p[1]

    def p_expr_list(self, p):
        """expr_list : expr_list COMMA expr
                     | expr"""
        p[0] = p[1] + [p[3]] if len(p) == 4 else [p[1]]

    def p_empty(self, p):
        """empty :"""
        p[0] = None

    # ---------------------------------------------------------------- errors
    def p_error(self, tok):
        expected = self._expected()
        if tok is None:
            unclosed = _innermost_unclosed(self.source_tokens)
            if unclosed is not None:
                raise ParseError(f"unexpected end of file; a {_describe(CLOSERS[unclosed.type])} is missing",
                                 self.end, [Note(f"to close the {_describe(unclosed.type)} opened here",
                                                 unclosed.loc)])
            raise ParseError(f"unexpected end of file{self._hint(expected)}", self.end)
        if tok.type in COMPARISONS and self._top_is_comparison():
            raise ParseError("comparisons cannot be chained; use '&&' between them", tok.loc)
        if tok.type == "NEWLINE":
            what = "end of line"
        elif tok.type in ("INT", "FLOAT"):
            what = f"number '{tok.value[0] if tok.type == 'INT' else tok.value[1]}'"
        elif tok.type == "ID":
            what = f"name '{tok.value}'"
        else:
            what = _describe(tok.type)
        if tok.type in NEVER_IN_BRACKETS:
            unclosed = _innermost_unclosed(self.source_tokens[:self.source_tokens.index(tok)])
            if unclosed is not None and unclosed.type != "LBRACE":
                raise ParseError(f"unexpected {what}; a {_describe(CLOSERS[unclosed.type])} is missing",
                                 tok.loc, [Note(f"to close the {_describe(unclosed.type)} opened here",
                                                unclosed.loc)])
        if tok.type == "ELSE" and "ELSE" not in expected:
            hint = "; 'else' must follow the '}' of an if block"
        elif expected & {"NEWLINE", "SEMI"} and tok.type in STATEMENT_STARTS:
            hint = f"; put a newline or ';' before {what}"
        else:
            hint = self._hint(expected)
        raise ParseError(f"unexpected {what}{hint}", tok.loc)

    @staticmethod
    def _hint(expected: set[str]) -> str:
        """'; expected ...' naming what could have come, when that is a short list."""
        expected = set(expected)
        names = []
        if "INT" in expected:  # the parser was at the start of an expression
            expected -= EXPRESSION_STARTS
            names.append("an expression")
        if "PLUS" in expected:  # ... or after a complete one
            expected -= BINARY_OPERATORS
            names.append("an operator")
        names = sorted(_describe(t) for t in expected) + names
        if not names or len(names) > 6:
            return ""
        return f"; expected {names[0]}" if len(names) == 1 else f"; expected one of {', '.join(names)}"

    def _top_is_comparison(self) -> bool:
        """True when the stack ends in `expr CMP expr`, as in `a < b < c`."""
        try:
            return self.parser.symstack[-2].type in COMPARISONS
        except (AttributeError, IndexError):
            return False

    def _expected(self) -> set[str]:
        """The tokens that the parser could shift next, from the state it is in.

        The action table of the current state lists too many (LALR shares states
        between contexts), so each candidate is run forward through the reductions
        it triggers, on a copy of the stack, until it is shifted or rejected."""
        table = self.parser
        try:
            states = table.statestack
            candidates = [t for t in table.action[states[-1]] if t != "error"]
        except (AttributeError, IndexError, KeyError):
            return set()
        return {t for t in candidates if self._accepts(states, t, table)}

    @staticmethod
    def _accepts(states: list[int], tok_type: str, table) -> bool:
        """Whether the parser, in the states `states`, would shift `tok_type` after the
        reductions it calls for."""
        stack = list(states)
        while True:
            action = table.action[stack[-1]].get(tok_type)
            if action is None:
                return False
            if action >= 0:  # a shift, or accepting the whole input
                return True
            prod = table.productions[-action]
            if prod.len:
                del stack[-prod.len:]
            stack.append(table.goto[stack[-1]][prod.name])


_PARSER: Parser | None = None


def parse(text: str, filename: str = "<source>") -> ast.Program:
    """Parse Phobos source into an AST; raises LexError/ParseError."""
    global _PARSER
    if _PARSER is None:
        _PARSER = Parser()
    return _PARSER.parse(text, filename)


def parse_source(src: str, filename: str = "<source>") -> ast.Program:
    """Parse a file, keeping its text for error messages; only PhobosErrors escape."""
    SourceFile.register(filename, src)
    try:
        return parse(src, filename)
    except RecursionError:
        raise PhobosError("the program is nested too deeply", Loc(filename, 1, 1)) from None


def pick_kernel(program: ast.Program, kernel: str | None) -> ast.Kernel:
    """The kernel named `kernel`, or the only one when None; PhobosError otherwise."""
    names = [k.name for k in program.kernels]
    if kernel is None:
        if len(program.kernels) == 1:
            return program.kernels[0]
        if not program.kernels:
            raise SemanticError("the source defines no kernel", program.loc)
        raise PhobosError(f"the source defines several kernels ({', '.join(names)}); choose one with kernel=")
    for k in program.kernels:
        if k.name == kernel:
            return k
    raise PhobosError(f"no kernel named '{kernel}' (the source defines: {', '.join(names) or 'none'})")


def _lalr_parser(rules, start: str) -> yacc.LRParser:
    """A PLY parser for the grammar of the `p_` methods of `rules`, its LALR tables the kept ones
    (TABLES) where they are this grammar's, else built here in memory: what `yacc.yacc()` does, without
    looking for a table module to import first."""
    info, grammar = _grammar(rules, start)
    tables = _kept_tables(info.signature()) or yacc.LRGeneratedTable(grammar, "LALR", yacc.NullLogger())
    tables.bind_callables(info.pdict)
    return yacc.LRParser(tables, info.error_func)


def _grammar(rules, start: str) -> tuple[yacc.ParserReflect, yacc.Grammar]:
    """The grammar of the `p_` methods of `rules`, checked, and what PLY read of them."""
    info = yacc.ParserReflect({name: getattr(rules, name) for name in dir(rules)}, log=yacc.NullLogger())
    info.get_all()
    if info.error or info.validate_all():
        raise yacc.YaccError("the Phobos grammar does not build")
    grammar = yacc.Grammar(info.tokens)
    for term, assoc, level in info.preclist:
        grammar.set_precedence(term, assoc, level)
    for funcname, (file, line, name, symbols) in info.grammar:
        grammar.add_production(name, symbols, funcname, file, line)
    grammar.set_start(start)
    if grammar.undefined_symbols() or grammar.infinite_cycles() or grammar.unused_precedence():
        raise yacc.YaccError("the Phobos grammar is inconsistent")
    return info, grammar


#: The grammar's LALR tables, kept as data (see the header).
TABLES = Path(__file__).with_name("lalr_tables.json")


def _kept_tables(signature: str) -> yacc.LRTable | None:
    """The tables in TABLES when they were made for a grammar of this signature, else None."""
    try:
        kept = json.loads(TABLES.read_text())
        if kept["signature"] != signature:
            return None
        tables = yacc.LRTable()
        tables.lr_action = {int(state): actions for state, actions in kept["action"].items()}
        tables.lr_goto = {int(state): gotos for state, gotos in kept["goto"].items()}
        tables.lr_productions = [yacc.MiniProduction(*production) for production in kept["productions"]]
        tables.lr_method = kept["method"]
        return tables
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_tables(path: Path = TABLES) -> Path:
    """Generate the grammar's LALR tables and keep them, as JSON, at `path`."""
    info, grammar = _grammar(Parser(), "program")
    tables = yacc.LRGeneratedTable(grammar, "LALR", yacc.NullLogger())
    kept = {"signature": info.signature(), "method": tables.lr_method,
            "action": {str(state): actions for state, actions in tables.lr_action.items()},
            "goto": {str(state): gotos for state, gotos in tables.lr_goto.items()},
            "productions": [[p.str, p.name, p.len, p.func, Path(p.file).name if p.file else None, p.line]
                            for p in tables.lr_productions]}
    path.write_text(json.dumps(kept, sort_keys=True, separators=(",", ":")) + "\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write_tables()}")
