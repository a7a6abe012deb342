"""Tests of the fake GitHub (fakegithub/): one module per area, helpers in ``helpers``."""
