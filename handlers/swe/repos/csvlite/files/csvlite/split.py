"""Splitting one CSV record into fields."""


def split_line(line: str, delimiter: str = ",") -> list[str]:
    """Split a record; quoted fields may hold the delimiter, and "" inside quotes is a literal quote."""
    fields: list[str] = []
    field: list[str] = []
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"':
                quoted = False
            else:
                field.append(char)
        elif char == '"':
            quoted = True
        elif char == delimiter:
            fields.append("".join(field))
            field = []
        else:
            field.append(char)
        i += 1
    fields.append("".join(field))
    return fields
