"""The names of what the sweep engine (core.sweep) writes for every study beside runs.csv, declared
once: the engine writes them, the registry (core.study) declares them as outs of every stage, the
brief reads them. A leaf: imports nothing."""
from __future__ import annotations

CHARACTERIZATION = "characterization.csv"     # block-level characterization, a row per run
TRACES = "traces"                             # the runs' raw block traces
STATUS = "status.json"                        # the sweep's state (core.outdir)
RUNS_SCHEMA = "runs.schema.json"              # runs.csv's declared columns and schema version (core.columns)

ENGINE_OUTPUTS: tuple[str, ...] = (CHARACTERIZATION, TRACES, STATUS, RUNS_SCHEMA)
