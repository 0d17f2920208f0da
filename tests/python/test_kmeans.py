"""streamknn.KMeans against scikit-learn's KMeans(algorithm='lloyd') on real data sets, from the
same starting centroids, and scikit-learn's check_estimator.

Both cluster the same float32 values (scikit-learn gets them as float64). scikit-learn keeps float64
centroids; ours are float64 means rounded once to float32, and its distances come from a matrix
product (|x|^2 - 2<x, c> + |c|^2) while ours are exact. So the labels and iteration counts are
required equal, and the inertia and the centroids equal up to that rounding (relative 1e-6).
Exact ties are decided by index here and by rounding there, so the data sets have none (digits
is jittered).
"""
import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.cluster import KMeans as SkKMeans  # noqa: E402
from sklearn.datasets import load_digits, load_iris, load_wine, make_blobs  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import streamknn  # noqa: E402
from streamknn import _streamknn  # noqa: E402
from conftest import BACKEND  # noqa: E402


@pytest.fixture(autouse=True)
def _needs_backend(backend):
    """Skips on the GPU run when no device is usable."""


def _datasets():
    iris = load_iris().data
    # Digits' pixels are small integers: exact ties between centroids are common there, and
    # scikit-learn's matrix-product distances break them by rounding, not by index. A fixed jitter
    # of a thousandth keeps the data's shape and leaves no ties.
    digits = load_digits().data + np.random.default_rng(0).uniform(-1e-3, 1e-3, size=(1797, 64))
    wine = load_wine().data
    blobs, _ = make_blobs(n_samples=3000, n_features=12, centers=9, random_state=3)
    return [("iris", iris, 3), ("iris", iris, 8), ("digits", digits, 10), ("digits", digits, 30),
            ("wine", wine, 4), ("blobs", blobs, 9)]


@pytest.mark.parametrize("name,X,k", _datasets(), ids=lambda v: str(v) if not hasattr(v, "shape") else "")
@pytest.mark.parametrize("start", [0, 1, 2])
def test_equals_sklearn_lloyd_from_the_same_start(name, X, k, start):
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    rng = np.random.default_rng([start, k])
    init = X32[rng.choice(len(X32), size=k, replace=False)]
    ours = streamknn.KMeans(k, init=init, n_init=1, max_iter=300, tol=1e-4, backend=BACKEND).fit(X32)
    sk = SkKMeans(k, init=init.astype(np.float64), n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(
        X32.astype(np.float64))
    np.testing.assert_array_equal(ours.labels_, sk.labels_)
    assert ours.n_iter_ == sk.n_iter_
    np.testing.assert_allclose(ours.inertia_, sk.inertia_, rtol=1e-6)
    np.testing.assert_allclose(ours.cluster_centers_, sk.cluster_centers_.astype(np.float32), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X32), ours.labels_)
    np.testing.assert_allclose(ours.score(X32), sk.score(X32.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(ours.transform(X32.astype(np.float64)), sk.transform(X32.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)


def test_kmeans_plus_plus_is_seeded_and_good():
    X, y = make_blobs(n_samples=2000, n_features=5, centers=6, cluster_std=0.5, random_state=0)
    a = streamknn.KMeans(6, random_state=4, backend=BACKEND).fit(X)
    b = streamknn.KMeans(6, random_state=4, backend=BACKEND).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    sk = SkKMeans(6, n_init=10, random_state=0).fit(X)
    assert a.inertia_ <= sk.inertia_ * 1.05
    assert a.fit_predict(X).dtype == np.int32
    assert a.cluster_centers_.dtype == np.float64


def test_ties_go_to_the_smaller_index():
    X = np.array([[1.0], [1.0], [0.0], [2.0]])
    km = streamknn.KMeans(2, init=np.array([[0.0], [2.0]]), max_iter=1, backend=BACKEND).fit(X)
    np.testing.assert_array_equal(km.predict(np.array([[1.0], [3.0], [-1.0]])), [0, 1, 0])


def test_bad_input():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="n_samples=5 should be >= n_clusters=6"):
        streamknn.KMeans(6, backend=BACKEND).fit(X)
    with pytest.raises(ValueError, match="max_iter"):
        streamknn.KMeans(2, max_iter=0, backend=BACKEND).fit(X)
    with pytest.raises(ValueError, match="NaN|infinity"):
        streamknn.KMeans(2, backend=BACKEND).fit(np.array([[0.0, np.nan], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="shape of the initial centers"):
        streamknn.KMeans(2, init=np.zeros((3, 2)), backend=BACKEND).fit(X)
    with pytest.raises(streamknn.InvalidArgument, match="clusters=0"):
        _streamknn.kmeans_fit(np.zeros((3, 2), np.float32), 0, backend=BACKEND)
    with pytest.warns(RuntimeWarning, match="only one init"):
        streamknn.KMeans(2, init=np.zeros((2, 2)), n_init=3, backend=BACKEND).fit(X)


def test_verbose_reports_every_iteration_and_changes_nothing(capsys):
    X, _ = make_blobs(n_samples=2000, n_features=4, centers=6, random_state=4)
    quiet = streamknn.KMeans(6, init="random", n_init=3, tol=0, random_state=2, backend=BACKEND).fit(X)
    loud = streamknn.KMeans(6, init="random", n_init=3, tol=0, random_state=2, verbose=1, backend=BACKEND).fit(X)
    lines = capsys.readouterr().out.splitlines()
    np.testing.assert_array_equal(loud.labels_, quiet.labels_)
    np.testing.assert_array_equal(loud.cluster_centers_, quiet.cluster_centers_)
    assert loud.inertia_ == quiet.inertia_
    assert lines[0] == "Start 0, iteration 1: 2000 labels changed, centroid shift " + lines[0].split()[-1]
    last = [line for line in lines if line.endswith("(last)")]
    assert [line.split(",")[0] for line in last] == ["Start 0", "Start 1", "Start 2"]
    assert f"iteration {loud.n_iter_}:" in " ".join(last)
    with pytest.raises(ValueError, match="verbose"):
        streamknn.KMeans(2, verbose=-1, backend=BACKEND).fit(X)


def test_on_iteration_reports_and_its_exception_ends_the_fit():
    X = make_blobs(n_samples=500, n_features=3, centers=4, random_state=1)[0].astype(np.float32)
    heard = []
    result = _streamknn.kmeans_fit(X, 4, seed=5, backend=BACKEND, on_iteration=lambda *a: heard.append(a))
    assert [h[1] for h in heard] == list(range(1, result[3] + 1))
    assert heard[0][:3] == (0, 1, 500) and heard[-1][4] and not any(h[4] for h in heard[:-1])

    def stop(start, iteration, changed, shift, last):
        if iteration == 2:
            raise KeyError("stopped at 2")
    with pytest.raises(KeyError, match="stopped at 2"):
        _streamknn.kmeans_fit(X, 4, seed=5, tol=0, backend=BACKEND, on_iteration=stop)
    with pytest.raises(streamknn.InvalidArgument, match="on_iteration must be callable"):
        _streamknn.kmeans_fit(X, 4, backend=BACKEND, on_iteration=3)


def test_over_a_reference_set_snapshot():
    X, _ = make_blobs(n_samples=400, n_features=3, centers=4, random_state=1)
    X32 = X.astype(np.float32)
    store = streamknn.ReferenceSet.from_points(np.arange(10, 410, dtype=np.uint64), X32, backend=BACKEND)
    centers, labels, inertia, n_iter, converged, _, ids, epoch = _streamknn.kmeans_fit_set(
        store, 4, seed=5, backend=BACKEND)
    np.testing.assert_array_equal(ids, np.arange(10, 410))
    assert epoch == store.epoch
    direct = _streamknn.kmeans_fit(X32, 4, seed=5, backend=BACKEND)
    np.testing.assert_array_equal(direct[1], labels)
    np.testing.assert_array_equal(direct[0], centers)


def test_estimator_fits_a_reference_set_snapshot_as_its_points():
    X, _ = make_blobs(n_samples=600, n_features=3, centers=5, random_state=2)
    X32 = X.astype(np.float32)
    ids = np.arange(100, 700, dtype=np.uint64)
    store = streamknn.ReferenceSet.from_points(ids, X32, backend=BACKEND)
    store.erase(ids[::4])
    store.publish()
    store.insert(np.array([5], dtype=np.uint64), X32[:1])  # queued, not published: not clustered
    live = np.sort(ids[np.arange(600) % 4 != 0])
    for init in ("k-means++", X32[1:6]):
        km = streamknn.KMeans(5, init=init, random_state=3, backend=BACKEND).fit(store)
        assert km.epoch_ == store.epoch and km.n_features_in_ == 3
        order = np.argsort(km.ids_)
        np.testing.assert_array_equal(km.ids_[order], live)
        rows = X32[(km.ids_ - 100).astype(np.int64)]
        plain = streamknn.KMeans(5, init=init, random_state=3, backend=BACKEND).fit(rows)
        np.testing.assert_array_equal(km.labels_, plain.labels_)
        np.testing.assert_array_equal(km.cluster_centers_, plain.cluster_centers_)
        assert km.inertia_ == plain.inertia_
    with pytest.raises(ValueError, match="n_samples=450 should be >= n_clusters=451"):
        streamknn.KMeans(451, backend=BACKEND).fit(store)


@parametrize_with_checks([streamknn.KMeans(backend=BACKEND)])
def test_sklearn_estimator_check(estimator, check):
    check(estimator)


@pytest.mark.parametrize("far", [1, 2])
def test_empty_clusters_relocated_as_sklearn(far):
    """Starting centroids far from every point: their clusters are empty at once and take the
    points farthest from their centroids, farthest first (scikit-learn orders them so for up to
    two empty clusters), then the fits go on alike."""
    X, _ = make_blobs(n_samples=4000, n_features=6, centers=5, cluster_std=0.8, random_state=far)
    X32 = X.astype(np.float32)
    init = X32[:8].copy()
    init[1:1 + far] = np.float32(1e3) * np.arange(1, far + 1, dtype=np.float32)[:, None]
    ours = streamknn.KMeans(8, init=init, n_init=1, max_iter=300, tol=1e-4, backend=BACKEND).fit(X32)
    sk = SkKMeans(8, init=init.astype(np.float64), n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(
        X32.astype(np.float64))
    np.testing.assert_array_equal(ours.labels_, sk.labels_)
    assert ours.n_iter_ == sk.n_iter_
    np.testing.assert_allclose(ours.inertia_, sk.inertia_, rtol=1e-6)
    np.testing.assert_allclose(ours.cluster_centers_, sk.cluster_centers_.astype(np.float32), rtol=1e-6, atol=1e-6)


def _device_frameworks():
    """(name, to_device) for PyTorch and CuPy where installed with a usable CUDA device."""
    out = []
    try:
        import torch

        if torch.cuda.is_available():
            out.append(("torch", lambda a: torch.from_numpy(a).cuda()))
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append(("cupy", cupy.asarray))
    except Exception:  # noqa: BLE001 - no CuPy, or no driver behind it
        pass
    return out


@pytest.mark.parametrize("init", ["given", "random", "k-means++"])
def test_device_arrays_are_clustered_in_place_as_host_arrays(backend, init):
    """A CuPy array or PyTorch CUDA tensor goes to KMeans::fit_device, read in place: the same
    labels, centroids, inertia and iterations as the same values in a NumPy array."""
    if backend == "cpu" or not streamknn.cuda_available():
        pytest.skip("device arrays need the CUDA backend")
    frameworks = _device_frameworks()
    if not frameworks:
        pytest.skip("neither PyTorch nor CuPy with a CUDA device")
    X, _ = make_blobs(n_samples=20000, n_features=7, centers=6, random_state=11)
    X = X.astype(np.float32)
    start = X[:6].copy() if init == "given" else init
    kw = dict(n_clusters=6, init=start, n_init=1 if init == "given" else 2, random_state=4, backend="cuda")
    host = streamknn.KMeans(**kw).fit(X)
    for name, to_device in frameworks:
        got = streamknn.KMeans(**kw).fit(to_device(X))
        assert got.backend_ == "cuda", name
        assert isinstance(got.cluster_centers_, np.ndarray), name
        np.testing.assert_array_equal(got.labels_, host.labels_, err_msg=name)
        np.testing.assert_array_equal(got.cluster_centers_, host.cluster_centers_, err_msg=name)
        assert got.inertia_ == host.inertia_ and got.n_iter_ == host.n_iter_, name
        np.testing.assert_array_equal(got.predict(to_device(X)), host.labels_, err_msg=name)
        np.testing.assert_array_equal(got.transform(to_device(X[:50])), host.transform(X[:50]), err_msg=name)
        assert got.score(to_device(X)) == host.score(X), name
        with pytest.raises(ValueError, match="backend='cpu'"):
            streamknn.KMeans(n_clusters=6, backend="cpu").fit(to_device(X))
