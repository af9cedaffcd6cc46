"""The one configuration: `RunConfig` (fields.py: the field table, each field with its metadata;
checks.py: a value checked by its field's kind; run.py: defaults < TOML file < command line),
its command-line spelling (arguments.py); and the read settings resolved from it (settings.py).
"""
from ingest.config.arguments import (add_run_arguments, add_setting_arguments, config_from_args, setting_values,
                                     source_argument)
from ingest.config.run import RunConfig, check_field, did_you_mean, load_config, read_config_file, shown_source

__all__ = ["RunConfig", "load_config", "read_config_file", "check_field", "did_you_mean", "shown_source",
           "add_run_arguments", "config_from_args", "source_argument", "add_setting_arguments", "setting_values"]
