import pytest
from semver import compare, parse


def test_equal_versions():
    assert compare("1.2.3", "1.2.3") == 0


def test_patch_ordering():
    assert compare("1.0.1", "1.0.0") == 1


def test_minor_ordering():
    assert compare("1.2.0", "1.3.0") == -1


def test_invalid_raises():
    with pytest.raises(ValueError):
        parse("1.2")


def test_whitespace_ignored():
    assert compare(" 2.0.0 ", "2.0.0") == 0
