"""The deterministic core of Autoloop: pure, stdlib only, no I/O, no clock.

Time comes in as an argument and ids are derived from inputs, so the same ledger and
the same inputs always give the same decisions.
"""
