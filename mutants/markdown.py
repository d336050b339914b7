"""reports/mutation.md: the verdict, the curated table, the mutmut score, timings and every survivor."""

from __future__ import annotations

import time

from .model import SKIPPED_SURVIVOR, CuratedRun, CuratedStatus, KillCost, MutantStatus, MutmutResults
from .mutmut_algorithms import algorithm
from .schema import TEST_FILE
from .scoring import COST_GOAL, Score, Timing

# named in the score's sentence
SUMMARY_OUTCOMES = ("killed", "survived", SKIPPED_SURVIVOR, "timeout", "equivalent", "no tests")


def md_cell(text: str) -> str:
    """`text` on one line with its pipes escaped, so that it cannot break a Markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def fence(text: str, lang: str = "") -> str:
    """`text` in a code fence longer than any run of backticks inside it, so that a diff cannot close it."""
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def header_section(title: str, failed: bool, finished: dict[str, str | None], js: str | None, origin: str) -> list[str]:
    """The top of mutation.md: the verdict, the inputs it was made from, and how mutation.html was rendered.

    `finished` maps each input file that was read to when its run finished.
    """
    inputs = "; ".join(f"{name} (finished {'?' if stamp is None else stamp})" for name, stamp in finished.items())
    md = [f"# {title}", ""]
    md.append(
        f"Verdict: **{'FAIL' if failed else 'pass'}**. Generated {time.strftime('%Y-%m-%d %H:%M:%S')} from {inputs}."
    )
    md.append("")
    if js is None:
        md.append(
            f"**mutation.html was written WITHOUT the mutation-testing-elements web component** ({origin}); "
            "it holds a plain table instead."
        )
    else:
        md.append(
            "mutation.html renders mutation.json (schema v2) with the mutation-testing-elements component, "
            f"inlined from {origin}."
        )
    md.append("")
    return md


def findings_section(problems: list[str], notes: list[str]) -> list[str]:
    """The Problems and Notes lists of mutation.md, each left out when empty."""
    md = []
    if problems:
        md += ["## Problems", ""] + [f"- {md_cell(p)}" for p in problems] + [""]
    if notes:
        md += ["## Notes", ""] + [f"- {md_cell(n)}" for n in notes] + [""]
    return md


def curated_section(curated: CuratedRun) -> list[str]:
    """The curated section of mutation.md: the controls, the table, each mutant not killed, and every patch."""
    out = ["## Curated known-bug mutants", ""]
    mode = (
        "full suite for every mutant"
        if curated.full
        else "each mutant's named checks (--check), plus the full suite once on the unmodified copy"
    )
    controls = "; ".join(
        f"{'full suite' if command == 'verify' else command} **{'pass' if c.passed else 'FAIL'}** "
        f"({c.checks} checks, {c.seconds:.1f} s)"
        for command, c in curated.controls.items()
    )
    out.append(
        f"{len(curated.mutants)} mutant(s) in {curated.wall_seconds:.0f} s wall with {curated.jobs} job(s); "
        f"selection: {mode}. Control runs on the unmodified copy: {controls}."
    )
    out += [
        "",
        "| mutant | bug class | diagnosed | source | must be killed by | killed by | status | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in curated.mutants:
        m = r.mutant
        other = sorted(set(r.failed_checks) - set(r.named_failed))
        killed = ", ".join(r.named_failed) or "-"
        if other:
            killed += f" (also: {', '.join(other)})"
        diagnosed = r.diagnosed
        out.append(
            f"| `{m.id}` | {m.bug_class} | {diagnosed} | {md_cell(m.source)} | {md_cell(', '.join(m.killed_by))} "
            f"| {md_cell(killed)} | {r.status.text} | {r.seconds:.1f} |"
        )
    own = sum(1 for r in curated.mutants if r.own_class_named)
    wrong = [f"`{r.id}` as class {r.diagnosed}" for r in curated.mutants if r.misdiagnosed]
    out += [
        "",
        f"The gate's diagnosis (the class its failing metrics and notes name most often; two joined by + where one "
        f"combined diagnosis names both) names the mutant's own class for {own} of {len(curated.mutants)}; "
        f"misdiagnosed: {', '.join(wrong) or 'none'}.",
    ]
    for item in curated.not_applicable:
        out.append(f"\nBug class {item.bug_class} cannot arise in the reference trainer: {item.reason}")
    for r in curated.mutants:
        if r.status is CuratedStatus.KILLED:
            continue
        out += ["", f"### `{r.id}`: {r.status.text}", "", md_cell(r.mutant.title), "", fence(r.reason, "text")]
        if r.diff:
            out += ["", fence(r.diff, "diff")]
    out += ["", "<details><summary>The curated patches</summary>", ""]
    for r in curated.mutants:
        out += [f"**`{r.id}`** (class {r.mutant.bug_class}): {md_cell(r.mutant.title)}", "", fence(r.diff, "diff"), ""]
    out += ["</details>", ""]
    return out


def mutmut_section(results: MutmutResults, summary: Score, timing: Timing, baseline: float | None) -> list[str]:
    """The mutmut section of mutation.md: the score, timings, the per-function table and every survivor."""
    out = mutmut_summary(results, summary, baseline)
    if timing.seconds:
        out += [timing_text(timing), ""]
    return out + per_function_table(results) + survivors_section(results)


def skipped_equivalents(results: MutmutResults, summary: Score) -> int:
    """How many mutants the run skipped because the triage calls them equivalent (mutmut's "skipped", less the
    triaged missing-check survivors it skipped)."""
    skipped = sum(1 for r in results.mutants if r.status is MutantStatus.SKIPPED)
    return skipped - summary.counts.get(SKIPPED_SURVIVOR, 0)


def mutmut_summary(results: MutmutResults, summary: Score, baseline: float | None) -> list[str]:
    """The section's heading, the files and tests mutmut ran over, and the score against the baseline."""
    c = summary.counts
    files = ", ".join(f"`{f}`" for f in (results.sources or {results.file: ""}))
    score_text = f"{summary.score:.2f} %" if summary.score is not None else "n/a"
    base_text = f"{baseline:.2f} %" if baseline is not None else "none"
    counted = [
        f"{c.get('killed', 0)} killed",
        f"{c.get('survived', 0) + c.get(SKIPPED_SURVIVOR, 0)} survived ({summary.missing_check} triaged "
        f"missing-check; {c.get(SKIPPED_SURVIVOR, 0)} of them skipped as triaged, not run, and counted as survived)",
        f"{c.get('timeout', 0)} timeout",
        f"{c.get('equivalent', 0)} equivalent (ignored; {skipped_equivalents(results, summary)} of them skipped as "
        "triaged, not run)",
        f"{c.get('no tests', 0)} without tests",
    ]
    counted += [f"{n} {k}" for k, n in sorted(c.items()) if k not in SUMMARY_OUTCOMES]
    algo = algorithm(results.algorithm)
    if results.selected:
        names = ", ".join(f"`{f}`" for f in results.selected)
        heading = f"## mutmut over the {algo.label} trainer: selected functions only"
        covered = (
            f"This run covers ONLY the mutants of {len(results.selected)} functions: {names} (it says nothing "
            f"of the other functions of {files}: the score below is theirs alone)"
        )
    else:
        heading = f"## mutmut over the whole {algo.label} trainer"
        covered = f"Files: {files}, every function and method ({len(results.functions)})"
    return [
        heading,
        "",
        f"{covered}; lines left unmutated each carry `# pragma: no mutate` with its reason. "
        f"Tests: the verify suite (`{TEST_FILE}`) against the target `{algo.target}`.",
        "",
        f"**Mutation score: {score_text}** (baseline {base_text}) — {summary.total} mutants: {', '.join(counted)}.",
        "",
    ]


def timing_text(timing: Timing) -> str:
    """The timing paragraph: the whole run, the cost per mutant and the cost against the killing test."""
    return (
        f"Timing: {timing.seconds:.0f} s for the mutmut run ({timing.workers} worker(s), "
        f"{timing.mutants_per_minute:.1f} mutants/min, stats and clean run included). "
        + (
            f"Per mutant: {timing.mean_seconds_killed:.3f} s on average when killed"
            if timing.mean_seconds_killed
            else ""
        )
        + (
            f", {timing.mean_seconds_survived:.2f} s when it survives (the whole suite)"
            if timing.mean_seconds_survived
            else ""
        )
        + (f"; the suite's tests take {timing.suite_seconds:.1f} s in all. " if timing.suite_seconds else ". ")
        + cost_text(timing.kill_cost)
    )


COST_METHOD = (
    "Goal (from the issue): a killed mutant costs under {goal:g}x the killing test's own time (no re-import "
    "of torch per mutant). Measured per killed mutant: the wall time mutmut records for it (`durations_by_key` "
    "in its meta file: fork of the worker to its exit, one `pytest -x` session) over the killing test's "
    "duration in mutmut's stats run (`duration_by_test` in mutmut-stats.json: the test's call phase, "
    "from a cold observation cache). mutmut does not record which test killed a mutant: it runs the "
    "tests linked to the mutated function fastest first and stops at the first failure, so the first test it "
    "runs is taken as the killer; where a later, slower test killed it, the ratio is overstated."
)


def cost_text(cost: KillCost | None) -> str:
    """Each killed mutant's wall time over the time of the test that killed it, against the issue's goal."""
    goal = cost.goal_ratio if cost is not None else COST_GOAL
    text = COST_METHOD.format(goal=goal)
    if cost is None or not cost.measured:
        return text + " No killed mutant could be measured (no test durations)."
    tests = ", ".join(f"`{t.rpartition('::')[2]}` ({n})" for t, n in cost.first_tests.items())
    verdict = "met" if cost.goal_met else "NOT met"
    return text + (
        f" Over {cost.measured} of {cost.killed} killed mutants: ratio median "
        f"**{cost.median_ratio:.2f}x**, 90th percentile **{cost.p90_ratio:.2f}x**, "
        f"{100 * cost.share_under_goal:.0f} % under {goal:g}x; medians: {cost.median_seconds:.3f} s "
        f"per killed mutant, {cost.median_first_test_seconds:.3f} s for its first test (first test: {tests}). "
        f"**Goal {verdict}** (met when the 90th percentile is under {goal:g}x)."
    )


def per_function_table(results: MutmutResults) -> list[str]:
    """The mutants of each function by outcome, and how many tests mutmut links to each function."""
    per_function: dict[str, dict[str, int]] = {}
    for r in results.mutants:
        counts = per_function.setdefault(r.function, {})
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    out = ["| function | mutants | killed | survived | equivalent | other |", "|---|---|---|---|---|---|"]
    for fn, counts in per_function.items():
        other = sum(n for k, n in counts.items() if k not in ("killed", "survived", "equivalent"))
        out.append(
            f"| `{fn}` | {sum(counts.values())} | {counts.get('killed', 0)} | {counts.get('survived', 0)} "
            f"| {counts.get('equivalent', 0)} | {other} |"
        )
    tests_by_function = results.tests.tests_by_function if results.tests else {}
    if tests_by_function:
        linked = ", ".join(f"`{fn}` {len(t)}" for fn, t in sorted(tests_by_function.items()))
        out += ["", f"Tests mutmut links to each function (from its stats run): {linked}."]
    return out


def survivors_section(results: MutmutResults) -> list[str]:
    """Each surviving (or untested) mutant with its location, replacement, triage and diff."""
    survivors = [r for r in results.mutants if r.status.undetected]
    verdicts: dict[str, int] = {}
    for r in survivors:
        key = r.verdict.value if r.verdict else "untriaged"
        verdicts[key] = verdicts.get(key, 0) + 1
    tally = ", ".join(f"{n} {k}" for k, n in sorted(verdicts.items()))
    out = ["", f"### Survivors ({len(survivors)}: {tally})", ""]
    if not survivors:
        out.append("None.")
    for r in survivors:
        out += [
            f"#### `{r.short}` — {r.verdict.value if r.verdict else 'UNTRIAGED'}",
            "",
            f"`{r.function}`, line {r.location.start.line}: `{md_cell(r.original)}` → "
            f"`{md_cell(r.replacement)}` ({r.mutator}).",
            "",
            r.why or "Not triaged: add it to mutants/equivalent.toml (equivalent, with why) or add a check.",
            "",
            fence(r.diff, "diff"),
            "",
        ]
    return out


def render(
    title: str,
    problems: list[str],
    notes: list[str],
    curated: CuratedRun | None,
    results: MutmutResults | None,
    summary: Score | None,
    timing: Timing | None,
    baseline: float | None,
    js: str | None,
    origin: str,
) -> str:
    """The text of mutation.md."""
    finished = {}
    if curated is not None:
        finished["curated.json"] = curated.finished
    if results is not None:
        finished["mutmut_results.json"] = results.finished
    md = header_section(title, bool(problems), finished, js, origin) + findings_section(problems, notes)
    if curated is not None:
        md += curated_section(curated)
    else:
        md += ["## Curated known-bug mutants", "", "Not run in this session.", ""]
    if results is not None and summary is not None and timing is not None:
        md += mutmut_section(results, summary, timing, baseline)
    else:
        md += ["## mutmut", "", "Not run in this session.", ""]
    return "\n".join(md).rstrip() + "\n"
