// Reductions shared by the kvstore's ends: a worker summing its devices' gradients and a
// server summing the workers' pushes. Sums are always accumulated in fp32, in the order the
// parts are given (device order, worker rank order), never in arrival order, so every run
// of a job rounds the same way.
//
//   Tensor sum = Tensor::Empty({n}, DType::kF32);
//   SumInF32({rank0_grad, rank1_grad_f16}, &sum);   // sum = rank0 + rank1, in fp32
//
// Runs on the calling thread, helped by the worker pool (base/parallel.h) for large arrays
// (a quarter of a million elements and more). Thread-safety: none of its own; the caller owns `out` and must not write the
// parts meanwhile.
#pragma once

#include <vector>

#include "base/tensor.h"

namespace tally {

// out = parts[0] + parts[1] + ... element by element, each part converted to fp32 first.
// REQUIRES: parts is not empty; every part is f32, f16 or bf16 on the CPU with out->numel()
// elements; out is f32 and overlaps no part unless it is parts[0] itself.
void SumInF32(const std::vector<Tensor>& parts, Tensor* out);
// SumInF32, returning AllFinite(*out), each block checked while the sum has it in cache
// (a server's sync step skips a non-finite sum): no second pass over the sum.
bool SumInF32AllFinite(const std::vector<Tensor>& parts, Tensor* out);

// src as `dtype` (the dtype a pull asked for): src itself when it already is, else a new
// tensor, a large one converted over the worker pool. Rounds as Tensor::To does.
// REQUIRES: src and dtype are f32, f16 or bf16; src is on the CPU.
Tensor ConvertForWire(const Tensor& src, DType dtype);

// Whether every element of t is finite (neither NaN nor ±Inf): the check that makes a step
// with a non-finite gradient be skipped (kvstore.h, docs/wire.md). Reads t once.
// REQUIRES: t is f32, f16 or bf16 on the CPU.
bool AllFinite(const Tensor& t);

// True for the dtypes the parameter server carries (f32, f16, bf16).
bool IsWireDType(DType t);

}  // namespace tally
