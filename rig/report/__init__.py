"""The submission report (`rig report`): run folders in (only read), report.md, report.html,
report.pdf and results.json out.

- `runs`: the run folders, checked and grouped into systems; `run_summary`, the summary of any
  run folder (ASC or sweep) that `rig show --json`, the runner and the report share;
  `system`: `system.toml`.
- `content`: every section the report asks for; `document`: its Markdown and HTML renderings.
- `figures`, `workflow`: the figures and the workflow diagram; `models`: the model outline.
- `writer`: `write_report`.

Reads `run` and `qubo` (and below); only `commands` and gui import it.
"""
