"""Counts of fuzzed schedules for the session summary (tests/fuzz/conftest.py).

Test-only bookkeeping: a pytest session reports how many schedules ran, were refused
(by a primitive or by ``td.lower``) and passed.
"""
from collections import Counter

COUNTS: Counter = Counter()
