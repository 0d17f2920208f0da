#!/usr/bin/env bash
# ctest driver: `pip install .` from a clean copy of the source tree into a fresh virtual
# environment (with the system's site packages: numpy, scikit-learn), then `import streamknn`
# from another directory; then `python -m build --wheel` on the same copy (reusing its CMake
# build) and a look inside the wheel. No network: Debian's setuptools / wheel / build serve.
# Usage: pip_install_check.sh <source dir> <scratch dir> <python>
# CMAKE_ARGS (default -DSTREAMKNN_CUDA=OFF) and CMAKE_BUILD_PARALLEL_LEVEL reach the build.
set -euo pipefail
src=$1 work=$2 python=$3
rm -rf "$work"
mkdir -p "$work/tree" "$work/elsewhere"
trap 'rm -rf "$work"' EXIT

# A clean checkout: the files git knows of (tracked, and new ones not ignored), no build trees.
git -C "$src" ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "$src/$f" ]] && printf '%s\0' "$f"; done |
  tar -C "$src" --null -T - -cf - | tar -C "$work/tree" -xf -

"$python" -m venv --system-site-packages "$work/venv"
export CMAKE_ARGS=${CMAKE_ARGS:--DSTREAMKNN_CUDA=OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
(cd "$work/tree" && "$work/venv/bin/python" -m pip install --no-build-isolation --no-deps -q .)

cd "$work/elsewhere"
PYTHONPATH= "$work/venv/bin/python" - "$work/venv" <<'PY'
import sys
import numpy as np
import streamknn
from importlib import metadata
assert streamknn.__file__.startswith(sys.argv[1]), streamknn.__file__
assert metadata.version("streamknn") == streamknn.__version__, (metadata.version("streamknn"), streamknn.__version__)
X = np.random.default_rng(0).normal(size=(50, 3))
model = streamknn.KNeighborsClassifier(n_neighbors=3).fit(X, X[:, 0] > 0)
assert (model.predict(X) == (X[:, 0] > 0)).mean() > 0.8
print("pip-installed streamknn", streamknn.__version__, "at", streamknn.__file__)
PY

cd "$work/tree"
"$work/venv/bin/python" -m build --wheel --no-isolation --outdir "$work/dist" . > "$work/build.log" 2>&1 ||
  { tail -n 40 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/streamknn-*.whl)
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
assert any(n.startswith("streamknn/_streamknn") and n.endswith(".so") for n in names), names
assert any(n.endswith(".dist-info/METADATA") for n in names), names
print("wheel", sys.argv[1].rsplit("/", 1)[-1], "with", len(names), "files")
PY
