// Interpret mode's cuBLASLt against an independent double-precision triple loop, through the real
// API the backend calls (descriptors, heuristic, cublasLtMatmul), for every combination the
// backend uses: N/T on each operand, fp32 and bf16 inputs, fp32 and bf16 outputs, alpha != 1,
// beta 0 and 1, the bias epilogue, strided batches, in place and not, odd and vocabulary-wide sizes,
// the GELU epilogues (GELU_AUX, GELU_AUX_BIAS, DGELU) and the bias gradient of B (BGRADB).
//
// Tolerances. fp32 results: the fp32 value differs from the exact one by at most
// (k + 4) * 2^-24 * (|alpha| sum_l |a_il b_lj| + |beta c_ij| + |bias_i|): a k-term sum in fp32 in
// any order (FMA or not) errs by at most gamma_k times the sum of the terms' magnitudes, and
// alpha's product, the beta * C product, and the two additions of C and the bias add one rounding
// each; (k + 4) u covers gamma_(k+3) for these k. The double reference itself errs by ~2^-53.
// bf16 results are tested exactly, two ways: (1) their bits are math's round-to-nearest-even of
// the fp32 result of the same product computed with an fp32 output (the emulation rounds once,
// from that value); (2) against the double reference r: rounding is monotone, so the bf16 result
// must lie between the bf16 roundings of r - bound and r + bound, which is the single value
// round(r) except where a rounding boundary falls inside [r - bound, r + bound], and then one of
// its two neighbours: no looser than that.
// GELU epilogues: exactly the documented computation on the product's fp32 value x (the same case
// without the GELU, fp32 output): aux = x and D = gelu(x), or D = x * gelu'(aux), each rounded once
// to D's type, with worker/math/gelu.hpp's GELU; and the fp32 results against the double reference
// within |gelu'| (<= 1.13) times the product's bound, plus 4e-6 relative and 1e-7 absolute for the
// fp32 evaluation of the GELU (a handful of ulps for its exp, divide and products; ~60 ulps here).
// BGRADB: sum_l op(B) (l, j) within k * 2^-24 * sum_l |op(B) (l, j)| of the double sum (a k-term
// fp32 sum in any order), D unchanged by it.
#include <catch2/catch.hpp>
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda/interp/interp_test_util.hpp"
#include "worker/math/bf16.hpp"
#include "worker/math/gelu.hpp"

namespace {

using xtrain::interp::test::batch_alignment;
using xtrain::interp::test::DeviceBuffer;
using xtrain::interp::test::synchronize;
namespace math = xtrain::math;

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  cudaDataType_t ab, cd;
  float alpha, beta;
  bool bias = false;
  int batch = 1;
  bool in_place = true;  // C == D, as the backend calls it
  bool tf32 = false;
  cublasLtEpilogue_t gelu = CUBLASLT_EPILOGUE_DEFAULT;  // or GELU_AUX (with `bias`: _BIAS), or DGELU
  bool bgrad = false;  // BGRADB (no bias, no GELU)
};


// A column-major stored operand: ld = rows + 3 and batch stride = ld * cols + 5, so that padding
// (filled with NaN) sits between columns and between matrices: reading it poisons the result.
struct Stored {
  int64_t rows, cols, ld, stride;
  int64_t extent(int batch) const { return (batch - 1) * stride + (cols - 1) * ld + rows; }
  int64_t at(int b, int64_t i, int64_t j) const { return b * stride + j * ld + i; }
};

Stored stored(int64_t rows, int64_t cols, int batch) {
  const int64_t ld = rows + 3;
  return Stored{rows, cols, ld, batch > 1 ? ld * cols + 5 : 0};
}

bool has_gelu(const Case& c) { return c.gelu != CUBLASLT_EPILOGUE_DEFAULT; }

// The GELU input's storage: D's shape with a leading dimension rounded up to a multiple of 8 past
// m (the documented rule), so NaN padding sits between its columns.
Stored aux_stored(const Case& c) { return Stored{c.m, c.n, (c.m + 8) / 8 * 8, 0}; }

size_t bytes_of(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

// The logical values of one operand, (batch, cols, rows), already representable in its type.
struct Values {
  Stored s;
  std::vector<float> v;  // (batch, cols, rows)
  float get(int b, int64_t i, int64_t j) const { return v[static_cast<size_t>((b * s.cols + j) * s.rows + i)]; }
};

Values random_values(Stored s, int batch, bool bf16, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Values out{s, std::vector<float>(static_cast<size_t>(batch * s.rows * s.cols))};
  for (float& x : out.v) x = bf16 ? math::round_to_bf16(u(rng)) : u(rng);
  return out;
}

DeviceBuffer upload(const Values& x, cudaDataType_t type, int batch) {
  DeviceBuffer buf(static_cast<size_t>(x.s.extent(batch)) * bytes_of(type));
  const size_t n = buf.bytes() / bytes_of(type);
  for (size_t e = 0; e < n; ++e) {  // padding: NaN
    if (type == CUDA_R_16BF) buf.as<uint16_t>()[e] = 0x7FC0; else buf.as<float>()[e] = NAN;
  }
  for (int b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < x.s.cols; ++j) {
      for (int64_t i = 0; i < x.s.rows; ++i) {
        const int64_t e = x.s.at(b, i, j);
        if (type == CUDA_R_16BF) {
          buf.as<uint16_t>()[e] = math::bf16_bits_from_float(x.get(b, i, j));
        } else {
          buf.as<float>()[e] = x.get(b, i, j);
        }
      }
    }
  }
  return buf;
}

float download(const DeviceBuffer& buf, cudaDataType_t type, int64_t e) {
  return type == CUDA_R_16BF ? math::float_from_bf16_bits(buf.as<uint16_t>()[e]) : buf.as<float>()[e];
}

struct Inputs {
  Values A, B, C, bias;
  Values aux;  // DGELU's GELU input, over GELU's interesting range [-3, 3]
};

// x spread by s, rounded to bf16 again (3x of a bf16 value needs up to 10 bits): exact in either type.
Values scaled(Values x, float s) {
  for (float& v : x.v) v = math::round_to_bf16(v * s);
  return x;
}

Inputs make_inputs(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  const bool ab16 = c.ab == CUDA_R_16BF, cd16 = c.cd == CUDA_R_16BF;
  return Inputs{random_values(stored(c.ta ? c.k : c.m, c.ta ? c.m : c.k, c.batch), c.batch, ab16, rng),
                random_values(stored(c.tb ? c.n : c.k, c.tb ? c.k : c.n, c.batch), c.batch, ab16, rng),
                random_values(stored(c.m, c.n, c.batch), c.batch, cd16, rng),
                random_values(Stored{c.m, 1, c.m, 0}, 1, cd16, rng),
                scaled(random_values(aux_stored(c), 1, cd16, rng), 3.0f)};
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, const Stored& s, int batch) {
  cublasLtMatrixLayout_t l = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&l, type, s.rows, s.cols, s.ld) == CUBLAS_STATUS_SUCCESS);
  if (batch > 1) {
    const int64_t stride = s.stride;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride) == CUBLAS_STATUS_SUCCESS);
  }
  return l;
}

// The product through the API, as cuda/gemm.cpp issues it; D's values (batch, n, m). With a GELU,
// `aux` receives GELU_AUX's stored input, (n, m); with BGRADB, `bgrad` the bias gradient, (n).
std::vector<float> run(const Case& c, const Inputs& in, std::vector<float>* aux = nullptr,
                       std::vector<float>* bgrad = nullptr) {
  DeviceBuffer a = upload(in.A, c.ab, c.batch), b = upload(in.B, c.ab, c.batch);
  DeviceBuffer cbuf = upload(in.C, c.cd, c.batch), bias = upload(in.bias, c.cd, 1);
  DeviceBuffer auxbuf = upload(in.aux, c.cd, 1);  // DGELU reads it; GELU_AUX overwrites its values
  if (c.gelu == CUBLASLT_EPILOGUE_GELU_AUX) std::memset(auxbuf.get(), 0xFF, auxbuf.bytes());
  DeviceBuffer bgradbuf(static_cast<size_t>(c.n) * bytes_of(c.cd));
  std::memset(bgradbuf.get(), 0xFF, bgradbuf.bytes());  // NaN: every element must be written
  DeviceBuffer dbuf(c.in_place ? 0 : cbuf.bytes());
  const DeviceBuffer& d = c.in_place ? cbuf : dbuf;
  if (!c.in_place) std::memset(dbuf.get(), 0xFF, dbuf.bytes());  // NaN: every element must be written
  if (c.beta == 0.0f) std::memset(cbuf.get(), 0xFF, cbuf.bytes());  // C must not be read
  cublasLtHandle_t h = nullptr;
  REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
          CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS);
  const cublasLtEpilogue_t epi = has_gelu(c) ? (c.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : c.gelu)
                                 : c.bias     ? CUBLASLT_EPILOGUE_BIAS
                                 : c.bgrad    ? CUBLASLT_EPILOGUE_BGRADB
                                              : CUBLASLT_EPILOGUE_DEFAULT;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
          CUBLAS_STATUS_SUCCESS);
  if (has_gelu(c)) {
    const void* p = auxbuf.get();
    const int64_t ld = aux_stored(c).ld;
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld) ==
            CUBLAS_STATUS_SUCCESS);
  }
  if (c.bias || c.bgrad) {
    const void* p = c.bgrad ? bgradbuf.get() : bias.get();
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.cd, sizeof c.cd) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p) ==
            CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatrixLayout_t la = layout(c.ab, in.A.s, c.batch), lb = layout(c.ab, in.B.s, c.batch);
  cublasLtMatrixLayout_t lc = layout(c.cd, in.C.s, c.batch);
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  const uint64_t ws_bytes = 1 << 20;
  REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                               sizeof ws_bytes) == CUBLAS_STATUS_SUCCESS);
  const int64_t sab = c.batch > 1 ? static_cast<int64_t>(bytes_of(c.ab)) : 0;
  const int64_t scd = c.batch > 1 ? static_cast<int64_t>(bytes_of(c.cd)) : 0;
  const uint32_t align[4] = {batch_alignment(a.get(), in.A.s.stride * sab), batch_alignment(b.get(), in.B.s.stride * sab),
                             batch_alignment(cbuf.get(), in.C.s.stride * scd), batch_alignment(d.get(), in.C.s.stride * scd)};
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align[i], sizeof align[i]) ==
            CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  REQUIRE(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &result, &found) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(found == 1);
  DeviceBuffer ws(ws_bytes);
  const cublasStatus_t status = cublasLtMatmul(h, desc, &c.alpha, a.get(), la, b.get(), lb, &c.beta, cbuf.get(), lc,
                                               d.get(), lc, &result.algo, ws.get(), ws_bytes, nullptr);
  INFO(xtrain::interp::last_cublas_detail());
  REQUIRE(status == CUBLAS_STATUS_SUCCESS);
  synchronize();
  std::vector<float> out;
  for (int bt = 0; bt < c.batch; ++bt) {
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) out.push_back(download(d, c.cd, in.C.s.at(bt, i, j)));
    }
  }
  if (bgrad != nullptr) {
    bgrad->clear();
    for (int64_t j = 0; j < c.n; ++j) bgrad->push_back(download(bgradbuf, c.cd, j));
  }
  if (aux != nullptr) {
    aux->clear();
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) aux->push_back(download(auxbuf, c.cd, aux_stored(c).at(0, i, j)));
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
  return out;
}

// The test's own TF32 rounding, by arithmetic rather than bits: 11 significant bits, the default
// rounding mode (nearest, ties to even) of nearbyint.
float tf32_reference(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e = 0;
  const double f = std::frexp(static_cast<double>(x), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(f, 11)), e - 11));
}

struct Reference {
  std::vector<double> value, bound;  // (batch, n, m)
};

Reference reference(const Case& c, const Inputs& in, bool round_tf32) {
  Reference r;
  auto op = [&](float x) { return static_cast<double>(round_tf32 ? tf32_reference(x) : x); };
  for (int bt = 0; bt < c.batch; ++bt) {
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double x = op(c.ta ? in.A.get(bt, l, i) : in.A.get(bt, i, l));
          const double y = op(c.tb ? in.B.get(bt, j, l) : in.B.get(bt, l, j));
          sum += x * y;
          mag += std::fabs(x * y);
        }
        const double cc = c.beta != 0.0f ? c.beta * static_cast<double>(in.C.get(bt, i, j)) : 0.0;
        const double bias = c.bias ? in.bias.get(0, i, 0) : 0.0;
        r.value.push_back(c.alpha * sum + cc + bias);
        r.bound.push_back((c.k + 4) * std::ldexp(1.0, -24) * (std::fabs(c.alpha) * mag + std::fabs(cc) + std::fabs(bias)));
      }
    }
  }
  return r;
}

float bf16_of(double x) { return math::round_to_bf16(static_cast<float>(x)); }

// Checks `got` against the reference (fp32: within the bound; bf16: see the file's comment, with
// `fp32_twin` the same product's fp32 output).
void check(const Case& c, const std::vector<float>& got, const Reference& r, const std::vector<float>* fp32_twin) {
  REQUIRE(got.size() == r.value.size());
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    bool ok;
    if (c.cd == CUDA_R_32F) {
      ok = std::fabs(got[e] - r.value[e]) <= r.bound[e];
    } else {
      ok = math::bf16_bits_from_float((*fp32_twin)[e]) == math::bf16_bits_from_float(got[e]) &&
           bf16_of(r.value[e] - r.bound[e]) <= got[e] && got[e] <= bf16_of(r.value[e] + r.bound[e]);
    }
    if (!ok && bad++ == 0) first = e;
  }
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " ta " << c.ta << " tb " << c.tb << " ab " << c.ab << " cd "
            << c.cd << " beta " << c.beta << " bias " << c.bias << " batch " << c.batch << " in place " << c.in_place);
  INFO("first bad element " << first << ": got " << got[first] << ", reference " << r.value[first] << " +- "
                            << r.bound[first]);
  CHECK(bad == 0);
}

void check_case(const Case& c, unsigned seed) {
  const Inputs in = make_inputs(c, seed);
  const std::vector<float> got = run(c, in);
  const Reference r = reference(c, in, c.tf32);
  if (c.cd == CUDA_R_32F) {
    check(c, got, r, nullptr);
  } else {
    Case twin = c;  // the same values, C stored as fp32 (exactly), output fp32
    twin.cd = CUDA_R_32F;
    const std::vector<float> fp32 = run(twin, in);
    check(twin, fp32, r, nullptr);
    check(c, got, r, &fp32);
  }
}

}  // namespace

TEST_CASE("interp cuBLASLt: every operand combination matches a double reference", "[interp][cublaslt]") {
  const std::pair<cudaDataType_t, cudaDataType_t> types[] = {
      {CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
  unsigned seed = 1;
  for (const auto& [ab, cd] : types) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          for (bool bias : {false, true}) {
            for (bool in_place : {true, false}) {
              check_case(Case{7, 13, 5, ta, tb, ab, cd, 0.75f, beta, bias, 1, in_place}, seed++);
            }
          }
          check_case(Case{6, 5, 9, ta, tb, ab, cd, -1.5f, beta, false, 3, true}, seed++);  // strided batch
        }
      }
    }
  }
}

TEST_CASE("interp cuBLASLt: a vocabulary-wide product (50257 columns) is right and repeats bit for bit",
          "[interp][cublaslt]") {
  for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF}) {
    // The backend's logits: (BT, V) = inp (BT, C) @ wte^T, column-major m = V, op(A) = wte^T.
    const Case c{50257, 3, 4, true, false, t, t, 1.0f, 0.0f};
    check_case(c, 7);
    const Inputs in = make_inputs(c, 8);
    const std::vector<float> first = run(c, in), second = run(c, in);
    CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("interp cuBLASLt: FAST_TF32 rounds fp32 inputs to TF32 (nearest, ties to even)", "[interp][cublaslt]") {
  const Case c{7, 13, 5, false, true, CUDA_R_32F, CUDA_R_32F, 1.0f, 1.0f, true, 1, true, true};
  check_case(c, 21);  // against a reference whose inputs are rounded to TF32 by the test
  // The effect is visible: against unrounded inputs, some results are off by more than fp32 error.
  const Inputs in = make_inputs(c, 22);
  const std::vector<float> got = run(c, in);
  const Reference strict = reference(c, in, false);
  size_t beyond = 0;
  for (size_t e = 0; e < got.size(); ++e) beyond += std::fabs(got[e] - strict.value[e]) > strict.bound[e];
  CHECK(beyond > got.size() / 2);

  // Ties, 1 x 1 products with B = 1 (TF32 keeps 10 bits after the point): 1 + 2^-11 lies halfway
  // between 1 and 1 + 2^-10 and goes to the even 1; 1 + 3 * 2^-11 halfway between 1 + 2^-10 and
  // 1 + 2^-9, to the even 1 + 2^-9; just above the first tie rounds up.
  const float u = std::ldexp(1.0f, -11);
  const float a[4] = {1 + u, 1 + 3 * u, -(1 + u), 1 + u + std::ldexp(1.0f, -20)};
  const float expected[4] = {1, 1 + 4 * u, -1, 1 + 2 * u};
  const Case tie{4, 1, 1, false, false, CUDA_R_32F, CUDA_R_32F, 1.0f, 0.0f, false, 1, true, true};
  Inputs ties = make_inputs(tie, 23);
  for (int i = 0; i < 4; ++i) ties.A.v[i] = a[i];
  ties.B.v[0] = 1.0f;
  const std::vector<float> rounded = run(tie, ties);
  for (int i = 0; i < 4; ++i) CHECK(rounded[i] == expected[i]);
}

namespace {

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

float stored_as(cudaDataType_t t, float x) { return t == CUDA_R_16BF ? math::round_to_bf16(x) : x; }

// One GELU case: its results bit for bit from the plain product's fp32 x, and in fp32 against the
// double reference (the file's comment).
void check_gelu_case(const Case& c, unsigned seed) {
  const Inputs in = make_inputs(c, seed);
  std::vector<float> aux;
  const std::vector<float> got = run(c, in, &aux);
  Case plain = c;  // the same product, no GELU, fp32 output: x
  plain.gelu = CUBLASLT_EPILOGUE_DEFAULT;
  plain.cd = CUDA_R_32F;
  const std::vector<float> x = run(plain, in);
  const Reference r = reference(plain, in, c.tf32);
  const bool forward = c.gelu == CUBLASLT_EPILOGUE_GELU_AUX;
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const float g = in.aux.get(0, static_cast<int64_t>(e) % c.m, static_cast<int64_t>(e) / c.m);
    const float want = stored_as(c.cd, forward ? math::gelu(x[e]) : x[e] * math::gelu_grad(g));
    bool ok = got[e] == want && (!forward || aux[e] == stored_as(c.cd, x[e]));
    if (c.cd == CUDA_R_32F) {
      const double exact = forward ? gelu_ref(r.value[e]) : r.value[e] * gelu_grad_ref(g);
      const double slope = forward ? 1.13 : std::fabs(gelu_grad_ref(g));
      ok = ok && std::fabs(got[e] - exact) <= slope * r.bound[e] + 4e-6 * std::fabs(exact) + 1e-7;
    }
    if (!ok && bad++ == 0) first = e;
  }
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " ab " << c.ab << " cd " << c.cd << " beta " << c.beta
            << " bias " << c.bias << " epilogue " << c.gelu << " in place " << c.in_place);
  INFO("first bad element " << first << ": got " << got[first] << ", x " << x[first] << ", reference "
                            << r.value[first]);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("interp cuBLASLt: GELU_AUX(_BIAS) and DGELU apply the GELU to the fp32 product, rounding once",
          "[interp][cublaslt]") {
  const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}};
  unsigned seed = 100;
  for (const auto& [ab, cd] : types) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        for (bool bias : {false, true}) {
          check_gelu_case(Case{13, 7, 9, false, tb, ab, cd, 0.75f, beta, bias, 1, true, false,
                               CUBLASLT_EPILOGUE_GELU_AUX}, seed++);
        }
        check_gelu_case(Case{16, 5, 11, false, tb, ab, cd, 1.25f, beta, false, 1, false, false,
                             CUBLASLT_EPILOGUE_DGELU}, seed++);
      }
    }
  }
  // With FAST_TF32 the GELU takes the TF32 product, as every epilogue does.
  check_gelu_case(Case{13, 7, 9, false, true, CUDA_R_32F, CUDA_R_32F, 1.0f, 0.0f, true, 1, true, true,
                       CUBLASLT_EPILOGUE_GELU_AUX}, seed++);
}

TEST_CASE("interp cuBLASLt: BGRADB sums op(B) over k next to an unchanged product", "[interp][cublaslt]") {
  const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_16BF, CUDA_R_32F}, {CUDA_R_32F, CUDA_R_32F}};
  unsigned seed = 200;
  for (const auto& [ab, cd] : types) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        // The backend's weight gradient: k the positions, op(B) dout^T's transpose (tb).
        Case c{9, 12, 37, false, tb, ab, cd, 1.0f, beta, false, 1, true};
        c.bgrad = true;
        const Inputs in = make_inputs(c, seed++);
        std::vector<float> bgrad;
        const std::vector<float> got = run(c, in, nullptr, &bgrad);
        check(c, got, reference(c, in, false), nullptr);
        size_t bad = 0;
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = 0, mag = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            const double y = tb ? in.B.get(0, j, l) : in.B.get(0, l, j);
            sum += y;
            mag += std::fabs(y);
          }
          bad += !(std::fabs(bgrad[static_cast<size_t>(j)] - sum) <= c.k * std::ldexp(1.0, -24) * mag);
        }
        INFO("ab " << ab << " tb " << tb << " beta " << beta);
        CHECK(bad == 0);
      }
    }
  }
}
