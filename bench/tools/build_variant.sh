#!/usr/bin/env bash
# Builds a variant of bench_search that differs from a Release build only in one CUDA source,
# compiled from the working tree with extra flags (the variants of a same-run A/B,
# bench/tools/ab_compare.sh):
#
#   bench/tools/build_variant.sh BUILD NAME [FLAGS ...]     e.g. bench/tools/build_variant.sh build l1 -DSOME_SWITCH=1
#
# Compiles $SOURCE (default lib/cuda/kernels/dense.cu; several sources separated by spaces) with
# the library's own flags (CUDA for .cu, C++ for .cpp) and FLAGS, replaces their objects in a
# copy of BUILD's libstreamknn.a, and relinks bench_search with BUILD's link line into
# $VARIANTS/NAME (default /tmp/variants/NAME), with a COMMIT file naming the variant. BUILD must
# have built bench_search.
set -euo pipefail
build=$(cd "${1:?usage: bench/tools/build_variant.sh BUILD NAME [FLAGS ...]}" && pwd)
name=${2:?variant name}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
read -r -a source_files <<< "${SOURCE:-lib/cuda/kernels/dense.cu}"
out=${VARIANTS:-/tmp/variants}/$name
rm -rf "$out" && mkdir -p "$out"
flags_file=$build/lib/CMakeFiles/streamknn.dir/flags.make
cuda_flags=$(sed -n 's/^CUDA_FLAGS = //p' "$flags_file")
cxx_flags="$(sed -n 's/^CXX_INCLUDES = //p' "$flags_file") $(sed -n 's/^CXX_FLAGS = //p' "$flags_file")"
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cp "$build/lib/libstreamknn.a" "$out/"
objects=()
for source_file in "${source_files[@]}"; do
  object=$(basename "$source_file").o
  if [[ $source_file == *.cpp ]]; then
    (cd "$build/lib" && $cxx $cxx_flags "$@" -c "$root/$source_file" -o "$out/$object")
  else
    (cd "$build/lib" && /usr/local/cuda/bin/nvcc --options-file CMakeFiles/streamknn.dir/includes_CUDA.rsp $cuda_flags "$@" \
      -c "$root/$source_file" -o "$out/$object")
  fi
  objects+=("$object")
done
(cd "$out" && ar r libstreamknn.a "${objects[@]}")
link=$(cat "$build/bench/CMakeFiles/bench_search.dir/link.txt")
link=${link/ ..\/lib\/libstreamknn.a / $out/libstreamknn.a }
link=${link/-o bench_search /-o $out/bench_search }
(cd "$build/bench" && eval "$link")
(cd "$out" && rm -f libstreamknn.a "${objects[@]}")
echo "$name: ${source_files[*]} $*" > "$out/COMMIT"
echo "$out/bench_search"
