"""Every option of every command line has help text: `python -m harness` (verify, verify-dist, checks, algorithms;
`ppo-verify` is its verify), `python -m harness.dist` (a rank of verify-dist), `python -m harness.live`,
`python -m harness.bench`, `python -m mutants` and its sub-commands, `python -m mutants triage`.

Each command's parser is caught as it parses (ArgumentParser.parse_known_args, which parse_args calls too), and
walked: every option and positional argument, and every sub-command, must say what it is for.
"""

from __future__ import annotations

import argparse

import pytest


class Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(monkeypatch, run) -> argparse.ArgumentParser:
    """The parser `run()` builds, caught when it starts parsing (nothing after that runs)."""

    def catch(self, args=None, namespace=None):
        raise Caught(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
    with pytest.raises(Caught) as caught:
        run()
    return caught.value.parser


def without_help(parser: argparse.ArgumentParser) -> list[str]:
    """`PROG OPTION` for each option, positional argument and sub-command of `parser` (and its sub-commands', in
    turn) that has no help text."""
    lacking = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not (helped.get(name) or "").strip():
                    lacking.append(f"{parser.prog} {name} (sub-command)")
                lacking += without_help(sub)
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            lacking.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    return lacking


def _harness():
    from harness.cli import parse

    parse(["algorithms"])


def _dist():
    from harness.dist import main

    main(["--worker", "--target", "reference", "--out", "x"])


def _live():
    from harness.live.demo import main

    main(["--target", "reference-grpo"])


def _bench():
    from harness.bench.cli import main

    main([])


def _mutants():
    from mutants.__main__ import parse

    parse(["all"])


def _triage():
    from mutants.triage import parse

    parse(["list"])


COMMANDS = {
    "python -m harness": _harness,
    "python -m harness.dist": _dist,
    "python -m harness.live": _live,
    "python -m harness.bench": _bench,
    "python -m mutants": _mutants,
    "python -m mutants triage": _triage,
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help_text(command, monkeypatch):
    parser = parser_of(monkeypatch, COMMANDS[command])
    assert parser.prog == command
    assert without_help(parser) == []


def test_an_option_without_help_is_found():
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--said", help="what it does")
    parser.add_argument("--unsaid")
    sub = parser.add_subparsers()
    quiet = sub.add_parser("quiet")
    quiet.add_argument("thing")
    assert without_help(parser) == ["tool --unsaid", "tool quiet (sub-command)", "tool quiet thing"]
