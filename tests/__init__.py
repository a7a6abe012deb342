"""Autoloop's tests."""
