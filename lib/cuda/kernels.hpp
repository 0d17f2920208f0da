// Host-callable launchers of the CUDA kernels: one header per kernel family under kernels/, each
// with its parameter struct and launcher, all included here. Plain declarations: the host code
// that calls them never sees device code. Every launcher checks the launch and throws CudaError.
#pragma once

#include "cuda/device_types.hpp"
#include "cuda/kernels/aggregate.hpp"
#include "cuda/kernels/copy_in.hpp"
#include "cuda/kernels/dense.hpp"
#include "cuda/kernels/gather.hpp"
#include "cuda/kernels/device_queries.hpp"
#include "cuda/kernels/direct.hpp"
#include "cuda/kernels/knnq.hpp"
#include "cuda/kernels/reduced.hpp"
#include "cuda/kernels/rerank.hpp"
#include "cuda/kernels/resident.hpp"
#include "cuda/kernels/sample.hpp"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scatter.hpp"
#include "cuda/kernels/screen.hpp"
#include "cuda/kernels/select.hpp"
#include "cuda/kernels/spatial.hpp"
