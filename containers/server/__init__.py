"""The execution server that runs inside a sandbox: newline-delimited JSON over a Unix socket (and TCP
loopback as the fallback), serving command execution, file transfer and the tool backends.

Standard library plus ptyprocess only, so it starts in a few tens of milliseconds under `python -S`.
"""
