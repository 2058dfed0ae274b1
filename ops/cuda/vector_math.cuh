// Vectorised memory access for the memory-bound kernels (batch norm, elementwise, pooling):
// V consecutive elements moved as one aligned load or store (16 bytes: 8 halves or 4 floats),
// so that a warp issues one instruction per 512 bytes instead of per 64 or 128.
//
//   if (VectorAligned<T, 8>(n_channels, {x, y})) Kernel<T, 8><<<...>>>(...);
//   else Kernel<T, 1><<<...>>>(...);
//   ...
//   Pack<T, V> p = LoadPack<T, V>(x + i);    // REQUIRES: x + i aligned to sizeof(T) * V
//   float v = Load(p.v[k]);
#pragma once

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/dtype.cuh"

namespace tally {
namespace cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ inline Pack<T, V> LoadPack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

template <typename T, int V>
__device__ inline void StorePack(T* p, const Pack<T, V>& pack) {
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// The widest vector of T that is 16 bytes.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// Whether rows of `row_elements` elements at every pointer (nullptr ones ignored) can be
// read as Pack<T, V>: every row starts on a vector boundary.
template <typename T, int V>
inline bool VectorAligned(int64_t row_elements, std::initializer_list<const void*> pointers) {
  if (row_elements % V != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) != 0) return false;
  }
  return true;
}

}  // namespace cuda
}  // namespace tally
