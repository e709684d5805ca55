"""The results contract, the ground floor every other package stands on.

What a campaign leaves behind and how to read it: the layout of a results directory, the
expanded plan's groups and cells, the request row, the event types of ``events.jsonl``, and
the one reducer that turns that log into each cell's status.
"""
