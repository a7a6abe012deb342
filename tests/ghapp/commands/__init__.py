"""The command line, run as a user runs it: ``autoloop ...`` in a subprocess."""
