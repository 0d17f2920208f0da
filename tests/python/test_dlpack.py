"""Arrays that arrive through DLPack: host tensors used in place, device arrays (CuPy, PyTorch)
routed through streamknn._arrays.device_call and answered on their own device.

On a machine without a GPU only the routing is checked, with a stand-in device array; the CuPy
and PyTorch cases run where those and a CUDA device are present."""
import sys
import types

import numpy as np
import pytest

import streamknn
from streamknn import _arrays


def filled_store(backend, rng):
    X = rng.normal(size=(300, 8)).astype(np.float32)
    store = streamknn.ReferenceSet(8, n_classes=3, backend=backend)
    store.insert(np.arange(300), X, np.arange(300) % 3)
    store.publish()
    return store, rng.normal(size=(20, 8)).astype(np.float32)


class FakeDeviceArray:
    """Stands in for a CuPy array on CUDA device 0: DLPack says 'device', and it has no __array__."""

    def __init__(self, host):
        self.host = np.asarray(host)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise BufferError("a stand-in: no device memory to export")

    def get(self):
        return self.host.copy()

    class device:  # noqa: N801 - mimics cupy's `with array.device:`
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False


FakeDeviceArray.device = FakeDeviceArray.device()
FakeDeviceArray.__module__ = "cupy"


@pytest.fixture
def fake_cupy(monkeypatch):
    module = types.ModuleType("cupy")
    module.asarray = FakeDeviceArray
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module


def test_device_arrays_are_routed_and_answered_on_the_device(backend, rng, fake_cupy):
    """The stand-in comes back as results of its own 'framework'. On the CUDA backend the zero-copy
    entry point declines it (it is no real cupy.ndarray: there is no device memory behind it), so
    it takes the host path there too; the real CuPy / PyTorch cases below cover the zero-copy path."""
    store, Q = filled_store(backend, rng)
    want = store.search(Q, 5)
    dist, ids, epoch = store.search(FakeDeviceArray(Q), 5)
    assert isinstance(dist, FakeDeviceArray) and isinstance(ids, FakeDeviceArray) and epoch == want[2]
    np.testing.assert_array_equal(dist.host, want[0])
    np.testing.assert_array_equal(ids.host, want[1])
    model = streamknn.KnnClassifier(store, 5)
    labels, proba, _ = model.predict_proba(FakeDeviceArray(Q))
    np.testing.assert_array_equal(proba.host, model.predict_proba(Q)[1])
    np.testing.assert_array_equal(model.predict(FakeDeviceArray(Q))[0].host, labels.host)


def test_native_device_entry_point_is_preferred(backend, rng, monkeypatch, fake_cupy):
    """Where the CUDA build provides _search_dlpack, no host copy is made."""
    store, Q = filled_store(backend, rng)
    calls = []

    class Native:
        backend = "cuda"

        def _search_dlpack(self, queries, k, visible):
            calls.append((queries, k, visible))
            return ("d", "i", 7)

    monkeypatch.setattr(_arrays, "to_host", lambda x: pytest.fail("host round trip"))
    q = FakeDeviceArray(Q)
    assert _arrays.device_call(Native(), "search", q, 5, None) == ("d", "i", 7)
    assert calls == [(q, 5, None)]


def test_zero_copy_entry_points_decline_stand_ins(backend, rng, fake_cupy):
    """Only a genuine torch.Tensor / cupy.ndarray has its device pointer read; anything else that
    claims to be one is answered NotImplemented (device_call then takes the host path)."""
    from streamknn import _device

    store, Q = filled_store(backend, rng)
    model = streamknn.KnnClassifier(store, 5)
    regressor_store = streamknn.ReferenceSet(8, n_outputs=1, backend=backend)
    q = FakeDeviceArray(Q)
    assert _device.genuine_framework(q) is None and _device.genuine_framework(Q) is None
    assert _device.search_dlpack(store, q, 5) is NotImplemented
    assert _device.classifier_predict_dlpack(model, q) is NotImplemented
    assert _device.classifier_predict_proba_dlpack(model, q) is NotImplemented
    assert _device.regressor_predict_dlpack(streamknn.KnnRegressor(regressor_store, 5), q) is NotImplemented


def test_host_dlpack_objects_are_read_in_place(backend, rng):
    torch = pytest.importorskip("torch")
    store, Q = filled_store(backend, rng)
    got = store.search(torch.from_numpy(Q), 5)
    np.testing.assert_array_equal(got[1], store.search(Q, 5)[1])


def cuda_frameworks():
    out = []
    try:
        import torch

        if torch.cuda.is_available():
            out.append(("torch", lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy(), torch.Tensor))
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append(("cupy", cupy.asarray, cupy.asnumpy, cupy.ndarray))
    except Exception:  # noqa: BLE001 - no CuPy or no device
        pass
    return out


FRAMEWORKS = cuda_frameworks()


def as_numpy(x, like=None):
    """A device result as NumPy; int64 ids (a PyTorch without uint64) viewed as uint64."""
    out = x.cpu().numpy() if framework_of_name(x) == "torch" else __import__("cupy").asnumpy(x)
    if like is not None and like.dtype == np.uint64 and out.dtype == np.int64:
        out = out.view(np.uint64)
    return out


def framework_of_name(x):
    return type(x).__module__.split(".")[0]


def on_cuda(x):
    return x.is_cuda if framework_of_name(x) == "torch" else framework_of_name(x) == "cupy"


def zero_copy(backend):
    return backend == "cuda"


@pytest.fixture
def no_host_copy(backend, monkeypatch):
    """On the CUDA backend: fails any host round trip, and checks the binding ran on device
    pointers (its call counter) once per device call made in the test."""
    if not zero_copy(backend):
        yield lambda: None
        return
    monkeypatch.setattr(_arrays, "to_host", lambda x: pytest.fail("host round trip"))
    monkeypatch.setattr(_arrays, "to_device_like", lambda *a: pytest.fail("host round trip"))
    start = streamknn._streamknn._device_search_count()
    calls = []
    yield lambda: calls.append(1)
    assert streamknn._streamknn._device_search_count() - start == len(calls)


FW_PARAMS = pytest.mark.parametrize("name, to_device, to_numpy, kind", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
NEEDS_GPU = pytest.mark.skipif(not FRAMEWORKS, reason="no CUDA device with PyTorch or CuPy here")


@NEEDS_GPU
@FW_PARAMS
def test_cuda_tensors_search_like_the_host(backend, rng, name, to_device, to_numpy, kind, no_host_copy):
    from streamknn import _device

    store, Q = filled_store(backend, rng)
    assert _device.genuine_framework(to_device(Q)) == name  # the zero-copy path takes it
    for k in (1, 7, 400):  # 400 > size: padding
        want = store.search(Q, k)
        dist, ids, epoch = store.search(to_device(Q), k)
        no_host_copy()
        assert isinstance(dist, kind) and isinstance(ids, kind) and on_cuda(dist) and on_cuda(ids)
        assert epoch == want[2] and dist.shape == (20, k) and ids.shape == (20, k)
        np.testing.assert_array_equal(as_numpy(ids, want[1]), want[1])
        np.testing.assert_array_equal(as_numpy(dist), want[0])  # bit for bit (inf padding included)


@NEEDS_GPU
@FW_PARAMS
def test_cuda_tensors_layouts_streams_ranges(backend, rng, name, to_device, to_numpy, kind, no_host_copy):
    store, Q = filled_store(backend, rng)
    want = store.search(Q, 5)
    wide = to_device(np.hstack([Q, np.full((20, 3), np.nan, np.float32)]))[:, :8]  # row stride 11, NaN gap unread
    np.testing.assert_array_equal(as_numpy(store.search(wide, 5)[1], want[1]), want[1])
    no_host_copy()
    as_f64 = to_device(Q.astype(np.float64))  # converted on the device
    np.testing.assert_array_equal(as_numpy(store.search(as_f64, 5)[1], want[1]), want[1])
    no_host_copy()
    visible = np.stack([np.arange(20, dtype=np.uint64) * 10, np.arange(20, dtype=np.uint64) * 10 + 50], axis=1)
    want_v = store.search(Q, 5, visible)
    got_v = store.search(to_device(Q), 5, visible)
    no_host_copy()
    np.testing.assert_array_equal(as_numpy(got_v[1], want_v[1]), want_v[1])
    empty = store.search(to_device(np.zeros((0, 8), np.float32)), 3)
    assert tuple(empty[0].shape) == (0, 3) and empty[2] == store.epoch
    # The caller's current stream orders the work: queries written, searched and read on a side stream.
    if name == "torch":
        import torch

        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            q = torch.from_numpy(Q).to("cuda", non_blocking=True) * 1.0
            _, ids, _ = store.search(q, 5)
            got = ids.to("cpu", non_blocking=False)
        side.synchronize()
    else:
        import cupy

        with cupy.cuda.Stream(non_blocking=True) as side:
            q = cupy.asarray(Q) * 1.0
            _, ids, _ = store.search(q, 5)
            got = cupy.asnumpy(ids, stream=side)
            side.synchronize()
    no_host_copy()
    got = np.asarray(got) if framework_of_name(got) != "torch" else got.numpy()
    np.testing.assert_array_equal(got.view(np.uint64) if got.dtype == np.int64 else got, want[1])


@NEEDS_GPU
@FW_PARAMS
def test_cuda_tensors_predict_like_the_host(backend, rng, name, to_device, to_numpy, kind, no_host_copy):
    store, Q = filled_store(backend, rng)
    for weights in ("uniform", "distance"):
        model = streamknn.KnnClassifier(store, 7, weights)
        labels, proba, epoch = model.predict_proba(to_device(Q))
        no_host_copy()
        want = model.predict_proba(Q)
        assert isinstance(proba, kind) and on_cuda(labels) and epoch == want[2]
        np.testing.assert_array_equal(as_numpy(labels), want[0])
        np.testing.assert_array_equal(as_numpy(proba), want[1])
        np.testing.assert_array_equal(as_numpy(model.predict(to_device(Q))[0]), want[0])
        no_host_copy()
    X = rng.normal(size=(200, 8)).astype(np.float32)
    values_store = streamknn.ReferenceSet(8, n_outputs=3, backend=backend)
    values_store.insert(np.arange(200), X, rng.normal(size=(200, 3)).astype(np.float32))
    values_store.publish()
    for aggregate in ("mean", "weighted_mean", "median"):
        model = streamknn.KnnRegressor(values_store, 6, aggregate)
        got, epoch = model.predict(to_device(Q))
        no_host_copy()
        want, want_epoch = model.predict(Q)
        assert isinstance(got, kind) and epoch == want_epoch
        np.testing.assert_array_equal(as_numpy(got), want)


@NEEDS_GPU
@FW_PARAMS
def test_cuda_tensors_bad_queries_raise_the_host_message(backend, rng, name, to_device, to_numpy, kind):
    store, Q = filled_store(backend, rng)
    Q[3, 2] = np.nan
    with pytest.raises(streamknn.InvalidArgument) as host:
        store.search(Q, 5)
    with pytest.raises(ValueError, match=r"query 3\[2\] is NaN") as device:
        store.search(to_device(Q), 5)
    assert str(device.value).split(": ", 1)[1] == str(host.value).split(": ", 1)[1]
    with pytest.raises(ValueError, match="k=0"):
        store.search(to_device(Q), 0)
    with pytest.raises(ValueError, match="columns"):
        store.search(to_device(Q[:, :4]), 3)


@NEEDS_GPU
def test_zero_copy_device_path(backend, rng, monkeypatch):
    if not zero_copy(backend):
        pytest.skip("the zero-copy path needs the CUDA backend (STREAMKNN_TEST_BACKEND=cuda)")
    assert hasattr(streamknn.ReferenceSet, "_search_dlpack")
    store, Q = filled_store(backend, rng)
    monkeypatch.setattr(_arrays, "to_host", lambda x: pytest.fail("host round trip"))
    _, to_device, to_numpy, _ = FRAMEWORKS[0]
    before = streamknn._streamknn._device_search_count()
    np.testing.assert_array_equal(as_numpy(store.search(to_device(Q), 5)[1], Q[:0].astype(np.uint64)),
                                  store.search(Q, 5)[1])
    assert streamknn._streamknn._device_search_count() == before + 1


def test_device_entry_points_are_installed():
    assert streamknn.ReferenceSet._search_dlpack is not None
    assert streamknn.KnnClassifier._predict_proba_dlpack is not None
    assert streamknn.KnnRegressor._predict_dlpack is not None
    assert isinstance(streamknn._streamknn._device_search_count(), int)


def test_device_search_on_the_cpu_backend_is_refused_by_name(rng):
    store, _ = filled_store("cpu", rng)
    with pytest.raises(streamknn.BackendUnavailable, match="CUDA backend"):
        store._search_device(1, 1, 8, 0, 3, 1, 1, 0, 0)
    model = streamknn.KnnClassifier(store, 3)
    assert model.backend == "cpu" and model.store is store and model.n_classes == 3
