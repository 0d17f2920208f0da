"""streamknn.KNeighborsClassifier / KNeighborsRegressor against scikit-learn's estimators
(algorithm='brute') on scikit-learn's bundled data sets, plus the estimator API details.

Parity rule (as tests/sklearn/parity.py): where the k-th and (k+1)-th nearest training rows of a
query are at exactly the same distance, the k nearest are not unique and scikit-learn picks among
them in an unspecified order; those queries are checked against streamknn's documented rule (ties
to the smaller training row) computed here with numpy. Every other query must match scikit-learn:
same label, probabilities and values within 1e-5, same neighbour indices.
"""
import os
import pickle

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn import datasets  # noqa: E402
from sklearn import neighbors as skn  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import streamknn  # noqa: E402

TOL = 1e-5
CLASSIFICATION = [("iris", datasets.load_iris), ("wine", datasets.load_wine),
                  ("breast_cancer", datasets.load_breast_cancer), ("digits", datasets.load_digits)]
REGRESSION = [("diabetes", datasets.load_diabetes), ("linnerud", datasets.load_linnerud)]


def split(X, y, seed):
    order = np.random.default_rng(seed).permutation(len(X))
    cut = int(0.7 * len(X))
    return X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]


def rule_neighbours(Xtr, q, k):
    d = np.sqrt(((Xtr.astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1))
    return d, np.lexsort((np.arange(len(d)), d))[:k]


def boundary_tied(d, k):
    s = np.sort(d)
    return k < len(s) and s[k - 1] == s[k]


def clear_boundary(d, k, rel=1e-5):
    s = np.sort(d)
    return k >= len(s) or s[k] - s[k - 1] > rel * s[k]


def rule_weights(dk, weights):
    if weights == "uniform":
        return np.ones(len(dk))
    zero = dk == 0
    return zero.astype(float) if zero.any() else 1.0 / dk


def load(loader, name):
    X, y = loader(return_X_y=True)
    # streamknn computes in float32: give scikit-learn the same numbers.
    return split(X.astype(np.float32), y, seed=len(name))


@pytest.mark.parametrize("name, loader", CLASSIFICATION, ids=[c[0] for c in CLASSIFICATION])
@pytest.mark.parametrize("k", [1, 5, 15])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_parity(backend, name, loader, k, weights):
    Xtr, ytr, Xte, _ = load(loader, name)
    ytr = np.array([f"class-{v}" for v in ytr])  # arbitrary labels: classes_ maps them
    ours = streamknn.KNeighborsClassifier(n_neighbors=k, weights=weights, backend=backend).fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    label, proba = ours.predict(Xte), ours.predict_proba(Xte)
    want_label, want_proba = ref.predict(Xte), ref.predict_proba(Xte)
    ind = ours.kneighbors(Xte, return_distance=False)
    want_ind = ref.kneighbors(Xte, return_distance=False)
    tied = 0
    for i, q in enumerate(Xte):
        d, idx = rule_neighbours(Xtr, q, k)
        if boundary_tied(d, k):
            tied += 1
            votes = np.zeros(len(ours.classes_))
            np.add.at(votes, np.searchsorted(ours.classes_, ytr[idx]), rule_weights(d[idx], weights))
            assert label[i] == ours.classes_[np.argmax(votes)], i
            np.testing.assert_allclose(proba[i], votes / votes.sum(), atol=TOL)
            np.testing.assert_array_equal(ind[i], idx)
        else:
            assert label[i] == want_label[i], i
            np.testing.assert_allclose(proba[i], want_proba[i], atol=TOL)
            if clear_boundary(d, k):  # float32 rounding cannot swap the k-th and (k+1)-th rows
                np.testing.assert_array_equal(np.sort(ind[i]), np.sort(want_ind[i]))
    assert tied < len(Xte)  # the comparison with scikit-learn ran


@pytest.mark.parametrize("name, loader", REGRESSION, ids=[c[0] for c in REGRESSION])
@pytest.mark.parametrize("k", [1, 5, 15])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regressor_parity(backend, name, loader, k, weights):
    Xtr, ytr, Xte, _ = load(loader, name)
    if k > len(Xtr):  # scikit-learn refuses k > n_samples (linnerud has 14 training rows)
        pytest.skip(f"k={k} > {len(Xtr)} training rows")
    ours = streamknn.KNeighborsRegressor(n_neighbors=k, weights=weights, backend=backend).fit(Xtr, ytr)
    ref = skn.KNeighborsRegressor(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
    got, want = ours.predict(Xte), ref.predict(Xte)
    assert got.shape == want.shape and got.dtype == np.float64
    for i, q in enumerate(Xte):
        d, idx = rule_neighbours(Xtr, q, k)
        if boundary_tied(d, k):
            w = rule_weights(d[idx], weights)
            expect = (w[:, None] * ytr[idx].reshape(k, -1)).sum(axis=0) / w.sum()
            np.testing.assert_allclose(np.atleast_1d(got[i]), expect, rtol=TOL, atol=TOL)
        else:
            np.testing.assert_allclose(got[i], want[i], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("metric", ["cosine", "haversine", "euclidean"])
def test_other_metrics_match_scikit_learn(backend, metric, rng):
    if metric == "haversine":  # (latitude, longitude) in radians, as scikit-learn takes them
        X = np.column_stack([rng.uniform(-1.4, 1.4, 300), rng.uniform(-3.1, 3.1, 300)])
    else:
        X = rng.normal(size=(300, 6))
    X = X.astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    Xtr, ytr, Xte = X[:250], y[:250], X[250:]
    ours = streamknn.KNeighborsClassifier(n_neighbors=7, metric=metric, backend=backend).fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(n_neighbors=7, metric=metric, algorithm="brute").fit(Xtr, ytr)
    dist, ind = ours.kneighbors(Xte)
    want_dist, want_ind = ref.kneighbors(Xte)
    np.testing.assert_allclose(dist, want_dist, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ind, want_ind)  # random data: no ties
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), atol=TOL)


def test_kneighbors_of_the_training_set_excludes_each_row(backend, rng):
    X = rng.normal(size=(80, 3)).astype(np.float32)
    X[10] = X[11]  # a duplicate: its twin is at distance 0
    y = np.arange(80) % 3
    ours = streamknn.KNeighborsRegressor(n_neighbors=4, backend=backend).fit(X, y)
    ref = skn.KNeighborsRegressor(n_neighbors=4, algorithm="brute").fit(X, y)
    dist, ind = ours.kneighbors()
    want_dist, _ = ref.kneighbors()  # scikit-learn orders the twins 10 / 11 either way
    np.testing.assert_allclose(dist, want_dist, rtol=1e-4, atol=1e-4)
    for r in range(80):  # the rule: every other row by (distance, row)
        d = np.sqrt(((X.astype(np.float64) - X[r]) ** 2).sum(axis=1))
        others = np.delete(np.arange(80), r)
        np.testing.assert_array_equal(ind[r], others[np.lexsort((others, d[others]))][:4])
    assert ours.kneighbors(n_neighbors=2, return_distance=False).shape == (80, 2)


@pytest.mark.parametrize("labels", [
    np.array([7, -3, 7, 0, -3, 2]), np.array([250, 3, 3, 250], np.uint8), np.array([-128, 127, 0], np.int8),
    np.array([2**63 + 5, 2**63 + 1, 2**63 + 5], np.uint64), np.array([0, 2**40, 5]), np.array([1, 0, 1], ">i4"),
    np.array(["b", "a", "b"]), np.array([0.5, -1.0, 0.5])], ids=str)
def test_label_encoding_is_numpys_unique(labels):
    # Integers of a small range are encoded by a count per value, others by np.unique: both give
    # np.unique's classes (its dtype too) and inverse.
    from streamknn._sklearn import _unique_inverse
    classes, codes = _unique_inverse(labels)
    want_classes, want_codes = np.unique(labels, return_inverse=True)
    assert classes.dtype == want_classes.dtype and codes.dtype == np.int32
    np.testing.assert_array_equal(classes, want_classes)
    np.testing.assert_array_equal(codes, want_codes)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e30])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_refused_refit_names_the_row_and_keeps_the_fit(backend, rng, bad, dtype):
    # The library checks the rows as it stores them (scikit-learn's finiteness pass is left out
    # of fit): a NaN, an infinity or a magnitude beyond the library's bound is a ValueError naming
    # the row and the value, raised before the estimator changes.
    X = rng.normal(size=(200, 4)).astype(dtype)
    y = np.where(X[:, 0] > 0, 1, 0)
    Q = rng.normal(size=(20, 4)).astype(np.float32)
    bad_X = X.copy()
    bad_X[137, 2] = bad
    what = "contains NaN" if np.isnan(bad) else "contains infinity" if np.isinf(bad) else "contains a value too large"
    for est in (streamknn.NearestNeighbors(n_neighbors=3, backend=backend),
                streamknn.KNeighborsClassifier(n_neighbors=3, backend=backend),
                streamknn.KNeighborsRegressor(n_neighbors=3, backend=backend),
                streamknn.RadiusNeighborsClassifier(radius=2.0, backend=backend)):
        def fit(rows):
            return est.fit(rows) if isinstance(est, streamknn.NearestNeighbors) else est.fit(rows, y[:len(rows)])
        fit(X[:150])
        before = est.kneighbors(Q, n_neighbors=3)
        with pytest.raises(ValueError, match=f"Input X {what}") as refused:
            fit(bad_X)
        assert "row 137" in str(refused.value)
        assert est.n_samples_fit_ == 150
        after = est.kneighbors(Q, n_neighbors=3)
        np.testing.assert_array_equal(after[1], before[1])
        np.testing.assert_array_equal(after[0], before[0])


def test_a_refused_haversine_or_cosine_refit_keeps_the_fit(backend, rng):
    X = np.column_stack([rng.uniform(-1.0, 1.0, 100), rng.uniform(-3.0, 3.0, 100)])  # radians
    nn = streamknn.NearestNeighbors(n_neighbors=2, metric="haversine", backend=backend).fit(X)
    before = nn.kneighbors(X[:5])
    bad = X.copy()
    bad[40, 0] = 2.0  # 114.6 degrees
    with pytest.raises(ValueError, match="latitude"):
        nn.fit(bad)
    after = nn.kneighbors(X[:5])
    np.testing.assert_array_equal(after[1], before[1])
    # cosine rows are normalised before the library sees them: checked as scikit-learn checks
    cos = streamknn.NearestNeighbors(n_neighbors=2, metric="cosine", backend=backend).fit(X)
    before = cos.kneighbors(X[:5])
    bad[40, 0] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        cos.fit(bad)
    np.testing.assert_array_equal(cos.kneighbors(X[:5])[1], before[1])


def test_partial_fit_equals_fit_on_everything(backend, rng):
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = np.where(X[:, 0] + X[:, 1] > 0, "pos", "neg")
    Q = rng.normal(size=(50, 4)).astype(np.float32)
    whole = streamknn.KNeighborsClassifier(n_neighbors=9, weights="distance", backend=backend).fit(X, y)
    parts = streamknn.KNeighborsClassifier(n_neighbors=9, weights="distance", backend=backend)
    for chunk in np.array_split(np.arange(300), 5):
        parts.partial_fit(X[chunk], y[chunk], classes=["neg", "pos"])
    assert parts.n_samples_fit_ == 300
    np.testing.assert_array_equal(parts.predict(Q), whole.predict(Q))
    np.testing.assert_array_equal(parts.predict_proba(Q), whole.predict_proba(Q))
    np.testing.assert_array_equal(parts.kneighbors(Q)[1], whole.kneighbors(Q)[1])
    with pytest.raises(ValueError, match="not in classes_"):
        parts.partial_fit(X[:3], ["neg", "pos", "other"])
    with pytest.raises(ValueError, match="X has 3 features"):
        parts.partial_fit(X[:3, :3], y[:3])
    reg = streamknn.KNeighborsRegressor(n_neighbors=3, backend=backend)
    reg.partial_fit(X[:100], X[:100, :2]).partial_fit(X[100:], X[100:, :2])
    full = streamknn.KNeighborsRegressor(n_neighbors=3, backend=backend).fit(X, X[:, :2])
    np.testing.assert_array_equal(reg.predict(Q), full.predict(Q))
    with pytest.raises(ValueError, match="outputs"):
        reg.partial_fit(X[:3], X[:3, :3])


def test_parameters_pickling_cloning_and_pipelines(backend, rng):
    X = rng.normal(size=(120, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    model = streamknn.KNeighborsClassifier(n_neighbors=3, backend=backend)
    assert model.get_params() == dict(n_neighbors=3, weights="uniform", algorithm="auto", leaf_size=30,
                                      metric="minkowski", p=2, metric_params=None, n_jobs=None, backend=backend)
    assert set(model.get_params()) - {"backend"} == set(skn.KNeighborsClassifier().get_params())
    with pytest.raises(NotFittedError):
        model.predict(X)
    model.fit(X, y)
    assert model.n_features_in_ == 5 and model.n_samples_fit_ == 120 and model.effective_metric_ == "euclidean"
    copy = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(copy.predict(X), model.predict(X))
    copy.partial_fit(X[:5], y[:5])  # the unpickled store is live
    assert copy.n_samples_fit_ == 125 and model.n_samples_fit_ == 120
    model.set_params(n_neighbors=1)  # takes effect at predict, as in scikit-learn
    assert model.score(X, y) == 1.0
    assert clone(model).get_params()["n_neighbors"] == 1
    pipe = make_pipeline(StandardScaler(), streamknn.KNeighborsRegressor(backend=backend))
    assert cross_val_score(pipe, X, X[:, 0] * 2, cv=3).mean() > 0.5


@pytest.mark.parametrize("params, message", [
    (dict(weights="gaussian"), "weights="),
    (dict(metric="manhattan"), "metric='manhattan' is not supported"),
    (dict(metric="precomputed"), "metric='precomputed' is not supported"),
    (dict(metric=lambda a, b: 0.0), "callables"),
    (dict(metric="minkowski", p=1), "needs p=2"),
    (dict(metric_params={"p": 2, "w": [1, 1]}), "metric_params keys \\['w'\\]"),
    (dict(algorithm="fast"), "algorithm='fast'"),
    (dict(leaf_size=0), "leaf_size=0"),
    (dict(metric="ip", weights="distance"), "non-negative distances"),
    (dict(backend="tpu"), "backend="),
    (dict(n_neighbors=0), "Expected n_neighbors > 0"),
    (dict(n_neighbors=5000), "n_neighbors in \\[1, 4096\\]"),
    (dict(n_jobs=0), "n_jobs=0 is not supported"),
    (dict(n_jobs=1.5), "n_jobs=1.5 is not supported"),
    (dict(n_jobs=True), "n_jobs=True is not supported"),
])
def test_bad_parameters_fail_at_fit(params, message):
    X, y = np.zeros((10, 2)), np.arange(10) % 2
    model = streamknn.KNeighborsClassifier(**params)  # scikit-learn validates at fit, not here
    with pytest.raises(ValueError, match=message):
        model.fit(X, y)


def test_n_jobs_sets_the_cpu_threads_and_not_the_answers(rng):
    # joblib's convention: None and -1 every hardware thread (the library's 0), -2 all but one;
    # a positive count as given, capped at the library's 1024. Read at fit, kept by pickling.
    X = rng.normal(size=(3000, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    cpus = os.cpu_count() or 1
    predictions = []
    for n_jobs, threads in [(None, 0), (-1, 0), (1, 1), (3, 3), (-2, max(1, cpus - 1)), (5000, 1024)]:
        model = streamknn.KNeighborsClassifier(n_neighbors=7, weights="distance", backend="cpu", n_jobs=n_jobs)
        model.fit(X, y)
        assert model._store.cpu_threads == threads, n_jobs
        assert pickle.loads(pickle.dumps(model))._store.cpu_threads == threads
        predictions.append(model.predict_proba(X[:500]))
    for p in predictions[1:]:
        np.testing.assert_array_equal(p, predictions[0])


def test_k_larger_than_the_training_set_is_refused_as_in_scikit_learn(backend):
    model = streamknn.KNeighborsClassifier(n_neighbors=5, backend=backend).fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit"):
        model.predict([[0.5]])


@pytest.mark.parametrize("cls, multi_output", [(streamknn.KNeighborsClassifier, True),
                                               (streamknn.KNeighborsRegressor, True)],
                         ids=["classifier", "regressor"])
def test_tags_on_this_scikit_learn(cls, multi_output):
    """The tags scikit-learn reads: __sklearn_tags__ (>= 1.6) or _more_tags (older), same values."""
    estimator = cls()
    try:
        from sklearn.utils import get_tags  # scikit-learn >= 1.6
    except ImportError:
        tags = estimator._get_tags()
        assert tags["multioutput"] is multi_output and tags["requires_y"] is True
        assert tags["X_types"] == ["2darray"] and not tags["allow_nan"]
        return
    tags = get_tags(estimator)
    assert tags.target_tags.multi_output is multi_output and tags.target_tags.required is True
    assert tags.estimator_type == ("regressor" if cls is streamknn.KNeighborsRegressor else "classifier")
    assert tags.input_tags.sparse and not tags.input_tags.allow_nan and tags.input_tags.two_d_array


def test_input_validation_works_on_this_scikit_learn():
    """fit / predict validate through sklearn.utils.validation.validate_data where it exists
    (scikit-learn >= 1.6; BaseEstimator._validate_data before): n_features_in_ is set, a wrong
    width and sparse input are refused with scikit-learn's messages."""
    from scipy import sparse

    from streamknn import _sklearn_base as _sklearn

    import sklearn.utils.validation as validation

    assert (_sklearn._sklearn_validate_data is not None) == hasattr(validation, "validate_data")
    X = np.arange(24, dtype=np.float64).reshape(8, 3)
    model = streamknn.KNeighborsRegressor(n_neighbors=2).fit(X, np.arange(8.0))
    assert model.n_features_in_ == 3
    with pytest.raises(ValueError, match="X has 2 features, but KNeighborsRegressor is expecting 3 features"):
        model.predict(X[:, :2])
    dense = streamknn.KNeighborsRegressor(n_neighbors=2).fit(X, np.arange(8.0))
    np.testing.assert_array_equal(  # sparse input is densified
        streamknn.KNeighborsRegressor(n_neighbors=2).fit(sparse.csr_matrix(X), np.arange(8.0)).predict(X),
        dense.predict(sparse.csr_matrix(X)))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        streamknn.KNeighborsClassifier(n_neighbors=2).fit(X, np.arange(7))
