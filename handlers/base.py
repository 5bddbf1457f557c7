"""Moved to farm/handler/protocol.py (the farm core owns the handler protocol); kept for imports."""

from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput

__all__ = ["AgentHandler", "EvalOutput", "HandlerInstance", "RunOutput"]
