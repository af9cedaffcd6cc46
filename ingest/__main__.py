"""`python -m ingest ...` entry point."""
from ingest.cli.ending import end_process
from ingest.cli.main import main

end_process(main())
