"""Tests of the kernel alone: pure, in memory, no store and no clock."""
