from textkit import slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_accents_are_folded():
    assert slugify("Café Crème") == "cafe-creme"


def test_custom_separator():
    assert slugify("snake case", separator="_") == "snake_case"


def test_edges_are_trimmed():
    assert slugify("  padded  ") == "padded"
