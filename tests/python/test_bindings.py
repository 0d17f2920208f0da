"""The bindings: round trips through ReferenceSet / KnnClassifier / KnnRegressor, array
conversions, publish reports, error mapping, queue-full handling and GIL release."""
import re
import sys
import threading
import time

import numpy as np
import pytest

import streamknn


def brute(points, ids, queries, k):
    """(distances, ids) by the library's rule: ascending (distance, id), float64 distances."""
    d = np.sqrt(((queries[:, None, :].astype(np.float64) - points[None, :, :]) ** 2).sum(axis=2))
    out_d = np.full((len(queries), k), np.inf)
    out_i = np.full((len(queries), k), streamknn.invalid_id, dtype=np.uint64)
    for q in range(len(queries)):
        order = np.lexsort((ids, d[q]))[:k]
        out_d[q, : len(order)] = d[q, order]
        out_i[q, : len(order)] = ids[order]
    return out_d, out_i


def make_store(backend, dim=3, **kw):
    return streamknn.ReferenceSet(dim, backend=backend, **kw)


# ---- round trips -------------------------------------------------------------------------------------

def test_insert_publish_search_matches_brute_force(backend, rng):
    X = rng.normal(size=(500, 7)).astype(np.float32)
    ids = rng.permutation(10_000)[:500].astype(np.uint64)
    store = make_store(backend, dim=7)
    assert store.insert(ids, X) == 500
    assert store.pending == 500 and store.size == 0
    report = store.publish()
    assert (report.epoch, report.inserted, report.applied, report.size) == (1, 500, 500, 500)
    assert report.rejected == [] and store.size == len(store) == 500
    Q = rng.normal(size=(40, 7)).astype(np.float32)
    dist, got, epoch = store.search(Q, 10)
    assert epoch == 1 and dist.dtype == np.float32 and got.dtype == np.uint64
    assert dist.shape == got.shape == (40, 10)
    want_d, want_i = brute(X, ids, Q, 10)
    np.testing.assert_allclose(dist, want_d, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, want_i)


def test_results_adopt_library_buffers_and_are_writable(backend):
    store = make_store(backend, dim=2)
    store.insert([1, 2], [[0, 0], [1, 1]])
    store.publish()
    dist, ids, _ = store.search(np.zeros((1, 2), np.float32), 2)
    for a in (dist, ids):
        assert a.flags.c_contiguous and a.flags.writeable and not a.flags.owndata  # no copy made
    dist[0, 0] = 42.0  # the result is the caller's now


def test_padding_when_fewer_than_k_points(backend):
    store = make_store(backend, dim=2)
    store.insert([5], [[3, 4]])
    store.publish()
    dist, ids, _ = store.search([[0, 0]], 3)
    np.testing.assert_array_equal(ids, [[5, streamknn.invalid_id, streamknn.invalid_id]])
    assert dist[0, 0] == pytest.approx(5.0) and np.isinf(dist[0, 1:]).all()


@pytest.mark.parametrize("layout", ["float64", "fortran", "strided", "int", "list", "dlpack_only"])
def test_inputs_in_any_layout_give_the_same_answers(backend, rng, layout):
    X = rng.normal(size=(200, 5)).astype(np.float32)
    Q = rng.normal(size=(9, 5)).astype(np.float32)
    if layout == "int":
        X, Q = np.round(X * 10).astype(np.float32), np.round(Q * 10).astype(np.float32)
    store = make_store(backend, dim=5)
    store.insert(np.arange(200), X)
    store.publish()
    want = store.search(Q, 6)
    convert = {
        "float64": lambda a: a.astype(np.float64),
        "fortran": np.asfortranarray,
        "strided": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
        "int": lambda a: a.astype(np.int64),
        "list": lambda a: a.tolist(),
        "dlpack_only": DLPackOnly,
    }[layout]
    got = store.search(convert(Q), 6)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    other = make_store(backend, dim=5)
    other.insert(np.arange(200), convert(X))
    other.publish()
    np.testing.assert_array_equal(other.search(Q, 6)[1], want[1])


class DLPackOnly:
    """A CPU array that offers only the DLPack protocol (no buffer, no __array__)."""

    def __init__(self, a):
        self._a = np.ascontiguousarray(a)

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_move_erase_set_target_and_report(backend):
    store = streamknn.ReferenceSet(2, n_classes=3, backend=backend)
    store.insert([10, 11, 12], [[0, 0], [1, 0], [2, 0]], [0, 1, 2])
    store.publish()
    store.move([12], [[0.1, 0]])
    store.erase([10, 99])
    store.set_target([11], [2])
    store.insert([11], [[5, 5]], [0])  # duplicate id
    report = store.publish()
    assert (report.epoch, report.drained, report.applied) == (2, 5, 3)
    assert (report.moved, report.erased, report.retargeted, report.size) == (1, 1, 1, 2)
    assert [(r.id, r.kind, r.reason) for r in report.rejected] == [
        (99, "erase", "unknown id"), (11, "insert", "duplicate id")]
    np.testing.assert_array_equal(report.rejected_ids, [99, 11])
    assert "rejected=2" in repr(report)
    dist, ids, epoch = store.search([[0, 0]], 3)
    np.testing.assert_array_equal(ids[0, :2], [12, 11])
    labels, proba, _ = streamknn.KnnClassifier(store, 2).predict_proba([[0, 0]])
    assert labels[0] == 2 and proba.shape == (1, 3)
    np.testing.assert_allclose(proba[0], [0, 0, 1])


def test_empty_publish_keeps_the_epoch(backend):
    store = make_store(backend)
    report = store.publish()
    assert report.epoch == 0 and report.drained == 0 and store.epoch == 0


def test_visible_ranges_restrict_each_query(backend):
    store = make_store(backend, dim=1)
    store.insert(np.arange(10), np.arange(10, dtype=np.float32)[:, None])
    store.publish()
    Q = np.zeros((3, 1), np.float32)
    visible = np.array([[0, 10], [5, 10], [3, 4]], dtype=np.uint64)
    _, ids, _ = store.search(Q, 2, visible)
    np.testing.assert_array_equal(ids, [[0, 1], [5, 6], [3, streamknn.invalid_id]])
    with pytest.raises(ValueError, match="visible has 2 ranges for 3 queries"):
        store.search(Q, 2, visible[:2])
    with pytest.raises(ValueError, match="begin > end"):
        store.search(Q[:1], 2, [[5, 4]])


def test_regressor_mean_weighted_median(backend):
    store = streamknn.ReferenceSet(1, n_outputs=2, backend=backend)
    store.insert([0, 1, 2], [[1.0], [2.0], [4.0]], [[1, 10], [2, 20], [6, 60]])
    store.publish()
    q = [[0.0]]
    mean, epoch = streamknn.KnnRegressor(store, 3).predict(q)
    np.testing.assert_allclose(mean, [[3, 30]])
    median, _ = streamknn.KnnRegressor(store, 3, "median").predict(q)
    np.testing.assert_allclose(median, [[2, 20]])
    weighted, _ = streamknn.KnnRegressor(store, 3, "weighted_mean").predict(q)
    w = np.array([1, 1 / 2, 1 / 4])
    np.testing.assert_allclose(weighted[0], (w @ [[1, 10], [2, 20], [6, 60]]) / w.sum(), rtol=1e-6)
    one = streamknn.ReferenceSet(1, n_outputs=1, backend=backend)
    one.insert([0], [[1.0]], [7.0])  # (n,) targets when n_outputs == 1
    one.publish()
    assert streamknn.KnnRegressor(one, 1).predict([[0.0]])[0][0, 0] == 7.0
    empty = streamknn.ReferenceSet(1, n_outputs=1, backend=backend)
    assert np.isnan(streamknn.KnnRegressor(empty, 1).predict([[0.0]])[0]).all()


def test_classifier_distance_weights_and_no_neighbour(backend):
    store = streamknn.ReferenceSet(1, n_classes=2, backend=backend)
    store.insert([0, 1, 2], [[0.0], [3.0], [3.5]], [0, 1, 1])
    store.publish()
    uniform = streamknn.KnnClassifier(store, 3)
    distance = streamknn.KnnClassifier(store, 3, weights="distance")
    assert uniform.predict([[0.5]])[0][0] == 1
    assert distance.predict([[0.5]])[0][0] == 0
    assert (uniform.k, uniform.weights, distance.weights) == (3, "uniform", "distance")
    labels, proba, _ = uniform.predict_proba([[0.5]], [[5, 6]])  # nothing visible
    assert labels[0] == -1 and not proba.any()


def test_haversine_and_cosine(backend):
    drivers = streamknn.ReferenceSet(2, "haversine", backend=backend)
    drivers.insert([0, 1], [[48.8566, 2.3522], [48.8584, 2.2945]])
    drivers.publish()
    dist, ids, _ = drivers.search([[48.8570, 2.3510]], 1)
    assert ids[0, 0] == 0 and dist[0, 0] == pytest.approx(98, abs=1)
    assert drivers.metric == "haversine"
    cos = streamknn.ReferenceSet(2, "cosine", backend=backend)
    cos.insert([0, 1], [[1, 0], [0, 3]])
    cos.publish()
    dist, ids, _ = cos.search([[2, 2]], 2)
    np.testing.assert_allclose(dist, [[1 - np.sqrt(0.5)] * 2], atol=1e-6)
    with pytest.raises(ValueError, match="zero vector"):
        cos.insert([2], [[0, 0]])
    with pytest.raises(ValueError, match="latitude"):
        drivers.insert([2], [[91, 0]])


def test_longitudes_and_overflowing_coordinates_are_refused(backend):
    drivers = streamknn.ReferenceSet(2, "haversine", backend=backend)
    for lon in (181, -540, 1e30):
        with pytest.raises(ValueError, match=rf"vectors\[0\] longitude {re.escape(f'{lon:g}')} is outside \[-180, 180\]"):
            drivers.insert([1], [[0, lon]])
    drivers.insert([1, 2], [[0, 180], [0, -180]])
    drivers.publish()
    with pytest.raises(ValueError, match=r"query 0 longitude 181 is outside \[-180, 180\]"):
        drivers.search([[0, 181]], 1)
    flat = streamknn.ReferenceSet(2, backend=backend)
    bound = np.sqrt(np.float64(np.finfo(np.float32).max) / 16)  # sqrt(FLT_MAX / (8 x dim))
    with pytest.raises(ValueError, match=r"vectors\[0, 1\] = 3e\+38 exceeds the bound .* sqrt\(FLT_MAX / \(8 x dim\)\)"):
        flat.insert([1], [[0, 3e38]])
    flat.insert([1, 2], [[bound * 0.999, 0], [-bound * 0.999, 0]])
    flat.publish()
    with pytest.raises(ValueError, match=r"query 0\[0\] = .* exceeds the bound"):
        flat.search([[3e38, 0]], 1)
    dist, ids, _ = flat.search([[-bound * 0.999, 0]], 2)
    assert np.isfinite(dist).all() and sorted(ids[0].tolist()) == [1, 2]
    assert drivers.pending == 0 and flat.pending == 0


def test_properties_and_repr(backend):
    store = streamknn.ReferenceSet(4, "ip", n_outputs=3, backend=backend, queue_capacity=77)
    assert (store.dim, store.metric, store.n_outputs, store.n_classes) == (4, "ip", 3, None)
    assert store.queue_capacity == 77 and store.backend in ("cpu", "cuda")
    assert store.backend_name and "ReferenceSet(dim=4, metric='ip', n_outputs=3" in repr(store)
    assert streamknn.max_k == 4096 and streamknn.invalid_id == 2**64 - 1
    assert streamknn.max_cpu_threads == 1024
    assert isinstance(streamknn.built_with_cuda, bool)


def test_cpu_threads_caps_the_pool_and_keeps_the_answers():
    rng = np.random.default_rng(11)
    points, queries = rng.random((5000, 3), dtype=np.float32), rng.random((20, 3), dtype=np.float32)
    answers = []
    for threads in (1, 2, 0):
        store = streamknn.ReferenceSet(3, backend="cpu", cpu_threads=threads)
        store.insert(np.arange(5000), points)
        store.publish()
        assert store.cpu_threads == threads
        if threads == 1:
            assert "(1 thread, " in store.backend_name
        answers.append(store.search(queries, 7)[:2])
    for distances, ids in answers[1:]:
        assert np.array_equal(ids, answers[0][1]) and np.array_equal(distances, answers[0][0])


# ---- argument errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda s: s.search([[1, 2, 3]], 0), "k=0 must be at least 1"),
    (lambda s: s.search([[1, 2, 3]], 4097), "k=4097 exceeds the maximum of 4096"),
    (lambda s: s.search([[1, 2]], 1), "queries has 2 columns but the store expects 3"),
    (lambda s: s.search([1, 2, 3], 1), "queries must be 2-D"),
    (lambda s: s.search([[1, np.inf, 3]], 1), "query 0.* is \\+Inf"),
    (lambda s: s.insert([1], [[1, np.nan, 3]]), "vectors\\[0, 1\\] is NaN"),
    (lambda s: s.insert([1, 2], [[1, 2, 3]]), "2 ids but 1 vectors"),
    (lambda s: s.insert([-1], [[1, 2, 3]]), "ids\\[0\\] = -1 is negative"),
    (lambda s: s.insert([2**64 - 1], [[1, 2, 3]]), "is reserved"),
    (lambda s: s.insert([[1]], [[1, 2, 3]]), "ids must be 1-D"),
    (lambda s: s.insert([1], [[1, 2, 3]], [0]), "carry no target"),
    (lambda s: s.insert([1], [[1, 2, 3]], on_full="later"), "unknown on_full 'later'"),
])
def test_bad_arguments_raise_value_error_with_the_library_message(backend, call, message):
    store = make_store(backend)
    with pytest.raises(ValueError, match=message) as info:
        call(store)
    assert isinstance(info.value, streamknn.InvalidArgument) and isinstance(info.value, streamknn.Error)


def test_publish_threads_keep_the_published_state():
    # 12,000 moves (some ids twice, the last wins) in one publish: resolved on the publish pool
    # when publish_threads allows it, in queue order with 1; the snapshots must be the same.
    rng = np.random.default_rng(12)
    points, queries = rng.random((10000, 3), dtype=np.float32), rng.random((30, 3), dtype=np.float32)
    moved_ids = rng.integers(0, 10000, 12000)
    moved_to = rng.random((12000, 3), dtype=np.float32)
    answers = []
    for threads in (1, 4):
        store = streamknn.ReferenceSet(3, backend="cpu", queue_capacity=20000, publish_threads=threads)
        store.insert(np.arange(10000), points)
        store.publish()
        store.move(moved_ids, moved_to)
        report = store.publish()
        assert report.moved == 12000 and store.publish_threads == threads
        answers.append(store.search(queries, 5)[:2])
    assert np.array_equal(answers[0][1], answers[1][1]) and np.array_equal(answers[0][0], answers[1][0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(dim=0), "dim must be at least 1"),
    (dict(dim=3, metric="manhattan"), "unknown metric 'manhattan'"),
    (dict(dim=3, metric="haversine"), "dim must be 2"),
    (dict(dim=3, n_classes=2, n_outputs=2), "not both"),
    (dict(dim=3, n_classes=0), "needs n >= 1"),
    (dict(dim=3, backend="tpu"), "unknown backend 'tpu'"),
    (dict(dim=3, queue_capacity=0), "queue_capacity must be at least 1"),
    (dict(dim=3, cpu_threads=1025), "cpu_threads=1025 exceeds the limit of 1024"),
    (dict(dim=3, publish_threads=1025), "publish_threads=1025 exceeds the limit of 1024"),
    (dict(dim=2, spatial_index="kd"), "unknown spatial_index 'kd'"),
    (dict(dim=64, reduced_screen="bf16"), "unknown reduced_screen 'bf16'"),
    (dict(dim=64, reduced_format="bf16"), "unknown reduced_format 'bf16'"),
])
def test_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        streamknn.ReferenceSet(**kwargs)


@pytest.mark.parametrize("mode", ["auto", "always", "off"])
@pytest.mark.parametrize("form", ["float16", "int8"])
def test_reduced_screen_gives_the_same_answers(backend, rng, mode, form):
    # The reduced-precision screen changes only how the CUDA backend screens (the CPU ignores it).
    points = rng.standard_normal((3000, 96)).astype(np.float32)
    queries = rng.standard_normal((5, 96)).astype(np.float32)
    ids = np.arange(3000, dtype=np.uint64)
    stores = [streamknn.ReferenceSet.from_points(ids, points, backend=backend, reduced_screen=m,
                                                 reduced_format=f)
              for m, f in (("off", "float16"), (mode, form))]
    (da, ia, _), (db, ib, _) = (s.search(queries, 12) for s in stores)
    assert np.array_equal(ia, ib)
    assert np.array_equal(da, db)


def test_bad_targets(backend):
    cls = streamknn.ReferenceSet(2, n_classes=3, backend=backend)
    with pytest.raises(ValueError, match="labels\\[1\\] = 3 is outside \\[0, 3\\)"):
        cls.insert([1, 2], [[0, 0], [1, 1]], [0, 3])
    with pytest.raises(ValueError, match="targets are required"):
        cls.insert([1], [[0, 0]])
    with pytest.raises(TypeError, match="labels must be integers"):
        cls.insert([1], [[0, 0]], [0.5])
    reg = streamknn.ReferenceSet(2, n_outputs=2, backend=backend)
    with pytest.raises(ValueError, match="targets has 1 columns but the store expects 2"):
        reg.insert([1], [[0, 0]], [[1.0]])
    with pytest.raises(ValueError, match="targets\\[0, 1\\] is NaN"):
        reg.insert([1], [[0, 0]], [[1.0, np.nan]])
    assert cls.pending == 0 and reg.pending == 0


def test_type_errors_for_non_numeric_input(backend):
    store = make_store(backend)
    with pytest.raises(TypeError, match="ids must hold integers"):
        store.insert([1.5], [[1, 2, 3]])
    with pytest.raises(TypeError, match="real numbers"):
        store.insert([1], [["a", "b", "c"]])
    with pytest.raises(TypeError, match="real numbers"):
        store.search(np.ones((1, 3), dtype=complex), 1)


def test_a_malformed_batch_queues_nothing(backend):
    store = make_store(backend)
    X = np.ones((100, 3), np.float32)
    X[57, 2] = np.nan
    with pytest.raises(ValueError, match="vectors\\[57, 2\\] is NaN"):
        store.insert(np.arange(100), X)
    assert store.pending == 0
    assert store.publish().drained == 0


def test_backend_unavailable():
    if streamknn.cuda_available():
        pytest.skip("a CUDA device is usable here")
    with pytest.raises(streamknn.BackendUnavailable) as info:
        streamknn.ReferenceSet(2, backend="cuda")
    assert isinstance(info.value, RuntimeError) and str(info.value)


CUDA_MAX_DIM = 16384  # the CUDA backend's dim limit (docs/cuda.md: a query must fit in shared memory)


def test_out_of_memory_is_a_memory_error(backend):
    # The store reserves capacity_hint points when it is built. On the CPU: 2^30 points of 2^20
    # floats, 4 PiB, more than the address space. The CUDA backend refuses dim > 16384 up front
    # (InvalidArgument, checked below), so there: 2^30 points of 2^14 floats, 64 TiB of device
    # memory, which no device has (the failing cudaMalloc is reported as OutOfMemory).
    dim = CUDA_MAX_DIM if backend == "cuda" else 1 << 20
    with pytest.raises(MemoryError) as info:
        streamknn.ReferenceSet(dim, backend=backend, queue_capacity=1, capacity_hint=1 << 30)
    assert isinstance(info.value, streamknn.OutOfMemory) and "memory" in str(info.value)
    if backend == "cuda":
        with pytest.raises(streamknn.InvalidArgument, match=f"exceeds its limit of {CUDA_MAX_DIM}"):
            streamknn.ReferenceSet(CUDA_MAX_DIM + 1, backend=backend, queue_capacity=1)


# ---- full queue -------------------------------------------------------------------------------------

def test_on_full_raise_names_the_rows_queued(backend):
    store = make_store(backend, queue_capacity=4)
    with pytest.raises(streamknn.QueueFull) as info:
        store.insert(np.arange(10), np.zeros((10, 3)), on_full="raise")
    assert info.value.queued == 4 and "after queuing 4 of 10 rows" in str(info.value)
    assert isinstance(info.value, streamknn.Error) and not isinstance(info.value, ValueError)
    assert store.publish().inserted == 4


def test_on_full_publish_folds_the_reports_into_the_next_publish(backend):
    store = make_store(backend, queue_capacity=8)
    store.insert([3], [[0, 0, 0]])
    assert store.insert(np.arange(3, 50), np.zeros((47, 3))) == 47  # id 3 again: one duplicate
    assert store.size > 0  # the batch published on its own when the queue filled
    report = store.publish()
    assert (report.inserted, report.size, report.drained) == (47, 47, 48)
    assert [(r.id, r.reason) for r in report.rejected] == [(3, "duplicate id")]
    assert store.publish().drained == 0  # reported once


def test_on_full_wait_blocks_until_another_thread_publishes(backend):
    store = make_store(backend, queue_capacity=16)
    done = threading.Event()

    def producer():
        store.insert(np.arange(1000), np.zeros((1000, 3)), on_full="wait")
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    deadline = time.monotonic() + 30
    while not done.is_set() and time.monotonic() < deadline:
        store.publish()  # only possible while the producer waits with the GIL released
    t.join(5)
    store.publish()
    assert done.is_set() and store.size == 1000


# ---- threads ----------------------------------------------------------------------------------------

def test_search_releases_the_gil(backend, rng):
    """A second Python thread keeps running while a long search runs."""
    X = rng.normal(size=(200_000, 32)).astype(np.float32)
    store = make_store(backend, dim=32, capacity_hint=len(X))
    store.insert(np.arange(len(X)), X)
    store.publish()
    Q = rng.normal(size=(64, 32)).astype(np.float32)
    store.search(Q[:2], 8)  # warm up
    reps = 1
    while True:  # make the search last at least 0.4 s on this machine
        t0 = time.perf_counter()
        store.search(np.tile(Q, (reps, 1)), 64)
        if time.perf_counter() - t0 > 0.4 or reps > 1 << 12:
            break
        reps *= 2
    Q = np.tile(Q, (reps, 1))
    stamps = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    t = threading.Thread(target=spin)
    try:
        t.start()
        time.sleep(0.02)
        start = time.perf_counter()
        store.search(Q, 64)
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    margin = 0.05  # the interpreter may switch once around the call's edges
    inside = [s for s in stamps if start + margin < s < end - margin]
    assert end - start > 3 * margin
    assert len(inside) > 100, f"the other thread ran {len(inside)} times during a {end - start:.2f} s search"


def test_concurrent_producers_searchers_and_publishes(backend, rng):
    store = make_store(backend, dim=4)
    errors = []

    def produce(p):
        try:
            for b in range(20):
                ids = np.arange(p * 10_000 + b * 50, p * 10_000 + (b + 1) * 50)
                store.insert(ids, rng.normal(size=(50, 4)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def search():
        try:
            for _ in range(50):
                _, ids, _ = store.search(np.zeros((8, 4), np.float32), 5)
                assert ids.shape == (8, 5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    threads += [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(20):
        store.publish()
    for t in threads:
        t.join()
    store.publish()
    assert not errors and store.size == 4 * 20 * 50


def test_models_keep_their_store_alive(backend):
    store = streamknn.ReferenceSet(1, n_classes=2, backend=backend)
    store.insert([0], [[0.0]], [1])
    store.publish()
    model = streamknn.KnnClassifier(store, 1)
    del store
    assert model.predict([[0.0]])[0][0] == 1
