"""The benchmarks run at tiny sizes: each one ends and produces its figures."""
