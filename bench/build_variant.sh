#!/usr/bin/env bash
# Builds a variant of bench_search that differs from a Release build only in one CUDA source,
# compiled from the working tree with extra flags (the variants of a same-call A/B,
# bench/ab_compare.sh):
#
#   bench/build_variant.sh BUILD NAME [FLAGS ...]     e.g. bench/build_variant.sh build l1 -DSOME_SWITCH=1
#
# Compiles $SOURCE (default lib/cuda/kernels/dense.cu) with the library's own CUDA flags and
# FLAGS, replaces its object in a copy of BUILD's libstreamknn.a, and relinks bench_search with
# BUILD's link line into $VARIANTS/NAME (default /tmp/variants/NAME), with a COMMIT file naming
# the variant. BUILD must have built bench_search.
set -euo pipefail
build=$(cd "${1:?usage: bench/build_variant.sh BUILD NAME [FLAGS ...]}" && pwd)
name=${2:?variant name}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
source_file=${SOURCE:-lib/cuda/kernels/dense.cu}
out=${VARIANTS:-/tmp/variants}/$name
object=$(basename "$source_file").o
rm -rf "$out" && mkdir -p "$out"
flags=$(sed -n 's/^CUDA_FLAGS = //p' "$build/lib/CMakeFiles/streamknn.dir/flags.make")
(cd "$build/lib" && /usr/local/cuda/bin/nvcc --options-file CMakeFiles/streamknn.dir/includes_CUDA.rsp $flags "$@" \
  -c "$root/$source_file" -o "$out/$object")
cp "$build/lib/libstreamknn.a" "$out/"
(cd "$out" && ar r libstreamknn.a "$object")
link=$(cat "$build/bench/CMakeFiles/bench_search.dir/link.txt")
link=${link/ ..\/lib\/libstreamknn.a / $out/libstreamknn.a }
link=${link/-o bench_search /-o $out/bench_search }
(cd "$build/bench" && eval "$link")
rm -f "$out/libstreamknn.a" "$out/$object"
echo "$name: $source_file $*" > "$out/COMMIT"
echo "$out/bench_search"
