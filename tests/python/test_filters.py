"""Attributes, predicates (`where`) and radius search through the Python package: the arrays they
take, their answers against a float64 brute force in numpy, bad input refused by name, and the
radius estimators against scikit-learn's on its data sets (euclidean, cosine, haversine)."""
import os

import numpy as np
import pytest

import streamknn

BACKEND = os.environ.get("STREAMKNN_TEST_BACKEND", "cpu")


def store_with_attributes(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2), dtype=np.float32)
    words = np.stack([rng.integers(0, 4, n), rng.integers(0, 1000, n)], axis=1).astype(np.uint32)
    s = streamknn.ReferenceSet(2, attribute_words=2, backend=BACKEND, cpu_threads=2)
    s.insert(np.arange(n, dtype=np.uint64), X, attributes=words)
    s.publish()
    return s, X, words


def brute(X, q, k, mask):
    d = np.sqrt(((X.astype(np.float64) - q) ** 2).sum(axis=1))
    d[~mask] = np.inf
    order = np.lexsort((np.arange(len(X)), d))[:k]
    return order[np.isfinite(d[order])]


def test_where_shared_and_per_query():
    s, X, words = store_with_attributes()
    Q = np.random.default_rng(1).random((3, 2), dtype=np.float32)
    _, ids, _ = s.search(Q, 8, where={"required": [1, 0], "range_word": 1, "range_min": 100, "range_max": 600})
    mask = ((words[:, 0] & 1) == 1) & (words[:, 1] >= 100) & (words[:, 1] <= 600)
    for q in range(3):
        assert list(ids[q]) == list(brute(X, Q[q], 8, mask))
    required = np.array([[2, 0], [0, 0], [3, 0]], dtype=np.uint32)
    forbidden = np.array([[0, 0], [2, 0], [0, 0]], dtype=np.uint32)
    _, ids, _ = s.search(Q, 5, where={"required": required, "forbidden": forbidden})
    for q in range(3):
        m = ((words[:, 0] & required[q, 0]) == required[q, 0]) & ((words[:, 0] & forbidden[q, 0]) == 0)
        assert list(ids[q]) == list(brute(X, Q[q], 5, m))


def test_none_pass_pads_and_set_attributes_publishes():
    s, X, words = store_with_attributes(50)
    d, ids, _ = s.search(np.zeros((1, 2), np.float32), 3, where={"range_word": 1, "range_min": 5000})
    assert (ids == streamknn.invalid_id).all() and np.isinf(d).all()
    s.set_attributes(np.arange(3, dtype=np.uint64), np.array([[0, 5000]] * 3, dtype=np.uint32))
    assert s.publish().attributed == 3
    _, ids, _ = s.search(np.zeros((1, 2), np.float32), 4, where={"range_word": 1, "range_min": 5000})
    assert sorted(ids[0][:3]) == [0, 1, 2] and ids[0][3] == streamknn.invalid_id


def test_radius_search_and_search_within_against_brute_force():
    s, X, words = store_with_attributes(600)
    Q = np.random.default_rng(2).random((4, 2), dtype=np.float32)
    offsets, ids, dist, capped, _ = s.radius_search(Q, 0.1)
    assert offsets.shape == (5,) and not capped.any()
    for q in range(4):
        d = np.sqrt(((X.astype(np.float64) - Q[q]) ** 2).sum(axis=1))
        want = brute(X, Q[q], len(X), d <= 0.1)
        assert list(ids[offsets[q]:offsets[q + 1]]) == list(want)
        assert np.all(np.diff(dist[offsets[q]:offsets[q + 1]]) >= 0)
    offsets, ids, _, capped, _ = s.radius_search(Q, 0.1, max_results=3, where={"required": [1, 0]})
    assert (np.diff(offsets) <= 3).all()
    _, within, _ = s.search_within(Q, 3, 0.1, where={"required": [1, 0]})
    for q in range(4):
        got = list(ids[offsets[q]:offsets[q + 1]])
        assert list(within[q][:len(got)]) == got
        assert (within[q][len(got):] == streamknn.invalid_id).all()


def test_bad_input_is_refused_by_name():
    s, _, _ = store_with_attributes(10)
    with pytest.raises(streamknn.InvalidArgument, match="attributes must have shape"):
        s.insert([100], np.zeros((1, 2), np.float32), attributes=np.zeros((1, 3), np.uint32))
    with pytest.raises(streamknn.InvalidArgument, match="radius"):
        s.radius_search(np.zeros((1, 2), np.float32), -1.0)
    with pytest.raises(streamknn.InvalidArgument, match="max_results = 0"):
        s.radius_search(np.zeros((1, 2), np.float32), 1.0, max_results=0)
    with pytest.raises(streamknn.InvalidArgument, match="unknown key"):
        s.search(np.zeros((1, 2), np.float32), 1, where={"needed": [1, 0]})
    with pytest.raises(streamknn.InvalidArgument, match="where"):
        s.search(np.zeros((1, 2), np.float32), 1, where={"required": [1, 0, 0]})
    plain = streamknn.ReferenceSet(2, backend=BACKEND)
    with pytest.raises(streamknn.InvalidArgument, match="no attributes"):
        plain.search(np.zeros((1, 2), np.float32), 1, where={"required": [1]})
    assert s.pending == 0 and plain.pending == 0


sklearn = pytest.importorskip("sklearn")
from sklearn import datasets  # noqa: E402
from sklearn import neighbors as skn  # noqa: E402


def _clear_of_boundary(X, Q, radius, metric):
    """Queries none of whose float64 distances lies within 1e-4 (relative) of the radius: there
    float32 storage cannot move a row across it."""
    if metric == "cosine":
        Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
        Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        d = 1 - Qn @ Xn.T
    else:
        d = np.sqrt(((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2))
    return Q[~(np.abs(d - radius) < 1e-4 * max(radius, 1e-3)).any(axis=1)]


@pytest.mark.parametrize("metric,radius", [("euclidean", 0.9), ("cosine", 0.02)])
def test_radius_estimators_match_scikit_learn(metric, radius):
    X, y = datasets.load_iris(return_X_y=True)
    X = X.astype(np.float32).astype(np.float64)  # the library stores float32
    rng = np.random.default_rng(4)
    Q = (X[::2] + rng.normal(0, 0.05, X[::2].shape)).astype(np.float32).astype(np.float64)
    Q = _clear_of_boundary(X, Q, radius, metric)
    assert len(Q) > 20
    for weights in ("uniform", "distance"):
        tol = 1e-6 if weights == "uniform" else 1e-3  # 1/d of float32 distances
        ours = streamknn.RadiusNeighborsClassifier(radius, weights=weights, metric=metric, outlier_label="most_frequent",
                                                   backend=BACKEND).fit(X, y)
        theirs = skn.RadiusNeighborsClassifier(radius, weights=weights, metric=metric, algorithm="brute",
                                               outlier_label="most_frequent").fit(X, y)
        np.testing.assert_allclose(ours.predict_proba(Q), theirs.predict_proba(Q), atol=tol)
        reg_ours = streamknn.RadiusNeighborsRegressor(radius, weights=weights, metric=metric,
                                                      backend=BACKEND).fit(X, X[:, 0])
        reg_theirs = skn.RadiusNeighborsRegressor(radius, weights=weights, metric=metric, algorithm="brute").fit(X, X[:, 0])
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(reg_ours.predict(Q), reg_theirs.predict(Q), rtol=tol)
    d1, i1 = ours.radius_neighbors(Q, sort_results=True)
    d2, i2 = theirs.radius_neighbors(Q, sort_results=True)
    for a, b in zip(i1, i2):
        assert sorted(a) == sorted(b)


def test_haversine_radius_neighbors_match_scikit_learn():
    rng = np.random.default_rng(3)
    X = np.radians(np.stack([rng.uniform(40, 41, 300), rng.uniform(-74, -73, 300)], axis=1)).astype(np.float32)
    X = X.astype(np.float64)
    r = 5000 / 6371008.8  # 5 km in radians
    ours = streamknn.NearestNeighbors(radius=r, metric="haversine", backend=BACKEND).fit(X)
    theirs = skn.NearestNeighbors(radius=r, metric="haversine", algorithm="brute").fit(X)
    d1, i1 = ours.radius_neighbors(X[:20])
    d2, i2 = theirs.radius_neighbors(X[:20])
    for a, b, da, db in zip(i1, i2, d1, d2):
        order = np.argsort(b)
        assert not (np.abs(db - r) < 1e-5 * r).any()  # no row near the boundary in this data
        assert set(a) == set(b)
        common = np.intersect1d(a, b)
        np.testing.assert_allclose(da[np.isin(a, common)], db[order][np.isin(b[order], common)], atol=2e-7)
    g = ours.radius_neighbors_graph(X[:20], mode="distance")
    assert g.shape == (20, 300)
