"""Array plumbing shared by the Python layers: float32 conversion, queue sizing, and the
device (DLPack) dispatch used by ReferenceSet.search / KnnClassifier / KnnRegressor when the
queries live on a CUDA device (CuPy array, PyTorch tensor, anything with ``__dlpack__``).

Device dispatch (see docs/python.md, "GPU interop"):

* CUDA backend with a device-pointer entry point (``ReferenceSet._search_dlpack``, see
  streamknn._device): queries are read in place on the caller's current stream and the results
  are device arrays of the caller's framework; nothing crosses to the host.
* Otherwise (CPU backend; queries that only look like a CuPy array or PyTorch tensor, for which
  the entry point answers NotImplemented; KnnClassifier / KnnRegressor predictions, which have no device entry
  point yet): the queries are copied to
  the host once through their framework (``.get()`` / ``.cpu()``), searched, and the array results
  are copied back to the queries' device as arrays of the same framework.
"""

import numpy as np

# DLPack device types (dlpack.h DLDeviceType).
_DL_CPU = 1
_DL_CUDA = 2
_DL_CUDA_HOST = 3
_DL_CUDA_MANAGED = 13

# Payload memory the update queue may preallocate for a bulk load (the queue publishes and
# refills when a batch is larger than its capacity, so this only bounds memory, not batch size).
_QUEUE_BYTES = 64 << 20


def queue_capacity_for(n_rows, floats_per_row):
    """A queue capacity for loading n_rows updates of floats_per_row floats each."""
    by_memory = max(1024, _QUEUE_BYTES // (4 * max(1, floats_per_row)))
    return int(max(1, min(n_rows, by_memory, 1 << 24)))


def dlpack_device(x):
    """(device_type, device_id) for objects that speak DLPack, else None."""
    probe = getattr(x, "__dlpack_device__", None)
    if probe is None:
        return None
    try:
        device_type, device_id = probe()
    except Exception:  # noqa: BLE001 - a foreign object's probe failing means "not DLPack"
        return None
    return int(device_type), int(device_id)


def on_device(x):
    """True when x is a DLPack array resident in CUDA device (or managed) memory."""
    dev = dlpack_device(x)
    return dev is not None and dev[0] in (_DL_CUDA, _DL_CUDA_MANAGED)


def framework_of(x):
    """'torch', 'cupy' or the top-level module name of x's type."""
    return type(x).__module__.split(".")[0]


def to_host(x):
    """A NumPy array with x's values; one device-to-host copy for device arrays."""
    fw = framework_of(x)
    if fw == "torch":
        return x.detach().cpu().numpy()
    if fw == "cupy":
        return x.get()
    if on_device(x):
        raise TypeError(
            f"streamknn: cannot copy a {type(x).__name__} from the device to the host; pass a "
            "NumPy array, a CuPy array or a PyTorch tensor")
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        return np.from_dlpack(x)
    return np.asarray(x)


def to_device_like(host, like):
    """host (a NumPy array) as an array of like's framework on like's device."""
    fw = framework_of(like)
    if fw == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(host)).to(like.device)
    if fw == "cupy":
        import cupy

        with like.device:
            return cupy.asarray(host)
    raise TypeError(f"streamknn: cannot place results next to a {type(like).__name__}")


def from_dlpack_like(capsule_owner, like):
    """A device result (an object with __dlpack__) as an array of like's framework (no copy)."""
    fw = framework_of(like)
    if fw == "torch":
        import torch

        return torch.from_dlpack(capsule_owner)
    if fw == "cupy":
        import cupy

        return cupy.from_dlpack(capsule_owner)
    return capsule_owner


def device_call(target, method, queries, *args):
    """Runs target.method(queries, *args) for device-resident queries (see the module docstring).

    Array results come back on the queries' device, as the queries' framework; other results
    (the epoch) are returned as they are.
    """
    native = getattr(target, "_" + method + "_dlpack", None)
    if native is not None and getattr(target, "backend", "cuda") == "cuda":
        results = native(queries, *args)  # NotImplemented: not an array it can read in place
    else:
        results = NotImplemented
    if results is not NotImplemented:
        return tuple(from_dlpack_like(r, queries)
                     if hasattr(r, "__dlpack__") and framework_of(r) != framework_of(queries) else r
                     for r in results)
    args = tuple(to_host(a) if on_device(a) else a for a in args)  # e.g. visible ranges on the device
    results = getattr(target, method)(to_host(queries), *args)
    return tuple(to_device_like(r, queries) if isinstance(r, np.ndarray) else r for r in results)
