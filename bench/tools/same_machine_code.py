#!/usr/bin/env python3
"""Does a change to a .cu file leave its machine code as it was? For a refactor of a kernel.

    bench/tools/same_machine_code.py lib/cuda/kernels/scan.cu [--rev HEAD] [--arch 80,86,89,90]

Compiles the file as it is in the working tree and as it is at --rev (nvcc -cubin, the library's
flags and include paths) for each architecture, and compares every kernel's and device
function's machine code (.text.*) and its resource sections (.nv.info.*: registers, stack,
barriers; .nv.shared.*, .nv.constant0.*) byte for byte, names taken without the file-local
hashes nvcc gives anonymous namespaces. Exit 0 when every section is identical for every
architecture, 1 otherwise (naming the first sections that differ), 2 on a compile error.
Identical sections mean the same instructions in the same order with the same resources: the
change cannot alter the kernels' speed, so it needs no A/B run. It runs without a GPU.
"""
import argparse
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPARED = re.compile(r"\.(text|nv\.info|nv\.shared|nv\.constant0)\.")


def plain_name(name):
    """A section name without nvcc's per-file hashes of anonymous namespaces."""
    name = re.sub(r"_INTERNAL_[0-9a-f]+_[0-9]+_\w+?_cu_[0-9a-f]+", "INTERNAL", name)
    name = re.sub(r"_GLOBAL__N__[0-9a-f]+_[0-9]+_\w+?_cu_[0-9a-f]+", "GLOBALN", name)
    return re.sub(r"[0-9]+(INTERNAL|GLOBALN)", r"\1", name)


def sections(cubin):
    """{plain section name: digest of its bytes (size for NOBITS)} of an ELF64 cubin."""
    data = open(cubin, "rb").read()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]
    out = {}
    for name_off, kind, _, _, offset, size, *_ in headers:
        end = data.index(b"\0", names_at + name_off)
        name = data[names_at + name_off:end].decode()
        if not COMPARED.match(name):
            continue
        out[plain_name(name)] = f"nobits:{size}" if kind == 8 else hashlib.sha1(data[offset:offset + size]).hexdigest()
    return out


def compile_cubin(source, arch, out):
    include = ["-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "lib")]
    generated = [os.path.join(ROOT, d, "generated") for d in os.listdir(ROOT) if d.startswith("build")]
    include += ["-I" + g for g in generated if os.path.isdir(g)][:1]
    cmd = ["nvcc", "-O3", "-DNDEBUG", f"-arch=sm_{arch}", "-cubin", "--expt-relaxed-constexpr", "-std=c++20",
           *include, source, "-o", out]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file", help="a .cu file of the tree, e.g. lib/cuda/kernels/scan.cu")
    p.add_argument("--rev", default="HEAD", help="the revision to compare with (default HEAD)")
    p.add_argument("--arch", default="80,86,89,90", help="SM architectures (default 80,86,89,90)")
    args = p.parse_args()
    path = os.path.relpath(os.path.abspath(args.file), ROOT)
    old = subprocess.run(["git", "-C", ROOT, "show", f"{args.rev}:{path}"], capture_output=True)
    if old.returncode != 0:
        sys.exit(f"same_machine_code: {path} is not in {args.rev}")
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        before = os.path.join(tmp, "before_" + os.path.basename(path))
        open(before, "wb").write(old.stdout)
        for arch in args.arch.split(","):
            compile_cubin(os.path.join(ROOT, path), arch, os.path.join(tmp, "after.cubin"))
            compile_cubin(before, arch, os.path.join(tmp, "before.cubin"))
            a, b = sections(os.path.join(tmp, "after.cubin")), sections(os.path.join(tmp, "before.cubin"))
            differ = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            functions = sum(n.startswith(".text.") for n in a)
            print(f"sm_{arch}: {functions} kernels and device functions, {len(a)} sections; "
                  f"{'identical' if not differ else f'{len(differ)} differ'} (against {args.rev})")
            for n in differ[:5]:
                print("   ", n)
            same &= not differ
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
