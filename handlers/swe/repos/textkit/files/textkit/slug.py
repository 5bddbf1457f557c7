"""URL slugs from arbitrary titles."""

import re
import unicodedata

_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def slugify(text: str, separator: str = "-") -> str:
    """Lower-case ASCII words of `text` joined by `separator`."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = _NOT_ALNUM.sub(separator, ascii_text.lower())
    return slug.strip(separator)
