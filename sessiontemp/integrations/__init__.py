"""Ready integrations: the agent CLI's settings (:mod:`.claude_code`), notebook kernels
(:mod:`.notebook`).

Each is loaded only by the command or the extension that uses it: ``import
sessiontemp`` imports neither.
"""
