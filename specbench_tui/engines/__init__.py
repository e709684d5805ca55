"""What differs between SGLang and vLLM: launch defaults, readiness, served model, stream
parsing, log lines, metrics and the version query."""
