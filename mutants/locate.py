"""Where mutmut changed a function, token-exact, and a Stryker-style name for the change.

mutmut 3 records neither: it writes each mutant as a whole generated function
(`x_<name>__mutmut_<n>` beside `x_<name>__mutmut_orig`). `locate` diffs the two
and trims the change to whole tokens, so that the report marks `*` -> `/` and not
the whole line; `mutator_name` guesses the mutator from the replaced text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from .model import Location, Position

# Python-ish tokens: string literals, numbers, names, whitespace runs, multi-character operators, any other character
TOKEN = re.compile(
    r"""[rbfuRBFU]{0,2}("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
    r"|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\w+|\s+"
    r"|\*\*=?|//=?|>>=?|<<=?|[-+*/%@&|^<>=!]=|->|\S"
)
NUMBER = re.compile(r"^-?\d+(\.\d*)?([eE][-+]?\d+)?$")
STRING = re.compile(r"""^[rbfuRBFU]{0,2}("|')""")
OPERATOR_GROUPS = {
    "ArithmeticOperator": {"+", "-", "*", "/", "//", "%", "**", "@"},
    "EqualityOperator": {"<", "<=", ">", ">=", "==", "!="},
    "LogicalOperator": {"and", "or"},
    "AssignmentOperator": {"=", "+=", "-=", "*=", "/=", "//=", "%=", "**="},
}


@dataclass(frozen=True)
class Change:
    """One mutation, token-exact: where it is in the project's file, the text it replaced, and the replacement."""

    location: Location
    original: str
    replacement: str


NO_CHANGE = Change(Location(None, None), "", "")  # a mutant whose function is its original's, text for text


def tokens(text: str) -> list[str]:
    """`text` cut into tokens, whitespace kept, so that joining them gives `text` back."""
    return [m.group(0) for m in TOKEN.finditer(text)]


def locate(original: list[str], mutant: list[str], first_line: int) -> Change:
    """Location (1-based lines and columns, end exclusive), original text and replacement of one mutation.

    `original` and `mutant` are the lines of the two generated functions after their
    `def` line; `first_line` is the line in the project's file of `original[0]`. The
    changed span is trimmed to whole tokens, and an insertion is widened to the
    token after it, so that every mutant covers at least one character.
    """
    ops = [
        op for op in difflib.SequenceMatcher(None, original, mutant, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if not ops:
        return NO_CHANGE
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    old_tokens, new_tokens = tokens("".join(original[i1:i2])), tokens("".join(mutant[j1:j2]))
    head = 0
    while head < min(len(old_tokens), len(new_tokens)) and old_tokens[head] == new_tokens[head]:
        head += 1
    tail = 0
    while tail < min(len(old_tokens), len(new_tokens)) - head and old_tokens[-1 - tail] == new_tokens[-1 - tail]:
        tail += 1
    old_end, new_end = len(old_tokens) - tail, len(new_tokens) - tail
    if old_end == head:  # a pure insertion: widen it to the next token (or else the one before)
        k = old_end
        while k < len(old_tokens) and not old_tokens[k].strip():
            k += 1
        if k < len(old_tokens):
            old_end, new_end = k + 1, new_end + (k + 1 - old_end)
        else:
            while head > 0:
                head -= 1
                if old_tokens[head].strip():
                    break
    start = len("".join(old_tokens[:head]))
    end = len("".join(old_tokens[:old_end]))
    old = "".join(original[i1:i2])
    where = Location(Position.at(old, start, first_line + i1), Position.at(old, end, first_line + i1))
    return Change(where, old[start:end], "".join(new_tokens[head:new_end]))


def mutator_name(original: str, replacement: str) -> str:
    """A Stryker-style mutator name guessed from the replaced text (mutmut does not record one)."""
    o, r = original.strip(), replacement.strip()
    for name, ops in OPERATOR_GROUPS.items():
        if o in ops and r in ops:
            return name
    if NUMBER.match(o) and NUMBER.match(r):
        return "NumberLiteral"
    if {o, r} <= {"True", "False"}:
        return "BooleanLiteral"
    if STRING.match(o) and (STRING.match(r) or r == "None"):
        return "StringLiteral"
    if r == "None":
        return "NoneReplacement"
    if r.endswith((" and False", " or True")):
        return "ConditionalExpression"
    if r.startswith("not ") or o.startswith("not "):
        return "BooleanNegation"
    if not r:
        return "ArgumentRemoval"
    if o.isidentifier() and r.isidentifier():
        return "NameReplacement"
    return "Mutation"
