"""The reference LLM server (`farm llm serve`): the dev/test inference backend.

Import `farm.llm.app.create_app` for in-process use; this package stays import-light.
"""

from farm.llm.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":
        from farm.llm.app import create_app

        return create_app
    raise AttributeError(name)
