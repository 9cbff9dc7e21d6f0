// out += W x for a row-major W (rows, cols): the product of one position with a weight matrix,
// which reads every weight once and so runs at the speed memory delivers them. OpenBLAS's sgemv
// (0.3.21, Haswell kernels) ran at 20-25 GB/s on one core here, this kernel at 25-33
// (docs/PERF.md, "Generation").
#pragma once

namespace xtrain {

// out (rows) accumulates; x (cols). Summation order is fixed by cols alone (deterministic).
void gemv_accumulate(float* out, const float* W, const float* x, int rows, int cols);

}  // namespace xtrain
