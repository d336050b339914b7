"""`-k EXPRESSION`: which checks a run selects by words of their ids, as pytest's `-k` selects tests.

An expression is words joined by `and`, `or` and `not`, with parentheses; a word matches a check whose id contains
it, case-insensitively (`-k uneven`, `-k "uneven and not epochs=2"`, `-k "extremes or freshness"`). A word is any
run of characters other than spaces and parentheses. An expression that cannot be read is a HarnessConfigError of
one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import HarnessConfigError

TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
OPERATORS = ("and", "or", "not")


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """A predicate over check ids that is True where `expression` selects the id."""
    tokens = tokenize(expression)
    if not tokens:
        raise HarnessConfigError(f"-k {expression!r}: an empty expression selects nothing")
    parser = _Parser(tokens, expression)
    tree = parser.disjunction()
    if parser.position != len(tokens):
        raise HarnessConfigError(f"-k {expression!r}: unexpected {tokens[parser.position]!r}")
    return lambda check_id: tree(check_id.lower())


def tokenize(expression: str) -> list[str]:
    """The expression's words, operators and parentheses, in order."""
    tokens, position = [], 0
    while position < len(expression):
        match = TOKEN.match(expression, position)
        if match is None:  # only blanks are left
            break
        tokens.append(match.group(1))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over `or` (loosest), `and`, `not`, then a word or a parenthesised expression."""

    def __init__(self, tokens: list[str], expression: str) -> None:
        self.tokens, self.expression, self.position = tokens, expression, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise HarnessConfigError(f"-k {self.expression!r}: the expression ends too early")
        self.position += 1
        return token

    def disjunction(self) -> Callable[[str], bool]:
        parts = [self.conjunction()]
        while self.peek() == "or":
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else (lambda text: any(p(text) for p in parts))

    def conjunction(self) -> Callable[[str], bool]:
        parts = [self.negation()]
        while self.peek() == "and":
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else (lambda text: all(p(text) for p in parts))

    def negation(self) -> Callable[[str], bool]:
        if self.peek() == "not":
            self.take()
            inner = self.negation()
            return lambda text: not inner(text)
        return self.atom()

    def atom(self) -> Callable[[str], bool]:
        token = self.take()
        if token == "(":
            inner = self.disjunction()
            if self.take() != ")":
                raise HarnessConfigError(f"-k {self.expression!r}: a '(' is not closed")
            return inner
        if token == ")" or token in OPERATORS:
            raise HarnessConfigError(f"-k {self.expression!r}: unexpected {token!r}")
        word = token.lower()
        return lambda text: word in text
