from intervals import merge


def test_empty():
    assert merge([]) == []


def test_disjoint_stay_apart():
    assert merge([(1, 2), (4, 5)]) == [(1, 2), (4, 5)]


def test_overlapping_merge():
    assert merge([(1, 4), (3, 6)]) == [(1, 6)]


def test_touching_merge():
    assert merge([(1, 3), (3, 5)]) == [(1, 5)]


def test_unsorted_input():
    assert merge([(8, 9), (1, 2), (2, 3)]) == [(1, 3), (8, 9)]
