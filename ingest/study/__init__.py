"""`python -m ingest study`: run the objectstore study as a matrix of real jobs (see runner.py)."""
