"""`python -m ingest ...` entry point."""
import sys

from ingest.cli.main import main

sys.exit(main())
