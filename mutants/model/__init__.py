"""The one vocabulary of `mutants/`: statuses as enums, and the typed records that cross process boundaries.

- status.py: every status as an enum that carries its display text (the word in
  the files and the reports) and the mutation-testing-report-schema v2 status it
  is reported as, so that no second table has to agree with a first;
- curated.py: the curated runner's verdicts and results (curated.json);
- results.py: mutmut's mutants, its test statistics and the kill costs
  (mutmut_results.json), and the triage entries of mutants/equivalent.toml;
- location.py: where a mutation is in its file (line, column, span).

The JSON files are written from these records (`to_dict`) and read back into
them (`from_dict`) by the report, never used as raw dicts.
"""

from .curated import ControlResult, CuratedResult, CuratedRun, Judgement
from .location import Location, Position
from .results import (
    SKIPPED_SURVIVOR,
    KillCost,
    MutantCost,
    MutantRecord,
    MutmutResults,
    SuiteStats,
    TriageEntry,
)
from .status import CuratedStatus, MutantStatus, SchemaStatus, TriageVerdict

__all__ = [
    "SKIPPED_SURVIVOR",
    "ControlResult",
    "CuratedResult",
    "CuratedRun",
    "CuratedStatus",
    "Judgement",
    "KillCost",
    "Location",
    "MutantCost",
    "MutantRecord",
    "MutantStatus",
    "MutmutResults",
    "Position",
    "SchemaStatus",
    "SuiteStats",
    "TriageEntry",
    "TriageVerdict",
]
