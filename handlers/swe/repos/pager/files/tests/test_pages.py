import pytest
from pager import page_count, paginate


def test_exact_multiple():
    assert page_count(10, 5) == 2


def test_first_page():
    assert paginate(list(range(25)), 1, per_page=10) == list(range(10))


def test_empty_has_one_page():
    assert paginate([], 1) == []


def test_page_out_of_range_raises():
    with pytest.raises(ValueError):
        paginate([1, 2, 3], 0)


def test_bad_per_page_raises():
    with pytest.raises(ValueError):
        page_count(3, 0)
