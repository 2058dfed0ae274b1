// How one kernel launch covers many tensors of very different sizes (ResNet-50: 161
// parameters from 64 to 2.4M elements), shared by the launch (ops/cuda/optimizer.cu) and its
// CPU test (tests/ops/cuda_host_math_test.cc). Plain C++ on the host, so g++ can include it.
//
// Every tensor is cut into chunks of kMultiTensorChunk elements (its last chunk shorter), and
// the chunks of all tensors are numbered one after the other:
//
//   sizes       [  5000  |  64  |     9000      ]
//   chunks       0    1     2    3     4     5        chunk_begin = {0, 2, 3, 6}
//
// Block b of the launch takes chunks b, b + gridDim.x, ...; a chunk finds its tensor by
// binary search in chunk_begin. Work is spread by elements, not by tensors: a 2.4M-element
// tensor is 576 chunks for as many blocks, a 64-element one a single chunk, where one block
// per tensor would leave the big tensor's block running long after the others finished.
#pragma once

#include <cstdint>

#include "ops/host_device.h"

namespace tally {
namespace cuda {

// Large enough that a block's fixed cost (finding its tensor, loading the table entry) is
// small against 16 elements per thread of 256, small enough that the largest tensors split
// into hundreds of chunks.
constexpr int64_t kMultiTensorChunk = 4096;

TALLY_HOST_DEVICE inline int64_t ChunkCount(int64_t n) {
  return (n + kMultiTensorChunk - 1) / kMultiTensorChunk;
}

// Fills chunk_begin[0..num_tensors] from the tensors' sizes and returns the total number of
// chunks (chunk_begin[num_tensors]). Empty tensors get no chunk.
TALLY_HOST_DEVICE inline int64_t FillChunkBegin(const int64_t* sizes, int num_tensors,
                                                int64_t* chunk_begin) {
  int64_t total = 0;
  for (int t = 0; t < num_tensors; ++t) {
    chunk_begin[t] = total;
    total += ChunkCount(sizes[t]);
  }
  chunk_begin[num_tensors] = total;
  return total;
}

// The part of one tensor a chunk covers: elements [begin, end) of tensor `tensor`.
struct ChunkSpan {
  int tensor;
  int64_t begin, end;
};

// REQUIRES: 0 <= chunk < chunk_begin[num_tensors], chunk_begin as FillChunkBegin made it.
// The owner is the last tensor whose first chunk is at or before `chunk`; among tensors
// with equal chunk_begin (empty ones) that is the one that is not empty.
TALLY_HOST_DEVICE inline ChunkSpan MapChunk(const int64_t* chunk_begin, const int64_t* sizes,
                                            int num_tensors, int64_t chunk) {
  int lo = 0, hi = num_tensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_begin[mid] <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t begin = (chunk - chunk_begin[lo]) * kMultiTensorChunk;
  const int64_t end = begin + kMultiTensorChunk < sizes[lo] ? begin + kMultiTensorChunk : sizes[lo];
  return ChunkSpan{lo, begin, end};
}

}  // namespace cuda
}  // namespace tally
