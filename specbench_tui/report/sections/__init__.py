"""One module per section of the report; each turns the frames into blocks."""
