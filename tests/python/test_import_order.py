"""The extension in a process where PyTorch or CuPy was imported first.

Both load the shared CUDA runtime (libcudart.so) when imported. The module links its own static
runtime and libstreamknn; before they were linked with --exclude-libs,ALL and -Bsymbolic
(python/CMakeLists.txt), the module's calls bound to the other runtime's symbols and the first
ReferenceSet(backend="cuda") crashed (SIGSEGV). Each case runs in a fresh interpreter, so the
import order is the one under test whatever this process has imported already. Skipped without a
usable CUDA device, and per framework where it is not installed.
"""
import importlib.util
import os
import subprocess
import sys

import pytest

import streamknn

SCRIPT = r"""
import sys
first = sys.argv[1:]
for name in first:
    __import__(name)
assert "streamknn" not in sys.modules
import numpy as np
import streamknn

rng = np.random.default_rng(7)
X = rng.normal(size=(500, 16)).astype(np.float32)
store = streamknn.ReferenceSet(16, n_classes=3, backend="cuda")
store.insert(np.arange(500), X, np.arange(500) % 3)
assert store.publish().inserted == 500
dist, ids, _ = store.search(X[:10], 3)
assert (ids[:, 0] == np.arange(10)).all() and (dist[:, 0] == 0).all(), (ids, dist)
labels, _ = streamknn.KnnClassifier(store, 3).predict(X[:10])
assert labels.shape == (10,)
# The frameworks keep working next to the module (their runtime and ours in one process).
if "torch" in first:
    import torch
    if torch.cuda.is_available():
        t = torch.from_numpy(X[:10]).cuda()
        d, i, _ = store.search(t, 3)
        assert (i.cpu().numpy().astype(np.int64)[:, 0] == np.arange(10)).all()
        assert float((t * 2)[3, 5].cpu()) == float(X[3, 5] * 2)
if "cupy" in first:
    import cupy
    c = cupy.asarray(X[:10])
    d, i, _ = store.search(c, 3)
    assert (cupy.asnumpy(i).astype(np.int64)[:, 0] == np.arange(10)).all()
    assert float((c * 2)[3, 5]) == float(X[3, 5] * 2)
print("import-order ok:", " ".join(first))
"""

ORDERS = [("torch",), ("cupy",), ("torch", "cupy"), ("cupy", "torch")]


@pytest.mark.skipif(not streamknn.cuda_available(), reason="no usable CUDA device (or a CPU-only build)")
@pytest.mark.parametrize("first", ORDERS, ids=["+".join(o) for o in ORDERS])
def test_cuda_store_after_importing_another_cuda_runtime(first):
    missing = [name for name in first if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    run = subprocess.run([sys.executable, "-c", SCRIPT, *first], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (
        f"importing {' then '.join(first)} before streamknn: exit status {run.returncode} "
        f"(negative: killed by that signal)\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")
    assert "import-order ok" in run.stdout
