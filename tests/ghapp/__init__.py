"""Tests of the shell, one folder per layer of ``ghapp/``."""
