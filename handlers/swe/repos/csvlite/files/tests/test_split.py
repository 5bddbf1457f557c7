from csvlite import split_line


def test_plain_fields():
    assert split_line("a,b,c") == ["a", "b", "c"]


def test_quoted_delimiter():
    assert split_line('"a,b",c') == ["a,b", "c"]


def test_empty_fields():
    assert split_line("a,,c,") == ["a", "", "c", ""]


def test_custom_delimiter():
    assert split_line("a;b", delimiter=";") == ["a", "b"]
