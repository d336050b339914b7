"""Mutation testing of the gate: curated known-bug mutants of reference_trainers, and mutmut over its trainers.

`python -m mutants` (see __main__.py). The catalogue is data in catalogue/ (the bug
classes in classes.toml, one TOML file and one unified diff per mutant in entries/),
read by catalogue/load.py and patched in by catalogue/patches.py. Its runner is
runner.py: the gate's run in a scratch copy in harness_run.py (on Linux forked from
the preloaded process of gate_server.py, which gate_client.py starts), the verdicts in verdicts.py, the controls in
controls.py, what it prints and writes in curated_output.py. The mutmut driver is
mutmut_run.py: its scratch project in mutmut_scratch.py, the records read back from
mutmut in mutmut_collect.py, with the pytest plugin it copies into the scratch project
in mutmut_hooks.py and the token-exact location of each mutant in locate.py. The
statuses and the records of curated.json and mutmut_results.json are in model/; both
runners work on scratch copies of the project (project.py). report.py writes the
reports from scoring.py (triage, score, timing, kill costs), schema.py
(mutation.json), html_page.py (mutation.html) and markdown.py (mutation.md), and gives
the session's verdict.
"""
