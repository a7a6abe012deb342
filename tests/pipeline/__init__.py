"""Tests of the pure delivery pipeline."""
