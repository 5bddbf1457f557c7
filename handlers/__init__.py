"""The built-in handlers, one per task domain (math, code, swe, harness, noop), and the sandbox lifecycle
they share. The interface they implement is farm/handler/protocol.py."""
