"""The Textual console; the only package that imports textual.

The package itself imports nothing (the app is ``tui.app``): the console's pure parts
(``tui/frame.py``, ``tui/log_text.py``, ``tui/toasts.py``) are then usable, and testable,
without loading textual.
"""
