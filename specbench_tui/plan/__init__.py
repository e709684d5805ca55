"""The plan: its tables as pydantic models, TOML loading with located errors, the checks
across tables, expansion into service groups and cells, the time estimate and the dry run.
Pure: a plan is read and reviewed without touching a host (``--dry-run --check`` is the
engine's). What it knows of engines and hosts it asks their registries."""
