"""ReferenceSet.from_points with attribute words, and KnnClassifier / KnnRegressor .within(radius)
and .where(predicate): the same store as insert + publish, predictions against a float64 brute
force in numpy, and bad arguments refused by name."""
import os

import numpy as np
import pytest

import streamknn

BACKEND = os.environ.get("STREAMKNN_TEST_BACKEND", "cpu")


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2), dtype=np.float32)
    words = np.stack([rng.integers(0, 4, n), rng.integers(0, 16, n)], axis=1).astype(np.uint32)
    labels = rng.integers(0, 3, n)
    return X, words, labels


def brute_labels(X, labels, Q, k, mask, radius=np.inf):
    out = []
    for q in Q:
        d = np.sqrt(((X.astype(np.float64) - q) ** 2).sum(axis=1))
        d[~mask | (d > radius)] = np.inf
        near = np.lexsort((np.arange(len(X)), d))[:k]
        near = near[np.isfinite(d[near])]
        out.append(np.bincount(labels[near], minlength=3).argmax() if len(near) else -1)
    return np.array(out)


def test_from_points_attributes_equal_insert_then_publish():
    X, words, labels = data()
    ids = np.arange(len(X), dtype=np.uint64)
    kw = dict(n_classes=3, backend=BACKEND, queue_capacity=len(X))  # one publish for the pushes
    built = streamknn.ReferenceSet.from_points(ids, X, labels, attributes=words, **kw)
    assert built.attribute_words == 2
    pushed = streamknn.ReferenceSet(2, attribute_words=2, **kw)
    pushed.insert(ids, X, labels, attributes=words)
    pushed.publish()
    assert built.to_bytes() == pushed.to_bytes()
    # attribute_words given without attributes: every word 0; one word may be a 1-D array.
    zeros = streamknn.ReferenceSet.from_points(ids, X, attribute_words=3, backend=BACKEND)
    assert zeros.attribute_words == 3
    one = streamknn.ReferenceSet.from_points(ids, X, attributes=words[:, 0], backend=BACKEND)
    assert one.attribute_words == 1
    _, got, _ = one.search(X[:2], 4, where={"required": 1})
    assert all(words[int(i), 0] & 1 for i in got.ravel() if i != streamknn.invalid_id)


def test_from_points_attributes_refused_by_name():
    X, words, _ = data(20)
    ids = np.arange(20, dtype=np.uint64)
    with pytest.raises(streamknn.InvalidArgument, match="from_points.*attributes must have shape"):
        streamknn.ReferenceSet.from_points(ids, X, attributes=words, attribute_words=3, backend=BACKEND)
    with pytest.raises(streamknn.InvalidArgument, match="from_points.*carry no attributes"):
        streamknn.ReferenceSet.from_points(ids, X, attributes=words, attribute_words=0, backend=BACKEND)
    with pytest.raises(streamknn.InvalidArgument, match="from_points.*20 ids but 19 attribute rows"):
        streamknn.ReferenceSet.from_points(ids, X, attributes=words[:19], backend=BACKEND)
    with pytest.raises(streamknn.InvalidArgument, match="from_points.*attributes must be"):
        streamknn.ReferenceSet.from_points(ids, X, attributes=np.zeros((20, 2, 1), np.uint32), backend=BACKEND)


def test_classifier_within_and_where_against_brute_force():
    X, words, labels = data()
    store = streamknn.ReferenceSet.from_points(np.arange(len(X), dtype=np.uint64), X, labels, n_classes=3,
                                               attributes=words, backend="cpu")
    Q = np.random.default_rng(5).random((40, 2), dtype=np.float32)
    model = streamknn.KnnClassifier(store, 5)
    assert model.radius == np.inf
    near = model.within(0.03)
    assert near.radius == pytest.approx(0.03) and model.radius == np.inf  # a new model; this one unchanged
    all_pass = np.ones(len(X), bool)
    got, _ = near.predict(Q)
    np.testing.assert_array_equal(got, brute_labels(X, labels, Q, 5, all_pass, 0.03))
    assert (got == -1).any()
    _, proba, _ = near.predict_proba(Q)
    assert (proba[got == -1] == 0).all()
    where = {"required": np.array([1, 0], np.uint32), "forbidden": np.array([0, 8], np.uint32)}
    mask = ((words[:, 0] & 1) == 1) & ((words[:, 1] & 8) == 0)
    got, _ = model.where(where).predict(Q)
    np.testing.assert_array_equal(got, brute_labels(X, labels, Q, 5, mask))
    got, _ = model.where(where).within(0.1).predict(Q)
    np.testing.assert_array_equal(got, brute_labels(X, labels, Q, 5, mask, 0.1))


def test_regressor_within_and_where():
    X, words, _ = data()
    y = X[:, 0] * 2 + 1
    store = streamknn.ReferenceSet.from_points(np.arange(len(X), dtype=np.uint64), X, y, n_outputs=1,
                                               attributes=words, backend="cpu")
    Q = np.array([[0.5, 0.5], [5.0, 5.0]], np.float32)
    model = streamknn.KnnRegressor(store, 3)
    values, _ = model.within(0.2).predict(Q)
    assert np.isfinite(values[0, 0]) and np.isnan(values[1, 0])
    values, _ = model.where({"range_word": 1, "range_min": 3, "range_max": 3}).predict(Q[:1])
    d = np.sqrt(((X.astype(np.float64) - Q[0]) ** 2).sum(axis=1))
    d[words[:, 1] != 3] = np.inf
    assert values[0, 0] == pytest.approx(y[np.argsort(d, kind="stable")[:3]].mean(), rel=1e-5)


def test_within_and_where_refused_by_name():
    X, words, labels = data(20)
    store = streamknn.ReferenceSet.from_points(np.arange(20, dtype=np.uint64), X, labels, n_classes=3,
                                               attributes=words, backend="cpu")
    model = streamknn.KnnClassifier(store, 3)
    with pytest.raises(streamknn.InvalidArgument, match="KnnClassifier::within: radius = -1 is negative"):
        model.within(-1.0)
    with pytest.raises(streamknn.InvalidArgument, match="radius is NaN"):
        streamknn.KnnRegressor(streamknn.ReferenceSet(2, n_outputs=1), 3).within(float("nan"))
    with pytest.raises(streamknn.InvalidArgument, match="KnnClassifier.where"):
        model.where(None)
    with pytest.raises(streamknn.InvalidArgument, match="KnnClassifier.where.*unknown key"):
        model.where({"nope": 1})
    with pytest.raises(streamknn.InvalidArgument, match="KnnClassifier.where"):
        model.where({"required": np.zeros((2, 2), np.uint32)})  # one predicate, not one per query
