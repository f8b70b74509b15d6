"""Space: sizes as written, a manager's limits, what a directory holds, the root's file system,
the journal's reserve, and where a root may live.
"""
