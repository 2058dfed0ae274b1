// The cuBLAS half of ops/cuda/check.h: cuBLASLt reports its failures as cublasStatus_t, whose
// names and texts live in libcublas, so this is not an inline function in the header.
#include "ops/cuda/check.h"

namespace tally {
namespace cuda {

void CheckCublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    FailCall("cuBLAS", cublasGetStatusName(s), cublasGetStatusString(s), expr, file, line);
  }
}

}  // namespace cuda
}  // namespace tally
