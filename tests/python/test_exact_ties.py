"""Exact answers on tied data, against scikit-learn and against the documented rule.

The training rows lie on a small integer grid, each repeated, so most queries have exact ties
among their neighbours (and at the k-th place). Every squared distance here is a small multiple of
1/4, exact in float32 and float64 alike, so scikit-learn's float64 brute force sees the same
distances as streamknn's exact ranking. Where the k-th and (k+1)-th nearest rows tie, scikit-learn
picks among them in an unspecified order: those queries are checked against streamknn's rule, the
k smallest (distance, training row), computed here with exact integers; every other query must
match scikit-learn exactly, with weights='distance' (a row at distance 0 takes all the weight).
"""
import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn import neighbors as skn  # noqa: E402

import streamknn  # noqa: E402

TOL = 1e-5


def grid_data(rng, n, dim, copies):
    base = rng.integers(0, 4, size=(n, dim)).astype(np.float32)
    X = np.repeat(base, rng.integers(1, copies + 1, size=n), axis=0)  # each row 1 to `copies` times
    order = rng.permutation(len(X))
    return X[order]


def rule(Xtr, q, k):
    """Exact squared distances (times 4, as integers) and the rule's k rows."""
    d4 = (np.rint(4 * (Xtr.astype(np.float64) - q.astype(np.float64)) ** 2)).astype(np.int64).sum(axis=1)
    idx = np.lexsort((np.arange(len(d4)), d4))[:k]
    return d4, idx


def tied_at_k(d4, k):
    s = np.sort(d4)
    return k < len(s) and s[k - 1] == s[k]


def weights_of(d, weights):
    if weights == "uniform":
        return np.ones(len(d))
    zero = d == 0
    return zero.astype(float) if zero.any() else 1.0 / d


@pytest.mark.parametrize("k", [1, 3, 5, 12])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_on_tied_grid(backend, rng, k, weights):
    Xtr = grid_data(rng, 60, 3, 3)
    ytr = rng.integers(0, 3, size=len(Xtr))
    Xte = (rng.integers(0, 8, size=(80, 3)) / 2.0).astype(np.float32)  # on and between the grid points
    ours = streamknn.KNeighborsClassifier(n_neighbors=k, weights=weights, backend=backend).fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
    label, proba = ours.predict(Xte), ours.predict_proba(Xte)
    dist, ind = ours.kneighbors(Xte)
    tied = 0
    for i, q in enumerate(Xte):
        d4, idx = rule(Xtr, q, k)
        np.testing.assert_array_equal(ind[i], idx)  # the rule, always (exact distances, then row)
        np.testing.assert_array_equal(dist[i], np.sqrt(d4[idx] / 4.0).astype(np.float32))
        if tied_at_k(d4, k):
            tied += 1
            votes = np.zeros(3)
            np.add.at(votes, ytr[idx], weights_of(np.sqrt(d4[idx] / 4.0), weights))
            assert label[i] == np.argmax(votes), i
            np.testing.assert_allclose(proba[i], votes / votes.sum(), atol=TOL)
        else:
            assert label[i] == ref.predict(Xte[i:i + 1])[0], i
            np.testing.assert_allclose(proba[i], ref.predict_proba(Xte[i:i + 1])[0], atol=TOL)
    assert tied > 0


@pytest.mark.parametrize("k", [2, 5, 9])
def test_regressor_distance_weights_on_tied_grid(backend, rng, k):
    Xtr = grid_data(rng, 50, 2, 4)
    ytr = rng.normal(size=len(Xtr)).astype(np.float32)
    Xte = (rng.integers(0, 8, size=(60, 2)) / 2.0).astype(np.float32)
    ours = streamknn.KNeighborsRegressor(n_neighbors=k, weights="distance", backend=backend).fit(Xtr, ytr)
    ref = skn.KNeighborsRegressor(n_neighbors=k, weights="distance", algorithm="brute").fit(Xtr, ytr)
    got = ours.predict(Xte)
    for i, q in enumerate(Xte):
        d4, idx = rule(Xtr, q, k)
        if tied_at_k(d4, k):
            w = weights_of(np.sqrt(d4[idx] / 4.0), "distance")
            want = (w * ytr[idx].astype(np.float64)).sum() / w.sum()
        else:
            want = ref.predict(Xte[i:i + 1])[0]
        assert abs(got[i] - want) <= TOL * max(1.0, abs(want)), i
