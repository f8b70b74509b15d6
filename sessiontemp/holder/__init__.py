"""The session holder: its process, starting and asking it (``sessiontemp session``), and its
client (``run --session``, ``shell``).
"""
