"""Benchmarks on the emulated cluster and of multi-rank predictions: makespan against the physical
limit (makespan), every data-moving command (commands), MPI collectives (collectives), and predicted
against measured makespan (predictions)."""
