"""What every benchmark shares, by purpose: the store and its cube (servers), side-by-side timing
and its statistics (timing), the record of the machine (machine), results files (results),
markdown tables (tables) and the common command line (cli). Benches use it as `from bench import
common` and `common.NAME`; the names are the submodules' own, gathered here."""
from bench.common.cli import (QUICK, add_common_arguments, add_store_argument, bench_main, counts, logger,
                              settle)
from bench.common.machine import REPO_ROOT, command_line, machine_info
from bench.common.results import (SCHEMA_VERSION, cluster_heading, results_dir, summarize_or_run,
                                  write_results)
from bench.common.servers import BUCKET, BenchEnv, Cube
from bench.common.tables import gib, markdown_table, ratios_table, spread, store_line
from bench.common.timing import (Candidate, cpu_children_s, cpu_pid_s, cpu_self_s, paired_ratio,
                                 ratio_of, run_interleaved, stats, summarize, target, target_text, verdict)

__all__ = ["add_common_arguments", "add_store_argument", "bench_main", "BenchEnv", "BUCKET", "Candidate",
           "cluster_heading", "command_line", "counts", "cpu_children_s", "cpu_pid_s", "cpu_self_s", "Cube",
           "gib", "logger", "machine_info", "markdown_table", "paired_ratio", "QUICK", "ratio_of",
           "ratios_table", "REPO_ROOT", "results_dir", "run_interleaved", "SCHEMA_VERSION", "settle",
           "spread", "stats", "store_line", "summarize", "summarize_or_run", "target", "target_text",
           "verdict", "write_results"]
