"""The command line, the top layer: `python -m ingest COMMAND` (main.py) and its commands."""
from ingest.cli.main import main

__all__ = ["main"]
