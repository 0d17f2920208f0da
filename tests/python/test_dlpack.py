"""Arrays that arrive through DLPack: host tensors used in place, device arrays (CuPy, PyTorch)
routed through streamknn._arrays.device_call and answered on their own device.

On a machine without a GPU only the routing is checked, with a stand-in device array; the CuPy
and PyTorch cases run where those and a CUDA device are present (the GPU machine)."""
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


@pytest.mark.skipif(not FRAMEWORKS, reason="no CUDA device with PyTorch or CuPy here")
@pytest.mark.parametrize("name, to_device, to_numpy, kind", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_cuda_tensors(backend, rng, name, to_device, to_numpy, kind):
    store, Q = filled_store(backend, rng)
    want = store.search(Q, 7)
    dist, ids, epoch = store.search(to_device(Q), 7)
    assert isinstance(dist, kind) and isinstance(ids, kind) and epoch == want[2]
    np.testing.assert_array_equal(to_numpy(ids), want[1])
    np.testing.assert_allclose(to_numpy(dist), want[0], rtol=1e-6)
    values, _ = streamknn.KnnClassifier(store, 7, "distance").predict_proba(to_device(Q))[1:]
    np.testing.assert_allclose(to_numpy(values), streamknn.KnnClassifier(store, 7, "distance").predict_proba(Q)[1],
                               atol=1e-6)


@pytest.mark.skipif(not FRAMEWORKS, reason="no CUDA device with PyTorch or CuPy here")
def test_zero_copy_device_path(backend, rng, monkeypatch):
    if not hasattr(streamknn.ReferenceSet, "_search_dlpack"):
        pytest.skip("this build has no device-pointer search (ReferenceSet::search_device, pending in C++)")
    store, Q = filled_store(backend, rng)
    monkeypatch.setattr(_arrays, "to_host", lambda x: pytest.fail("host round trip"))
    _, to_device, to_numpy, _ = FRAMEWORKS[0]
    np.testing.assert_array_equal(to_numpy(store.search(to_device(Q), 5)[1]), store.search(Q, 5)[1])
