"""What differs between the engines (SGLang, vLLM, TensorRT-LLM): one adapter each behind a
registry (``registry.py``), holding launch defaults, readiness, served model, stream parsing,
log lines, counters, the accept-length definition, forced-acceptance knobs and the version
query. Nothing outside this package names an engine."""
