"""The report of a results directory: inputs, statistics, frames (shared with the console),
one module per section, render (Markdown, LaTeX with pgfplots, PDF) and compare."""
