"""The model side of text: tokenizers (Hugging Face templates, mistral-common), the shipped one, and
tool-call parsing in each model family's format."""

from farm.chat.chatml import ParsedConversation, parse_chatml
from farm.chat.families import FAMILIES, Family, detect_family, parse_family
from farm.chat.tokenizer import SHIPPED_DIR, ChatTokenizer, HFChatTokenizer
from farm.chat.tool_calls import ParsedAssistant, ToolCall, format_tool_call, parse_assistant

__all__ = [
    "FAMILIES",
    "SHIPPED_DIR",
    "ChatTokenizer",
    "Family",
    "HFChatTokenizer",
    "ParsedAssistant",
    "ParsedConversation",
    "ToolCall",
    "detect_family",
    "format_tool_call",
    "parse_assistant",
    "parse_chatml",
    "parse_family",
]
