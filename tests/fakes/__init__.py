"""Fake agent CLIs: real executables the agent tests put first on PATH."""
