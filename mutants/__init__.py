"""Mutation testing of the gate: curated known-bug mutants of reference_ppo, and mutmut over its statistics code.

`python -m mutants` (see __main__.py); the catalogue is in catalogue.py, the runner in runner.py,
the mutmut driver in mutmut_run.py and the reports in report.py.
"""
