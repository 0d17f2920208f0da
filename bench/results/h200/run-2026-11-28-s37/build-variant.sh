#!/bin/bash
# Builds bench_search with dense.cu compiled from the working tree with extra flags (-D...),
# replacing dense.cu.o in a copy of a Release build's libstreamknn.a (B: that build folder).
# variant.sh NAME FLAGS... : bench_search + test_gpu_vs_cpu with dense.cu compiled with FLAGS
set -e
name=$1; shift
B=/tmp/build-dense
d=/tmp/var/$name; rm -rf $d; mkdir -p $d
cd $B/lib
/usr/local/cuda/bin/nvcc --options-file CMakeFiles/streamknn.dir/includes_CUDA.rsp -O3 -DNDEBUG --generate-code=arch=compute_90,code=[sm_90] --generate-code=arch=compute_90,code=[compute_90] -Xcompiler=-fPIC --expt-relaxed-constexpr -lineinfo --compress-mode=size -std=c++20 "$@" -c /work/main/lib/cuda/kernels/dense.cu -o $d/dense.cu.o
cp $B/lib/libstreamknn.a $d/
(cd $d && ar r libstreamknn.a dense.cu.o)
cd $B/bench
/usr/bin/c++ -O3 -DNDEBUG CMakeFiles/bench_search.dir/search.cpp.o -o $d/bench_search -L/usr/local/cuda/targets/x86_64-linux/lib $d/libstreamknn.a libbench_ceilings.a /usr/local/cuda/lib/libcudart_static.a -ldl /usr/lib/x86_64-linux-gnu/librt.a -lcudadevrt -lcudart_static -lrt -lpthread -ldl
echo "$name $*" > $d/COMMIT
ls -la $d/bench_search
