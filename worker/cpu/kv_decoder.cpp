#include "worker/cpu/kv_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "worker/cpu/packed_matmul.hpp"
#include "worker/math/gelu.hpp"
#include "worker/math/layernorm.hpp"
#include "worker/math/reduce.hpp"

namespace xtrain {

KvDecoder::KvDecoder(const ParamLayout& layout, std::vector<float> params, int threads)
    : TokenDecoder(layout.dims(), 1), layout_(layout), params_(layout.total()), team_(threads) {
  if (params.size() != layout.total()) {
    throw std::invalid_argument("KvDecoder: " + std::to_string(params.size()) + " parameters for a layout of " +
                                std::to_string(layout.total()));
  }
  std::memcpy(params_.data(), params.data(), params.size() * sizeof(float));
  params = std::vector<float>();  // the caller's copy goes now, before the decoder allocates more
  std::vector<float> scratch;
  const int C = dims_.C;
  for (int l = 0; l < dims_.L; ++l) {
    const LayerOffsets& o = layout.layer(l);
    pack_rows(params_.data() + o.qkv_w, 3 * C, C, scratch);
    pack_rows(params_.data() + o.attn_proj_w, C, C, scratch);
    pack_rows(params_.data() + o.fc_w, 4 * C, C, scratch);
    pack_rows(params_.data() + o.fc_proj_w, C, 4 * C, scratch);
  }
  pack_rows(params_.data() + layout.wte(), dims_.Vp, C, scratch);
  const size_t cache = static_cast<size_t>(dims_.L) * dims_.T * dims_.C;
  keys_.resize(cache);
  values_.resize(cache);
  logits_.resize(static_cast<size_t>(dims_.Vp));
  scores_.resize(static_cast<size_t>(team_.members()) * dims_.T);
}

// out (n,out_dim) = inp (n,in) @ weight^T + bias, the weight packed (worker/cpu/packed_matmul.hpp).
void KvDecoder::matmul(float* out, const float* inp, const float* weight, const float* bias, int n, int in,
                       int out_dim) {
  for (int i = 0; i < n; ++i) std::memcpy(out + static_cast<size_t>(i) * out_dim, bias, out_dim * sizeof(float));
  product(out, weight, inp, n, out_dim, in);
}

// out (n,rows) += x (n,cols) @ W^T, each member of the team taking its share of W's rows.
void KvDecoder::product(float* out, const float* packed, const float* x, int n, int rows, int cols) {
  team_.split(static_cast<size_t>(rows), kPackedRowGroup, kPackedRowGroup, [&](size_t first, size_t last) {
    packed_matmul_accumulate_rows(out, packed, x, n, rows, cols, static_cast<int>(first), static_cast<int>(last));
  });
}

// Causal attention of the n new positions [first, first+n) over the cache of `layer`, which
// already holds their keys and values: softmax(q k^T / sqrt(hs)) v per head, the heads shared out
// over the team.
void KvDecoder::attention(int layer, int first, int n) {
  team_.run([&](int member, int members) {
    const TeamShare heads = team_share(dims_.NH, member, members);
    for (int i = 0; i < n; ++i) {
      for (int h = heads.first; h < heads.last; ++h) attend(layer, h, first + i + 1, i, member);
    }
  });
}

// One head of one new position (row i of qkv_ and att_), over the cache's first `seen` positions,
// with member `member`'s row of scores.
void KvDecoder::attend(int layer, int h, int seen, int i, int member) {
  const int C = dims_.C, NH = dims_.NH, hs = C / NH, T = dims_.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* scores = scores_.data() + static_cast<size_t>(member) * T;
  const size_t head = (static_cast<size_t>(layer) * NH + h) * T * hs;
  const float* keys = keys_.data() + head;
  const float* values = values_.data() + head;
  const float* q = qkv_.data() + static_cast<size_t>(i) * 3 * C + h * hs;
  float top = -INFINITY;
  for (int t = 0; t < seen; ++t) {
    scores[t] = math::row_dot(q, keys + static_cast<size_t>(t) * hs, hs) * scale;
    top = std::max(top, scores[t]);
  }
  float sum = 0.0f;
  for (int t = 0; t < seen; ++t) {
    scores[t] = std::exp(scores[t] - top);
    sum += scores[t];
  }
  float* y = att_.data() + static_cast<size_t>(i) * C + h * hs;
  std::fill(y, y + hs, 0.0f);
  for (int t = 0; t < seen; ++t) {
    const float w = scores[t] / sum;
    const float* v = values + static_cast<size_t>(t) * hs;
    for (int k = 0; k < hs; ++k) y[k] += w * v[k];
  }
}

StepLogits KvDecoder::run(int first) {
  const int C = dims_.C, T = dims_.T, hs = C / dims_.NH;
  const int n = position() - first;
  const std::int32_t* tokens = window().data() + first;
  if (n > rows_) {
    rows_ = n;
    const size_t rows = static_cast<size_t>(n);
    residual_.resize(rows * C);
    normed_.resize(rows * C);
    qkv_.resize(rows * 3 * C);
    att_.resize(rows * C);
    proj_.resize(rows * C);
    hidden_.resize(rows * 4 * C);
  }
  const float* P = params_.data();
  const auto layernorm = [&](float* out, const float* inp, size_t w, size_t b, int rows) {
    for (int i = 0; i < rows; ++i) {
      const float* x = inp + static_cast<size_t>(i) * C;
      math::layernorm_row_forward(out + static_cast<size_t>(i) * C, x, P + w, P + b, math::layernorm_row_stats(x, C),
                                  C);
    }
  };
  const auto add_residual = [&] {
    for (size_t j = 0; j < static_cast<size_t>(n) * C; ++j) residual_[j] = residual_[j] + proj_[j];
  };

  for (int i = 0; i < n; ++i) {
    float* o = residual_.data() + static_cast<size_t>(i) * C;
    packed_row(o, P + layout_.wte(), tokens[i], dims_.Vp, C);
    const float* p = P + layout_.wpe() + static_cast<size_t>(first + i) * C;
    for (int k = 0; k < C; ++k) o[k] = o[k] + p[k];
  }
  for (int l = 0; l < dims_.L; ++l) {
    const LayerOffsets& o = layout_.layer(l);
    layernorm(normed_.data(), residual_.data(), o.ln1_w, o.ln1_b, n);
    matmul(qkv_.data(), normed_.data(), P + o.qkv_w, P + o.qkv_b, n, C, 3 * C);
    for (int i = 0; i < n; ++i) {
      const float* row = qkv_.data() + static_cast<size_t>(i) * 3 * C;
      for (int h = 0; h < dims_.NH; ++h) {
        const size_t cached = ((static_cast<size_t>(l) * dims_.NH + h) * T + first + i) * hs;
        std::memcpy(keys_.data() + cached, row + C + h * hs, hs * sizeof(float));
        std::memcpy(values_.data() + cached, row + 2 * C + h * hs, hs * sizeof(float));
      }
    }
    attention(l, first, n);
    matmul(proj_.data(), att_.data(), P + o.attn_proj_w, P + o.attn_proj_b, n, C, C);
    add_residual();
    layernorm(normed_.data(), residual_.data(), o.ln2_w, o.ln2_b, n);
    matmul(hidden_.data(), normed_.data(), P + o.fc_w, P + o.fc_b, n, C, 4 * C);
    for (size_t j = 0; j < static_cast<size_t>(n) * 4 * C; ++j) hidden_[j] = math::gelu(hidden_[j]);
    matmul(proj_.data(), hidden_.data(), P + o.fc_proj_w, P + o.fc_proj_b, n, 4 * C, C);
    add_residual();
  }
  // Only the last position's logits are wanted: one row through the final layernorm and wte.
  layernorm(normed_.data(), residual_.data() + static_cast<size_t>(n - 1) * C, layout_.lnf_w(), layout_.lnf_b(), 1);
  std::fill(logits_.begin(), logits_.end(), 0.0f);
  product(logits_.data(), P + layout_.wte(), normed_.data(), 1, dims_.Vp, C);
  count_positions(n);
  return StepLogits(logits_.data(), 1, dims_.Vp, dims_.V);
}

}  // namespace xtrain
