"""The project and its scratch copies: both runners verify a copy of the project, never the project itself.

The curated runner patches its copy; the mutmut driver lets mutmut write its
`./mutants/` working tree into its copy (in the project, that is this package).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PARTS = ("reference_trainers", "reference_ppo", "harness", "pyproject.toml")
CPU_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def copy_project(dest: Path, root: Path = ROOT) -> Path:
    """Copy the parts of the project the gate needs into `dest` (caches left behind)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for part in PROJECT_PARTS:
        src = root / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / part)
        else:
            raise FileNotFoundError(f"{src} is missing: the curated runner needs {', '.join(PROJECT_PARTS)}")
    return dest


def scratch_env(scratch: Path) -> dict[str, str]:
    """The environment of a run in `scratch`: its copy first on the import path, CPU only, one thread."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env.update(CPU_ENV)
    env["PYTHONPATH"] = str(scratch)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
