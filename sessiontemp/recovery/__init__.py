"""Recovery: a pass over a root after any crash, what it sweeps, how a generation is removed,
and the public clean-up calls.
"""
