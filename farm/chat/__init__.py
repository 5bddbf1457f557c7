"""The model side of text: the shipped tokenizer and chat template, and Hermes tool-call parsing."""

from farm.chat.chatml import ParsedConversation, parse_chatml
from farm.chat.tokenizer import SHIPPED_DIR, ChatTokenizer
from farm.chat.tool_calls import ParsedAssistant, ToolCall, format_tool_call, parse_assistant

__all__ = [
    "SHIPPED_DIR",
    "ChatTokenizer",
    "ParsedAssistant",
    "ParsedConversation",
    "ToolCall",
    "format_tool_call",
    "parse_assistant",
    "parse_chatml",
]
