"""The console scripts' parts: ``journal-inspect``, their command lines, and what they print."""
