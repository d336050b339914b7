"""The two-process gate as a pytest test, for mutmut's runs (not collected by `python -m harness verify`)."""
