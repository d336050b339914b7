"""Every status of `mutants/`, each an enum member with its display text and its schema-v2 status.

A member's value is its display text, so that `MutantStatus("no tests")` reads a
status back from a file and `.text` writes it; `.schema` is the status of
mutation-testing-report-schema v2 it is reported as in mutation.json.
"""

from __future__ import annotations

from enum import Enum


class SchemaStatus(Enum):
    """A mutant's status in mutation-testing-report-schema v2 (mutation.json)."""

    KILLED = "Killed"
    SURVIVED = "Survived"
    NO_COVERAGE = "NoCoverage"
    COMPILE_ERROR = "CompileError"
    RUNTIME_ERROR = "RuntimeError"
    TIMEOUT = "Timeout"
    IGNORED = "Ignored"
    PENDING = "Pending"


class MutantStatus(Enum):
    """What mutmut made of one mutant: its word for it, the schema-v2 status, and the exit codes that mean it.

    The words and exit codes are mutmut 3's (`mutmut.stats.status_by_exit_code`, whose
    unknown codes read as suspicious); a test holds this table to the installed mutmut's.
    """

    KILLED = ("killed", SchemaStatus.KILLED, (1, 3))  # 3: an internal error of pytest counts as a kill
    SURVIVED = ("survived", SchemaStatus.SURVIVED, (0,))
    NO_TESTS = ("no tests", SchemaStatus.NO_COVERAGE, (5, 33))
    SKIPPED = ("skipped", SchemaStatus.IGNORED, (34,))
    SUSPICIOUS = ("suspicious", SchemaStatus.RUNTIME_ERROR, (35,))
    TIMEOUT = ("timeout", SchemaStatus.TIMEOUT, (36, 24, -24, 152, 255))  # 24, -24, 152: SIGXCPU
    CAUGHT_BY_TYPE_CHECK = ("caught by type check", SchemaStatus.COMPILE_ERROR, (37,))
    SEGFAULT = ("segfault", SchemaStatus.RUNTIME_ERROR, (-11, -9))
    # 2: pytest's exit for an interruption, a collection error or a usage error, and the harness's when the
    # mutated trainer rejects a valid configuration. The hooks plugin says which (mutmut_hooks.EXIT2_ENV); the
    # driver makes a configuration error REFUSED (detected) and reruns the others once, serially. One still exit
    # 2 after that was not judged: neither detected nor survived, counted apart and said in one line.
    INTERRUPTED = ("check was interrupted by user", SchemaStatus.RUNTIME_ERROR, (2,))
    # not mutmut's: an exit 2 the hooks plugin saw come from the harness's configuration error (mutmut_run.py)
    REFUSED = ("refused (configuration error)", SchemaStatus.KILLED, ())
    NOT_CHECKED = ("not checked", SchemaStatus.PENDING, (None,))

    def __new__(cls, text: str, schema: SchemaStatus, exit_codes: tuple[int | None, ...]) -> MutantStatus:
        """A member whose value is mutmut's word, so that `MutantStatus("killed")` reads mutmut_results.json."""
        member = object.__new__(cls)
        member._value_ = text
        member.schema = schema
        member.exit_codes = exit_codes
        return member

    @classmethod
    def from_exit_code(cls, code: int | None) -> MutantStatus:
        """The status of a mutant whose test run exited with `code` (mutmut's meta file keeps only the code)."""
        return next((status for status in cls if code in status.exit_codes), cls.SUSPICIOUS)

    @property
    def text(self) -> str:
        """mutmut's word, as mutmut_results.json, the terminal and the reports write it."""
        return self.value

    @property
    def detected(self) -> bool:
        """Whether the suite caught the mutant (killed, timed out, or the gate refused its configuration): the score's
        numerator."""
        return self in (MutantStatus.KILLED, MutantStatus.TIMEOUT, MutantStatus.REFUSED)

    @property
    def unjudged(self) -> bool:
        """Whether the run gave no verdict on the mutant (interrupted, suspicious, segfault): neither detected nor
        survived, left out of the score and counted apart (never silently)."""
        return self in (MutantStatus.INTERRUPTED, MutantStatus.SUSPICIOUS, MutantStatus.SEGFAULT)

    @property
    def undetected(self) -> bool:
        """Whether the mutant got past the suite (survived, or no test ran it): each one needs a triage."""
        return self in (MutantStatus.SURVIVED, MutantStatus.NO_TESTS)


class CuratedStatus(Enum):
    """The curated runner's verdict on one mutant: its display text, its schema status, whether it passes."""

    KILLED = ("killed", SchemaStatus.KILLED, True)
    KILLED_BY_UNNAMED_CHECKS = ("killed by unnamed checks", SchemaStatus.KILLED, False)
    SURVIVED = ("survived", SchemaStatus.SURVIVED, False)
    ERROR = ("error", SchemaStatus.RUNTIME_ERROR, False)
    NOT_RUN = ("not run", SchemaStatus.IGNORED, True)  # a command this checkout does not have: a note, not a failure

    def __new__(cls, text: str, schema: SchemaStatus, passes: bool) -> CuratedStatus:
        """A member whose value is its display text, so that `CuratedStatus("killed")` reads curated.json."""
        member = object.__new__(cls)
        member._value_ = text
        member.schema = schema
        member.passes = passes
        return member

    @property
    def text(self) -> str:
        """The word curated.json, the terminal and the reports use."""
        return self.value


class TriageVerdict(Enum):
    """A survivor's triage (mutants/equivalent.toml): equivalent leaves the score, missing-check counts as survived."""

    EQUIVALENT = "equivalent"
    MISSING_CHECK = "missing-check"
