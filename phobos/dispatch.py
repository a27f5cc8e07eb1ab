# One dispatch convention for every stage that walks a tree or a list of ops.
#
# A stage keeps a `Dispatch` table from a key (an AST node class, an IR
# opcode, a builtin rule name) to the function that handles it, filled by
# decorating the handlers where they are defined:
#
#     RULES = Dispatch("statement")
#
#     class Checker:
#         @RULES.on(ast.Let)
#         def let(self, s): ...
#
#         def stmt(self, s):
#             return RULES.lookup(type(s))(self, s)
#
# The handlers of one table may live in several modules (lowering keeps one
# module per concern); each registers itself on import, so the modules never
# import each other.  A key registered twice is a bug, reported at import.
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any


class Dispatch:
    """A table from keys to the functions that handle them."""

    def __init__(self, what: str):
        self.what = what  # what the keys name, for messages ("statement", "IR opcode")
        self.table: dict[Hashable, Callable[..., Any]] = {}

    def on(self, *keys: Hashable) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: the function handles each of `keys`."""

        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            for key in keys:
                if key in self.table:
                    raise RuntimeError(f"{self.what} {key!r} has two handlers: "
                                       f"{self.table[key].__qualname__} and {handler.__qualname__}")
                self.table[key] = handler
            return handler

        return register

    def get(self, key: Hashable) -> Callable[..., Any] | None:
        return self.table.get(key)

    def lookup(self, key: Hashable) -> Callable[..., Any]:
        """The handler of `key`; a KeyError naming the key when there is none (a compiler bug)."""
        try:
            return self.table[key]
        except KeyError:
            raise KeyError(f"no handler for {self.what} {key!r}") from None

    def __contains__(self, key: Hashable) -> bool:
        return key in self.table

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.table)
