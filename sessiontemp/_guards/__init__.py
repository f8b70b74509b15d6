"""Private: the runtime guards: signal-safe steps, forks, asyncio, the named durable steps, and
the logger.
"""
