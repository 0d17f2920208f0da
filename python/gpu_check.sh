#!/usr/bin/env bash
# The Python package's GPU check: build the package with the CUDA backend and run the pytest
# suite on backend="cuda" (the DLPack tests included, with CuPy / PyTorch where installed: they
# check the zero-copy path against the host path bit for bit; KnnQ runs on the device).
#
#   python/gpu_check.sh run [BUILD [OUT]]  on a machine with a CUDA device: configure (CUDA on,
#                                          $PYTHON or python3 from PATH, pybind11 from that
#                                          Python), build the extension and the runner in BUILD
#                                          (default build-gpu-python), run tests/python; with OUT,
#                                          the log (gpu_check.log) and a JUnit report (pytest.xml)
#                                          are written there
#   python/gpu_check.sh collect [DEPS]     copy the header-only dependencies (Eigen, CLI11), their
#                                          CMake package files and pure-Python pytest from this
#                                          (Debian) machine into DEPS (default build-deps, ignored
#                                          by git), for a GPU machine that lacks them; `run` uses
#                                          $DEPS (default build-deps) when present
# Relative paths are taken from the repository root.
#
# `run` needs Python 3 with numpy and pybind11, CMake and the CUDA toolkit, and Eigen, CLI11 and
# pytest installed or in DEPS. PyTorch and CuPy are optional (their DLPack tests skip without
# them), and so is scikit-learn (its tests skip).
set -euo pipefail
cd "$(dirname "$0")/.."

command=${1:-run}
case "$command" in
collect)
  deps=${2:-build-deps}
  rm -rf "$deps"
  mkdir -p "$deps"
  # Eigen and CLI11 whole (header-only, 10 MB).
  mkdir -p "$deps/include"
  cp -r /usr/include/eigen3 /usr/include/CLI "$deps/include/"
  # CMake package files (relocatable: each finds its headers relative to itself).
  for dir in /usr/share/eigen3/cmake /usr/share/cmake/CLI11; do
    if [[ -d "$dir" ]]; then
      mkdir -p "$deps/$(dirname "${dir#/usr/}")"
      cp -r "$dir" "$deps/${dir#/usr/}"
    fi
  done
  # pytest and its pure-Python dependencies (Debian's; they run on Python 3.12 as well).
  mkdir -p "$deps/python"
  for module in pytest _pytest pluggy iniconfig packaging attr attrs py.py; do
    src=/usr/lib/python3/dist-packages/$module
    [[ -e "$src" ]] && cp -r "$src" "$deps/python/"
  done
  find "$deps/python" -name __pycache__ -prune -exec rm -rf {} +
  echo "gpu_check: Eigen, CLI11, their CMake files and pytest" \
       "in $deps ($(du -sh "$deps" | cut -f1))"
  ;;
run)
  build=${2:-build-gpu-python}
  out=${3:-}
  if [[ -n $out ]]; then
    mkdir -p "$out"
    exec > >(tee "$out/gpu_check.log") 2>&1
  fi
  python=${PYTHON:-$(command -v python3)}
  deps=${DEPS:-$PWD/build-deps}
  args=(-DCMAKE_BUILD_TYPE=Release -DSTREAMKNN_CUDA=ON -DSTREAMKNN_PYTHON=ON -DPython_EXECUTABLE="$python"
        -DSTREAMKNN_BUILD_TESTS=OFF -DSTREAMKNN_BUILD_EXAMPLES=OFF -DSTREAMKNN_BUILD_BENCH=OFF)
  if [[ -d "$deps/include" ]]; then
    args+=(-DCMAKE_PREFIX_PATH="$deps")
    # DEPS's pytest only where the machine has none (it would shadow a newer one).
    if ! "$python" -c "import pytest" 2>/dev/null; then
      export PYTHONPATH="$deps/python${PYTHONPATH:+:$PYTHONPATH}"
    fi
  fi
  cmake -S . -B "$build" "${args[@]}"
  cmake --build "$build" -j"$(nproc)" --target streamknn_python streamknn_cli
  [[ $build = /* ]] || build="$PWD/$build"
  export PYTHONPATH="$build/python:${PYTHONPATH:-}"
  export PYTHONDONTWRITEBYTECODE=1 STREAMKNN_TEST_BACKEND=cuda STREAMKNN_RUNNER="$build/streams/streamknn"
  "$python" -c "import streamknn as s; assert s.cuda_available(), 'no usable CUDA device'; print('streamknn', s.__version__, 'built with CUDA:', s.built_with_cuda)"
  "$python" -c "import torch, cupy" 2>/dev/null || echo "gpu_check: note: PyTorch or CuPy missing; their DLPack tests skip"
  # The versions the suite runs against (scikit-learn's estimator checks differ between releases).
  "$python" - <<'PY'
import importlib, sys
print("gpu_check: python", sys.version.split()[0])
for module, label in (("sklearn", "scikit-learn"), ("numpy", "numpy"), ("scipy", "scipy"),
                      ("torch", "torch"), ("cupy", "cupy"), ("pytest", "pytest")):
    try:
        version = getattr(importlib.import_module(module), "__version__", "?")
    except Exception as e:  # noqa: BLE001 - missing or broken: say so and go on
        version = f"not available ({type(e).__name__})"
    print(f"gpu_check: {label} {version}")
PY
  [[ -z $out || $out = /* ]] || out="$PWD/$out"
  "$python" -m pytest -q -rs -p no:cacheprovider ${out:+--junitxml="$out/pytest.xml"} tests/python
  ;;
*)
  echo "usage: python/gpu_check.sh run [BUILD [OUT]] | collect [DEPS]" >&2
  exit 2
  ;;
esac
