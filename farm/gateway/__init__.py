"""The model gateway: provider-shaped endpoints per session that record token-faithful completions.

Import what you need from its modules (`farm.gateway.app`, `farm.gateway.sessions`, ...): this package
re-exports nothing, so that `farm --help` and the CLI's other commands do not load FastAPI.
"""
