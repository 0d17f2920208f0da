"""Zero-copy device searches and predictions for CuPy arrays and PyTorch CUDA tensors.

``ReferenceSet._search_dlpack(queries, k, visible)``, ``KnnClassifier._predict_dlpack`` /
``_predict_proba_dlpack`` and ``KnnRegressor._predict_dlpack`` (which
``streamknn._arrays.device_call`` prefers for device-resident queries on the CUDA backend) read the queries in place through
their framework's device pointer, shape and strides (``data_ptr()`` / ``.data.ptr``: the memory
that ``__cuda_array_interface__`` and DLPack describe), allocates the results with
the queries' own framework on their device, and runs the library's ``search_device`` / ``predict_device`` on the
framework's current stream of that device, GIL released. Nothing crosses to the host: the library
orders its reads after the work already queued on that stream and the stream's later work after
its writes.

Queries that are not float32 with unit element stride are converted once, on the device, by their
framework. ids come back as uint64 (``torch.uint64`` where this PyTorch has it, else int64 holding
the same bits: invalid_id reads as -1).

Only genuine arrays take this path (an instance of ``torch.Tensor`` / ``cupy.ndarray`` of the
imported framework): the library dereferences their device pointers, so an object that merely
looks like one (its type's module named ``cupy``, a ``__dlpack_device__`` saying CUDA) is answered
``NotImplemented`` and ``device_call`` takes the host path for it (its framework's ``.get()`` /
``.cpu()``), as on the CPU backend.
"""

import sys

import numpy as np

from . import _streamknn


def _check_2d(ndim, dim, store_dim):
    if ndim != 2:
        raise _streamknn.InvalidArgument(
            f"ReferenceSet.search: queries must be 2-D (n, {store_dim}), got a {ndim}-D array")
    if dim != store_dim:
        raise _streamknn.InvalidArgument(
            f"ReferenceSet.search: queries has {dim} columns but the store expects {store_dim}")


def _torch_parts(x, store_dim, contiguous=False):
    import torch

    t = x.detach()
    _check_2d(t.dim(), t.shape[-1] if t.dim() else 0, store_dim)
    if t.dtype != torch.float32:
        t = t.to(torch.float32)  # on the device
    n, dim = t.shape
    if (dim > 1 and t.stride(1) != 1) or (n > 1 and t.stride(0) < dim) or (contiguous and not t.is_contiguous()):
        t = t.contiguous()
    row_stride = t.stride(0) if n > 1 else dim
    device = t.device.index if t.device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(device).cuda_stream

    def empty(shape, kind):
        dtype = {"f4": torch.float32, "i4": torch.int32, "u8": getattr(torch, "uint64", torch.int64)}[kind]
        return torch.empty(shape, dtype=dtype, device=t.device)

    return t, t.data_ptr(), n, dim, row_stride, device, stream, empty


def _cupy_parts(x, store_dim, contiguous=False):
    import cupy

    a = x
    _check_2d(a.ndim, a.shape[-1] if a.ndim else 0, store_dim)
    n, dim = a.shape
    strided = (dim > 1 and a.strides[1] != 4) or (n > 1 and (a.strides[0] < 4 * dim or a.strides[0] % 4))
    if a.dtype != cupy.float32 or strided or (contiguous and not a.flags.c_contiguous):
        with a.device:
            a = cupy.ascontiguousarray(a, dtype=cupy.float32)  # on the device
    row_stride = a.strides[0] // 4 if n > 1 else dim
    device = a.device.id
    with a.device:
        stream = cupy.cuda.get_current_stream().ptr

    def empty(shape, kind):
        with a.device:
            return cupy.empty(shape, dtype={"f4": cupy.float32, "i4": cupy.int32, "u8": cupy.uint64}[kind])

    return a, a.data.ptr, n, dim, row_stride, device, stream, empty


def genuine_framework(x):
    """'torch' for a torch.Tensor, 'cupy' for a cupy.ndarray, else None (stand-ins included)."""
    fw = type(x).__module__.split(".")[0]
    if fw not in ("torch", "cupy"):
        return None
    cls = getattr(sys.modules.get(fw), "Tensor" if fw == "torch" else "ndarray", None)
    return fw if isinstance(cls, type) and isinstance(x, cls) else None


def _parts(x, store_dim, contiguous=False):
    """(the float32 array read, its pointer, n, dim, row stride in floats, device ordinal, the
    framework's current stream there, an allocator of results) for a genuine CuPy array or
    PyTorch tensor, else None. `contiguous`: rows packed one after another (row stride = dim)."""
    fw = genuine_framework(x)
    if fw == "torch":
        return _torch_parts(x, store_dim, contiguous)
    if fw == "cupy":
        return _cupy_parts(x, store_dim, contiguous)
    return None


def _visible_pointer(visible, like_parts, n):
    """A device pointer to n [begin, end) uint64 pairs, or 0; host ranges are copied up once."""
    if visible is None:
        return None, 0
    fw = type(like_parts[0]).__module__.split(".")[0]
    if fw == "torch":
        import torch

        v = visible if isinstance(visible, torch.Tensor) else torch.from_numpy(
            np.ascontiguousarray(np.asarray(visible).astype(np.uint64).view(np.int64)))
        v = v.to(like_parts[0].device).contiguous()
        if v.element_size() != 8 or v.dtype.is_floating_point or tuple(v.shape) != (n, 2):
            raise ValueError(f"visible must be an (n_queries, 2) integer array, got {tuple(v.shape)}")
        return v, v.data_ptr()
    import cupy

    with like_parts[0].device:
        v = cupy.ascontiguousarray(cupy.asarray(visible).astype(cupy.uint64))
    if v.shape != (n, 2):
        raise ValueError(f"visible must be an (n_queries, 2) integer array, got {v.shape}")
    return v, v.data.ptr


def _pointer(array):
    return array.data_ptr() if hasattr(array, "data_ptr") else array.data.ptr


def _run(dim, queries, visible, shapes, call):
    """Allocates the results (shapes: [(shape tail, kind)]) next to the queries and runs
    call(query pointer, n, row_stride, device, result pointers, stream, ranges pointer)."""
    parts = _parts(queries, dim)
    if parts is None:
        raise TypeError(f"streamknn: device queries must be a CuPy array or a PyTorch tensor, "
                        f"not {type(queries).__name__}")
    keep, ptr, n, _, row_stride, device, stream, empty = parts
    results = [empty((n, *tail), kind) for tail, kind in shapes]
    if n == 0:
        return results, None
    ranges, ranges_ptr = _visible_pointer(visible, parts, n)
    epoch = call(ptr, n, row_stride, device, [_pointer(r) for r in results], stream, ranges_ptr)
    del keep, ranges  # alive until the call has finished (it waits for the device)
    return results, epoch


def search_dlpack(store, queries, k, visible=None):
    """(distances, ids, epoch) of device-resident queries, results on their device (see above);
    NotImplemented when queries is not a genuine CuPy array / PyTorch tensor."""
    if genuine_framework(queries) is None:
        return NotImplemented
    k = int(k)
    if not 1 <= k <= _streamknn.max_k:  # the library names the problem before anything is allocated
        store._search_device(0, 1, store.dim, 0, k, 0, 0, 0, 0)
    (distances, ids), epoch = _run(
        store.dim, queries, visible, [((k,), "f4"), ((k,), "u8")],
        lambda q, n, stride, dev, out, stream, vis: store._search_device(q, n, stride, dev, k, out[0], out[1], stream, vis))
    return distances, ids, store.epoch if epoch is None else epoch


def classifier_predict_dlpack(model, queries, visible=None):
    """KnnClassifier.predict for device-resident queries: (labels on their device, epoch)."""
    if genuine_framework(queries) is None:
        return NotImplemented
    (labels,), epoch = _run(
        model.store.dim, queries, visible, [((), "i4")],
        lambda q, n, stride, dev, out, stream, vis: model._predict_device(q, n, stride, dev, out[0], 0, stream, vis))
    return labels, model.store.epoch if epoch is None else epoch


def classifier_predict_proba_dlpack(model, queries, visible=None):
    """KnnClassifier.predict_proba for device-resident queries: (labels, probabilities, epoch)."""
    if genuine_framework(queries) is None:
        return NotImplemented
    (labels, proba), epoch = _run(
        model.store.dim, queries, visible, [((), "i4"), ((model.n_classes,), "f4")],
        lambda q, n, stride, dev, out, stream, vis: model._predict_device(q, n, stride, dev, out[0], out[1], stream,
                                                                          vis))
    return labels, proba, model.store.epoch if epoch is None else epoch


def regressor_predict_dlpack(model, queries, visible=None):
    """KnnRegressor.predict for device-resident queries: (values on their device, epoch)."""
    if genuine_framework(queries) is None:
        return NotImplemented
    (values,), epoch = _run(
        model.store.dim, queries, visible, [((model.n_outputs,), "f4")],
        lambda q, n, stride, dev, out, stream, vis: model._predict_device(q, n, stride, dev, out[0], stream, vis))
    return values, model.store.epoch if epoch is None else epoch


def install():
    """Makes the zero-copy entry points visible to streamknn._arrays.device_call."""
    _streamknn.ReferenceSet._search_dlpack = search_dlpack
    _streamknn.KnnClassifier._predict_dlpack = classifier_predict_dlpack
    _streamknn.KnnClassifier._predict_proba_dlpack = classifier_predict_proba_dlpack
    _streamknn.KnnRegressor._predict_dlpack = regressor_predict_dlpack
