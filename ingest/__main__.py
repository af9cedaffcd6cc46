"""`python -m ingest ...` entry point."""
import sys

from ingest.cli import main

sys.exit(main())
