"""Tool backends served inside a sandbox (bash, IPython, file editor) and the registry of tool schemas.

Backends import only the standard library plus ptyprocess / jupyter_client; `containers.tools.registry`
(pydantic) is for the host side.
"""
