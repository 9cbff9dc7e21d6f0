#include "cuda/interp/cublaslt_product.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "worker/math/bf16.hpp"
#include "worker/math/gelu.hpp"

namespace xtrain::interp::lt {
namespace {

float load(const void* base, cudaDataType_t type, int64_t index) {
  if (type == CUDA_R_16BF) return math::float_from_bf16_bits(static_cast<const std::uint16_t*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

// The one rounding of the result to D's type: bf16 stores use math's round to nearest even, the
// rule __float2bfloat16_rn follows, so interpret-mode bf16 outputs match the CPU backend's bits.
void store(void* base, cudaDataType_t type, int64_t index, float value) {
  if (type == CUDA_R_16BF) {
    static_cast<std::uint16_t*>(base)[index] = math::bf16_bits_from_float(value);
  } else {
    static_cast<float*>(base)[index] = value;
  }
}

// Batch b of the operand at `data` as a dense fp32 column-major (rows, cols) copy with ld = rows, the form sgemm
// takes whatever the stored type: bf16 widens exactly, TF32 rounding (when asked) happens here.
void gather(const void* data, const Layout& v, int b, bool tf32, std::vector<float>& out /* (cols, rows) */) {
  out.resize(static_cast<size_t>(v.rows * v.cols));
  for (int64_t j = 0; j < v.cols; ++j) {
    for (int64_t i = 0; i < v.rows; ++i) {
      const float x = load(data, v.type, b * v.stride + j * v.ld + i);
      out[static_cast<size_t>(j * v.rows + i)] = tf32 ? round_to_tf32(x) : x;
    }
  }
}

}  // namespace

// NVIDIA documents that FAST_TF32 rounds the inputs to TF32 but not how the tensor cores round
// (PTX offers cvt.rna.tf32.f32, ties away from zero; truncation is also seen in practice). Round to
// nearest even is chosen here, the same rule as bf16: the choices differ only at exact ties of the
// dropped 13 bits, by one TF32 ulp. Adding 0xFFF plus the lowest kept bit carries into bit 13
// exactly when the dropped part is above the tie, or at the tie with an odd kept part; the carry
// through the exponent makes the largest values infinite, as IEEE rounding does. A NaN is kept
// as it is (the carry could turn it into an infinity).
float round_to_tf32(float x) {
  const std::uint32_t b = math::float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return x;
  const std::uint32_t rounded = (b + 0xFFFu + ((b >> 13) & 1u)) & ~0x1FFFu;
  return math::float_from_bits(rounded);
}

// OpenBLAS's sgemm on fp32 copies: fast enough for the interpret suite's small models on two
// cores. Deterministic for a given OpenBLAS kernel set and thread count (its split of the work
// follows from the shape and the count alone), so the same inputs give the same bits run after
// run; another OPENBLAS_NUM_THREADS may change the last bits (Debian's 0.3.21 on this VM: a
// 700x300x900 product differs between 1 and 2 threads), as another GPU may change cuBLASLt's.
void run_product(const Product& p) {
  std::vector<float> a, b;                                        // op(A), op(B) sources, dense
  std::vector<float> acc(static_cast<size_t>(p.m * p.n));         // (n, m): beta * C, then D
  const int lda = static_cast<int>(p.A.rows > 1 ? p.A.rows : 1);
  const int ldb = static_cast<int>(p.B.rows > 1 ? p.B.rows : 1);
  const int ldc = static_cast<int>(p.m > 1 ? p.m : 1);
  for (int batch = 0; batch < p.batch; ++batch) {
    gather(p.a, p.A, batch, p.tf32, a);
    gather(p.b, p.B, batch, p.tf32, b);
    // beta == 0 means C is not read (it may hold anything, NaN included), as in BLAS.
    if (p.beta != 0.0f) {
      gather(p.c, p.C, batch, false, acc);
    } else {
      std::fill(acc.begin(), acc.end(), 0.0f);
    }
    if (p.m > 0 && p.n > 0) {
      if (p.k > 0) {
        cblas_sgemm(CblasColMajor, p.transA ? CblasTrans : CblasNoTrans, p.transB ? CblasTrans : CblasNoTrans,
                    static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), p.alpha, a.data(), lda,
                    b.data(), ldb, p.beta, acc.data(), ldc);
      } else {
        for (float& x : acc) x *= p.beta;  // an empty sum: D = beta * C
      }
    }
    if (p.bgrad != nullptr) {
      for (int64_t j = 0; j < p.n; ++j) {
        float sum = 0.0f;
        for (int64_t l = 0; l < p.k; ++l) sum += b[static_cast<size_t>(p.transB ? l * p.B.rows + j : j * p.B.rows + l)];
        store(p.bgrad, p.D.type, j, sum);
      }
    }
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        float v = acc[static_cast<size_t>(j * p.m + i)];
        // Only with a bias: adding a zero would turn a -0 result into +0.
        if (p.bias != nullptr) v += load(p.bias, p.D.type, i);
        // The GELU works on the fp32 sum, not on its rounded copy in aux: one rounding per output.
        if (p.epilogue == Epilogue::kGeluAux) {
          store(p.aux, p.D.type, j * p.aux_ld + i, v);
          v = math::gelu(v);
        } else if (p.epilogue == Epilogue::kDGelu) {
          v *= math::gelu_grad(load(p.aux, p.D.type, j * p.aux_ld + i));
        }
        store(p.d, p.D.type, batch * p.D.stride + j * p.D.ld + i, v);
      }
    }
  }
}

}  // namespace xtrain::interp::lt
