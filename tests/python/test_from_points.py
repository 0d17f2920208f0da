"""ReferenceSet.from_points (ReferenceSet::from_points): a store built from arrays in one step is
the store that inserted the same rows in order and published once: same checkpoint bytes (so the
same slots, ids, stored vectors, targets and epoch), and the same store after further updates.
Bad rows are refused by row, and no store is made."""
import numpy as np
import pytest

import streamknn


def rows_for(metric, n, rng):
    if metric == "haversine":
        return np.column_stack([rng.uniform(-85, 85, n), rng.uniform(-175, 175, n)]).astype(np.float32)
    return rng.standard_normal((n, 5)).astype(np.float32)


def targets_for(target, n, rng):
    if "n_classes" in target:
        return rng.integers(0, target["n_classes"], n)
    if "n_outputs" in target:
        return rng.standard_normal((n, target["n_outputs"])).astype(np.float32)
    return None


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine", "haversine"])
@pytest.mark.parametrize("target", [{}, {"n_classes": 4}, {"n_outputs": 2}], ids=["none", "classes", "outputs"])
def test_equals_insert_then_one_publish(backend, rng, metric, target):
    n = 500
    ids = (rng.permutation(n) * 3 + 1).astype(np.uint64)  # any order, any ids
    x, t = rows_for(metric, n, rng), targets_for(target, n, rng)
    kw = dict(metric=metric, backend=backend, queue_capacity=n, **target)  # one publish for the pushes
    built = streamknn.ReferenceSet.from_points(ids, x, t, **kw)
    pushed = streamknn.ReferenceSet(x.shape[1], **kw)
    pushed.insert(ids, x, t)
    pushed.publish()
    assert built.epoch == 1 and len(built) == n
    assert built.to_bytes() == pushed.to_bytes()  # the same epoch, byte for byte
    q = rows_for(metric, 20, rng)
    for a, b in zip(built.search(q, 7)[:2], pushed.search(q, 7)[:2]):
        np.testing.assert_array_equal(a, b)
    for store in (built, pushed):  # later updates land the same way
        store.erase(ids[:50])
        store.insert(np.arange(10_000, 10_060, dtype=np.uint64), rows_for(metric, 60, np.random.default_rng(1)),
                     targets_for(target, 60, np.random.default_rng(2)))
        store.publish()
    assert built.to_bytes() == pushed.to_bytes()


def test_float64_input_and_empty_store(backend, rng):
    x = rng.standard_normal((40, 3))
    a = streamknn.ReferenceSet.from_points(np.arange(40, dtype=np.uint64), x, backend=backend)
    b = streamknn.ReferenceSet.from_points(np.arange(40, dtype=np.uint64), x.astype(np.float32), backend=backend)
    assert a.to_bytes() == b.to_bytes()
    empty = streamknn.ReferenceSet.from_points(np.zeros(0, np.uint64), np.zeros((0, 3), np.float32), backend=backend)
    assert empty.epoch == 0 and len(empty) == 0 and empty.dim == 3


@pytest.mark.parametrize("dim", [4, 9], ids=["columns", "padded-rows"])
def test_any_float_layout_equals_float32_rows(backend, rng, dim):
    # float64 and non-C-ordered vectors are converted once, into the vector the store takes over;
    # enough points that the CPU backend fills its two buffers on two threads.
    n = 70_000
    x = rng.standard_normal((n, dim))
    ids = np.arange(n, dtype=np.uint64)[::-1].copy()
    kw = dict(backend=backend, queue_capacity=n)  # the config is in the bytes: the pushes' one publish
    reference = streamknn.ReferenceSet.from_points(ids, x.astype(np.float32), **kw).to_bytes()
    wide = np.empty((n, 2 * dim))
    wide[:, ::2] = x
    for layout in (x, np.asfortranarray(x), np.asfortranarray(x, dtype=np.float32), wide[:, ::2],
                   x.astype(">f8")):
        assert streamknn.ReferenceSet.from_points(ids, layout, **kw).to_bytes() == reference
    backwards = streamknn.ReferenceSet.from_points(ids[::-1], x[::-1], **kw)  # negative strides
    assert backwards.to_bytes() == streamknn.ReferenceSet.from_points(
        ids[::-1], np.ascontiguousarray(x[::-1], dtype=np.float32), **kw).to_bytes()
    pushed = streamknn.ReferenceSet(dim, **kw)
    pushed.insert(ids, x)
    pushed.publish()
    assert pushed.to_bytes() == reference


@pytest.mark.parametrize("order", ["C", "F"])
def test_bad_float64_rows_are_refused_by_row(backend, order):
    x = np.asarray(np.ones((5, 3)) * np.arange(5)[:, None], order=order)
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match=r"row 2\b"):
        streamknn.ReferenceSet.from_points(np.arange(5, dtype=np.uint64), x, backend=backend)
    ids = np.array([0, 1, 2, 1, 4], np.uint64)
    with pytest.raises(ValueError, match=r"ids\[3\] = 1 repeats an earlier id"):
        streamknn.ReferenceSet.from_points(ids, np.asarray(np.ones((5, 3)), order=order), backend=backend)


def test_bad_rows_of_a_large_load_are_named(backend, rng):
    # A load this large builds its id index on a second thread; the first bad row is still named.
    n = 70_000
    x = rng.standard_normal((n, 4)).astype(np.float32)
    ids = np.arange(n, dtype=np.uint64)
    ids[60_000], ids[65_000] = 7, 8
    with pytest.raises(ValueError, match=r"ids\[60000\] = 7 repeats an earlier id"):
        streamknn.ReferenceSet.from_points(ids, x, backend=backend)
    x[50_000, 3] = np.nan
    with pytest.raises(ValueError, match=r"row 50000\b"):
        streamknn.ReferenceSet.from_points(ids, x, backend=backend)


@pytest.mark.parametrize("case, message", [
    ("repeat", r"ids\[3\] = 1 repeats an earlier id"),
    ("invalid", "reserved"),
    ("nan", r"row 2\b"),
    ("label", r"labels\[1\] = 7 is outside \[0, 3\)"),
    ("count", "5 ids but 4 vectors"),
    ("missing", "targets are required"),
])
def test_bad_rows_are_refused_by_row(backend, case, message):
    ids = np.arange(5, dtype=np.uint64)
    x = np.ones((5, 2), np.float32) * np.arange(5)[:, None]
    labels = np.zeros(5, np.int64)
    kw = dict(backend=backend, n_classes=3)
    if case == "repeat":
        ids[3] = 1
    elif case == "invalid":
        ids[2] = streamknn.invalid_id
    elif case == "nan":
        x[2, 1] = np.nan
    elif case == "label":
        labels[1] = 7
    elif case == "count":
        x = x[:4]
    elif case == "missing":
        labels = None
    with pytest.raises(ValueError, match=message):
        streamknn.ReferenceSet.from_points(ids, x, labels, **kw)
