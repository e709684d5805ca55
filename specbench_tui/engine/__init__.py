"""The campaign engine. It never imports textual: consoles observe its events."""
