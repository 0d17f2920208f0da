"""The build step pyproject.toml's setuptools backend cannot express: the extension
streamknn._streamknn comes from the CMake project (target streamknn_python), built in a
directory of its own under build-pip/ and copied where setuptools packs the package.

Environment: CMAKE_ARGS (extra configure arguments, split like a shell does, e.g.
"-DSTREAMKNN_CUDA=OFF"), CMAKE_BUILD_PARALLEL_LEVEL (build jobs; default: every CPU).
The version is the CMake project's (CMakeLists.txt, project(... VERSION x.y.z)).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*streamknn\s+VERSION\s+([0-9.]+)", text)
    if not match:
        raise RuntimeError("CMakeLists.txt: project(streamknn VERSION x.y.z) not found")
    return match.group(1)


class CMakeBuild(build_ext):
    """Configures and builds the CMake target streamknn_python, then copies the module."""

    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}", "-DSTREAMKNN_PYTHON=ON", "-DSTREAMKNN_BUILD_TESTS=OFF",
            "-DSTREAMKNN_BUILD_EXAMPLES=OFF", "-DSTREAMKNN_BUILD_BENCH=OFF",
            *shlex.split(os.environ.get("CMAKE_ARGS", "")),
        ]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "streamknn_python", "-j", jobs], check=True)
        built = sorted((build_dir / "python" / "streamknn").glob("_streamknn*.so"))
        if not built:
            raise RuntimeError(f"the CMake build left no _streamknn*.so in {build_dir / 'python' / 'streamknn'}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


(ROOT / "build-pip").mkdir(exist_ok=True)  # egg_base must exist before setuptools writes there

setup(
    version=project_version(),
    ext_modules=[Extension("streamknn._streamknn", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
)
