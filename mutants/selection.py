"""`python -m mutants mutmut --functions a,B.c`: mutmut over the mutants of some functions only.

A run over the whole of the mutated files takes about an hour and a half on two cores; a run over
the functions of one part of the trainer (the update's arithmetic, say) takes a fraction of that.
The functions are named as the report names them: `compute_gae` for a module-level function,
`PPOTrainer.micro_step` for a method. Each becomes one glob of mutmut's mutant names
(`reference_trainers.ppo.x_compute_gae__mutmut_*`, `reference_trainers.ppo.xǁPPOTrainerǁmicro_step__mutmut_*`),
passed to `mutmut run`, which then tests those mutants only. mutmut still generates every mutant
of the files; the others are left out of the results, and the results name the functions they
cover, so that the report never presents such a run as one over the whole files.
"""

from __future__ import annotations

import ast

CLASS_SEPARATOR = "\u01c1"  # mutmut's `ǁ` in the names of the methods it generates


def parse_functions(text: str | None) -> tuple[str, ...]:
    """The function names of a `--functions` value (comma-separated, blanks ignored, order kept, no repeats)."""
    if not text:
        return ()
    names = [part.strip() for part in text.split(",")]
    return tuple(dict.fromkeys(name for name in names if name))


def defined_functions(source: str) -> set[str]:
    """The functions mutmut can mutate in `source`: module-level functions and `Class.method`s."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found |= {f"{node.name}.{item.name}" for item in node.body if isinstance(item, ast.FunctionDef)}
    return found


def module_name(path: str) -> str:
    """The dotted module of a mutated file: `reference_trainers/ppo.py` -> `reference_trainers.ppo`."""
    return path.removesuffix(".py").replace("/", ".")


def mutant_glob(module: str, function: str) -> str:
    """The glob of mutmut's names for the mutants of `function` (`name` or `Class.method`) in `module`."""
    cls, _, method = function.rpartition(".")
    if cls:
        return f"{module}.x{CLASS_SEPARATOR}{cls}{CLASS_SEPARATOR}{method}__mutmut_*"
    return f"{module}.x_{function}__mutmut_*"


def select(functions: tuple[str, ...], sources: dict[str, str]) -> tuple[list[str], list[str]]:
    """(mutmut globs, problems) for `functions` in the mutated files' `sources` (path -> text).

    A name defined in no mutated file, or in more than one, is a problem: a glob that matches
    nothing would make mutmut stop, and an ambiguous one would test more than was asked.
    """
    defined = {path: defined_functions(text) for path, text in sources.items()}
    globs, problems = [], []
    for function in functions:
        paths = [path for path, names in defined.items() if function in names]
        if len(paths) != 1:
            where = "no mutated file" if not paths else ", ".join(paths)
            problems.append(f"--functions: {function!r} is defined in {where} (name it as `f` or `Class.method`)")
            continue
        globs.append(mutant_glob(module_name(paths[0]), function))
    return globs, problems


def function_name(mutant_name: str) -> str:
    """The function (`name` or `Class.method`) a mutmut mutant name is of.

    `reference_trainers.ppo.x_compute_gae__mutmut_3` -> `compute_gae`;
    `reference_trainers.ppo.xǁPPOTrainerǁmicro_step__mutmut_7` -> `PPOTrainer.micro_step`.
    """
    base = mutant_name.rpartition(".")[2].rpartition("__mutmut_")[0]
    if base.startswith("x" + CLASS_SEPARATOR):
        cls, _, method = base[2:].partition(CLASS_SEPARATOR)
        return f"{cls}.{method}"
    return base.removeprefix("x_")
