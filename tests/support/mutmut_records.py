"""A mutmut record as mutmut_results.json holds it, for the tests of the mutmut driver."""

from __future__ import annotations

from mutants.model import MutantRecord


def record(name: str, status: str, function: str, file: str = "reference_trainers/ppo.py") -> MutantRecord:
    """A mutmut record of `function` of `file` as mutmut_results.json holds it."""
    module = file.removesuffix(".py").replace("/", ".")
    return MutantRecord.from_dict(
        {
            "name": f"{module}.{name}",
            "function": function,
            "status": status,
            "exit_code": 0,
            "seconds": 0.5,
            "location": {"start": {"line": 1, "column": 1}, "end": {"line": 1, "column": 2}},
            "line": "x = 0",
            "original": "0",
            "replacement": "1",
            "mutator": "NumberLiteral",
            "diff": "",
            "file": file,
        }
    )
