"""Mutation testing of the gate: curated known-bug mutants of reference_ppo, and mutmut over its trainer.

`python -m mutants` (see __main__.py). The catalogue is in catalogue.py, its runner
in runner.py (what it prints and writes in curated_output.py); the mutmut driver is
mutmut_run.py, with the pytest plugin it copies into mutmut's scratch project in
mutmut_hooks.py and the token-exact location of each mutant in locate.py. The
statuses and the records of curated.json and mutmut_results.json are in model/;
both runners work on scratch copies of the project (project.py).
report.py writes the reports from scoring.py (triage, score, timing, kill costs),
schema.py (mutation.json), html_page.py (mutation.html) and markdown.py
(mutation.md), and gives the session's verdict.
"""
