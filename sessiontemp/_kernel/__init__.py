"""Private: the kernel-facing pieces: where the root lies and what it holds, its entries,
flock, the locks that say who is alive, descriptor walks, nodes, processes, starting a
command, and resource shortages.
"""
