"""The pure core: regions -> boxes -> byte ranges -> requests, and the tuner's choice among plans.

No I/O and no MPI here: every function takes numbers and returns numbers, so it is tested by
properties against numpy slicing.
"""
