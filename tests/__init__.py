"""The test suite: one folder per source folder, shared helpers beside them."""
