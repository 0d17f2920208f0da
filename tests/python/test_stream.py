"""River-style streaming models: one-at-a-time vs batched calls, against a numpy reference of
the sliding-window rule (window = the last window_size learned points; neighbours by
(distance, arrival number); vote ties to the class numbered first: numbers in ascending order,
names in order of first appearance, as the command-line runner numbers them)."""
import math

import numpy as np
import pytest

import streamknn


def class_order(y):
    distinct = list(dict.fromkeys(y))
    return sorted(distinct) if all(isinstance(c, (int, float, np.number)) for c in distinct) else distinct


def reference_prequential(X, y, k, window, weights="uniform", classify=True, aggregate="mean"):
    """Predictions of a test-then-train pass: row i is predicted on rows [i - window, i)
    (window None: rows [0, i))."""
    classes = class_order(y) if classify else None
    out = []
    for i in range(len(X)):
        lo = 0 if window is None else max(0, i - window)
        if i == lo:
            out.append(None if classify else math.nan)
            continue
        d = np.sqrt(((X[lo:i].astype(np.float64) - X[i]) ** 2).sum(axis=1))
        order = np.lexsort((np.arange(lo, i), d))[:k]
        dk = d[order]
        weighted = weights == "distance" if classify else aggregate == "weighted_mean"
        if not weighted:
            w = np.ones(len(order))
        else:
            w = (dk == 0).astype(float) if (dk == 0).any() else 1 / dk
        if classify:
            votes = np.zeros(len(classes))
            for j, wj in zip(order, w):
                votes[classes.index(y[lo + j])] += wj
            out.append(classes[int(np.argmax(votes))])
        elif aggregate == "median":
            out.append(float(np.median(np.asarray(y, dtype=np.float32)[lo + order])))
        else:
            vals = np.asarray(y, dtype=np.float32)[lo + order]
            out.append(float((w * vals).sum() / w.sum()))
    return out


def stream(rng, n=400):
    """n points in 3-D with string classes c0..c3, some rows repeated exactly (distance ties)."""
    X = rng.normal(size=(n, 3)).astype(np.float32)
    X[50:60] = X[40:50]
    X[n // 2: n // 2 + 60: 2] = X[n // 2 - 60: n // 2 - 30]
    y = [f"c{int(v)}" for v in (X[:, 0] * 2 + X[:, 1] > 0) + (X[:, 2] > 0.5) * 2]
    return X, y


def as_dicts(X, names=("a", "b", "c")):
    return [dict(zip(names, map(float, row))) for row in X]


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("window", [1, 7, 100, 1000, None])
def test_classifier_one_at_a_time_and_batched_match_the_reference(backend, rng, weights, window):
    X, y = stream(rng)
    want = reference_prequential(X, y, k=5, window=window, weights=weights)
    one = streamknn.SlidingWindowKNNClassifier(5, window, weights=weights, backend=backend)
    got_one = []
    for x, t in zip(as_dicts(X), y):
        got_one.append(one.predict_one(x))
        one.learn_one(x, t)
    assert got_one == want
    batched = streamknn.SlidingWindowKNNClassifier(5, window, weights=weights, backend=backend)
    got_batch = []
    for chunk in np.array_split(np.arange(len(X)), [3, 4, 40, 41, 170, 300]):  # uneven, some > window
        got_batch += batched.predict_then_learn_many([as_dicts(X)[i] for i in chunk], [y[i] for i in chunk])
    assert got_batch == want
    assert batched.n_learned == one.n_learned == len(X)
    probe = as_dicts(X[:20])
    assert batched.predict_many(probe) == one.predict_many(probe) == [one.predict_one(x) for x in probe]


def test_probabilities_one_at_a_time_equal_batched(backend, rng):
    X, y = stream(rng, n=150)
    one = streamknn.SlidingWindowKNNClassifier(4, 30, weights="distance", backend=backend)
    want = []
    for x, t in zip(as_dicts(X), y):
        want.append(one.predict_proba_one(x))
        one.learn_one(x, t)
    batched = streamknn.SlidingWindowKNNClassifier(4, 30, weights="distance", backend=backend)
    got = []
    for chunk in np.array_split(np.arange(len(X)), 4):
        got += batched.predict_then_learn_many(X[chunk], [y[i] for i in chunk], proba=True)
    assert [set(p) for p in got] == [set(p) for p in want]  # classes seen so far, in both
    for g, w in zip(got, want):
        for c in w:
            assert g[c] == pytest.approx(w[c], abs=1e-6)
    assert want[0] == {} and all(abs(sum(p.values()) - 1) < 1e-5 for p in want[1:])


def test_numeric_classes_are_numbered_in_ascending_order(backend):
    """Numbers arriving out of order (and past the store's class capacity) renumber the window,
    so vote ties keep going to the smallest class."""
    model = streamknn.SlidingWindowKNNClassifier(2, 10, backend=backend)
    model.learn_one({"x": 0.0}, 5)
    model.learn_one({"x": 2.0}, 9)
    model.learn_one({"x": 4.0}, 1)    # sorts first: renumbers
    model.learn_one({"x": 6.0}, 0)    # a fourth class, sorting first again
    model.learn_one({"x": 8.0}, 7.5)  # a fifth: the store's class capacity grows
    assert model.classes == [0, 1, 5, 7.5, 9]
    assert model.predict_one({"x": 1.0}) == 5    # tie 5 / 9 at distance 1
    assert model.predict_one({"x": 5.0}) == 0    # tie 1 / 0
    assert model.predict_proba_one({"x": 7.9}) == {0: 0.5, 1: 0.0, 5: 0.0, 7.5: 0.5, 9: 0.0}


def test_named_classes_are_numbered_by_first_appearance(backend):
    model = streamknn.SlidingWindowKNNClassifier(2, None, backend=backend)
    for x, c in [(0.0, "m"), (2.0, "z"), (4.0, "b"), (6.0, "a")]:
        model.learn_one({"x": x}, c)
    assert model.classes == ["m", "z", "b", "a"]
    assert model.predict_one({"x": 1.0}) == "m"  # tie m / z: 'm' came first
    assert model.predict_one({"x": 5.0}) == "b"  # tie b / a: 'b' came first
    given = streamknn.SlidingWindowKNNClassifier(2, 10, classes=["z", "m"], backend=backend)
    given.learn_many([{"x": 0.0}, {"x": 2.0}], ["m", "z"])
    assert given.predict_one({"x": 1.0}) == "z"  # the given order decides


def test_given_classes_and_integer_labels(backend, rng):
    X = rng.normal(size=(60, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) * 10
    model = streamknn.SlidingWindowKNNClassifier(3, 25, classes=[0, 10, 20], backend=backend)
    preds = model.predict_then_learn_many(X, y)
    assert preds == reference_prequential(X, list(y), 3, 25)
    assert model.classes == [0, 10, 20]


@pytest.mark.parametrize("aggregate", ["mean", "weighted_mean", "median"])
def test_regressor_one_at_a_time_and_batched_match_the_reference(backend, rng, aggregate):
    X = rng.normal(size=(300, 3)).astype(np.float32)
    X[100:150] = X[40:90]  # exact duplicates: distance ties resolved by arrival
    y = (X @ [1.0, -2.0, 0.5]).astype(np.float32)
    want = reference_prequential(X, y, 6, 50, classify=False, aggregate=aggregate)
    one = streamknn.SlidingWindowKNNRegressor(6, 50, aggregation_method=aggregate, backend=backend)
    got = []
    for x, t in zip(as_dicts(X), y):
        got.append(one.predict_one(x))
        one.learn_one(x, float(t))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    batched = streamknn.SlidingWindowKNNRegressor(6, 50, aggregation_method=aggregate, backend=backend)
    got_batch = []
    for chunk in np.array_split(np.arange(300), [1, 77, 80, 200]):
        got_batch += batched.predict_then_learn_many(X[chunk], y[chunk])
    np.testing.assert_allclose(got_batch, want, rtol=1e-5, atol=1e-5)
    assert math.isnan(got[0]) and math.isnan(got_batch[0])


def test_learn_many_equals_learn_one(backend, rng):
    X = rng.normal(size=(120, 3)).astype(np.float32)
    y = list((X[:, 0] > 0).astype(int))
    a = streamknn.SlidingWindowKNNClassifier(5, 40, backend=backend)
    b = streamknn.SlidingWindowKNNClassifier(5, 40, backend=backend)
    a.learn_many(as_dicts(X), y)
    for x, t in zip(as_dicts(X), y):
        b.learn_one(x, t)
    Q = as_dicts(rng.normal(size=(30, 3)))
    assert a.predict_many(Q) == b.predict_many(Q)
    assert a.predict_proba_many(Q) == b.predict_proba_many(Q)


def test_features_dicts_and_arrays(backend):
    model = streamknn.SlidingWindowKNNRegressor(1, 10, backend=backend)
    assert math.isnan(model.predict_one({"a": 1.0}))  # nothing learned yet
    model.learn_one({"b": 1.0, "a": 2.0}, 5.0)
    assert model.features == ["b", "a"]
    assert model.predict_one({"a": 2.0}) == 5.0  # a missing feature counts as 0
    with pytest.raises(ValueError, match="unknown features \\['c'\\]"):
        model.predict_one({"c": 1.0})
    arrays = streamknn.SlidingWindowKNNRegressor(1, 10, backend=backend)
    arrays.learn_many(np.array([[0.0, 0.0], [5.0, 5.0]]), [1.0, 2.0])
    assert arrays.features == [0, 1] and arrays.predict_many(np.array([[4.0, 4.0]])) == [2.0]
    with pytest.raises(ValueError, match="3 columns"):
        arrays.predict_many(np.zeros((1, 3)))
    fixed = streamknn.SlidingWindowKNNClassifier(features=["x", "y"], backend=backend)
    assert fixed.predict_one({"x": 1.0}) is None and fixed.predict_proba_one({"x": 1.0}) == {}
    with pytest.raises(ValueError, match="n_neighbors"):
        streamknn.SlidingWindowKNNClassifier(0)
    with pytest.raises(ValueError, match="window_size"):
        streamknn.SlidingWindowKNNRegressor(window_size=0)
    with pytest.raises(ValueError, match="aggregation_method"):
        streamknn.SlidingWindowKNNRegressor(aggregation_method="mode")


def test_the_window_holds_only_the_last_points(backend):
    model = streamknn.SlidingWindowKNNRegressor(50, 5, backend=backend)
    for i in range(23):
        model.learn_one({"x": float(i)}, float(i))
    assert model.predict_one({"x": 0.0}) == pytest.approx(np.mean(range(18, 23)))
    model._publish()
    assert model._store.size == 5  # older points were erased, not only hidden
