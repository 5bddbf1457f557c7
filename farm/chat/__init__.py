"""The model side of text: tokenizers (Hugging Face templates, mistral-common), the shipped one, and
the model families (families/: markers and tool-call formats) and reading a turn's calls (tool_parsers.py).

Nothing is re-exported here: importing a light module (the parser names the API validates) must not
load transformers through this package's root."""
