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

KvDecoder::KvDecoder(const ParamLayout& layout, const std::function<void(float* params)>& load, int threads, int rows)
    : TokenDecoder(layout.dims(), rows), layout_(layout), params_(layout.total()), max_rows_(rows), team_(threads) {
  load(params_.data());
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
  const size_t cache = static_cast<size_t>(rows) * dims_.L * dims_.T * dims_.C;
  keys_.resize(cache);
  values_.resize(cache);
  logits_.resize(static_cast<size_t>(rows) * dims_.Vp);
  scores_.resize(static_cast<size_t>(team_.members()) * dims_.T);
}

KvDecoder::KvDecoder(const ParamLayout& layout, std::span<const float> params, int threads, int rows)
    : KvDecoder(
          layout,
          [&](float* into) {
            if (params.size() != layout.total()) {
              throw std::invalid_argument("KvDecoder: " + std::to_string(params.size()) +
                                          " parameters for a layout of " + std::to_string(layout.total()));
            }
            std::memcpy(into, params.data(), params.size() * sizeof(float));
          },
          threads, rows) {}

// Where position t of head h of layer l of row r starts in keys_ and values_.
size_t KvDecoder::cache_at(int r, int l, int h, int t) const {
  return (((static_cast<size_t>(r) * dims_.L + l) * dims_.NH + h) * dims_.T + t) * (dims_.C / dims_.NH);
}

size_t KvDecoder::cache_bytes_per_row(const ModelDims& dims) {
  return 2 * static_cast<size_t>(dims.L) * dims.T * dims.C * sizeof(float);
}

void KvDecoder::set_rows(int rows) {
  if (rows < 1 || rows > max_rows_) {
    throw std::invalid_argument("KvDecoder: " + std::to_string(rows) + " rows, but its caches hold 1 to " +
                                std::to_string(max_rows_));
  }
  reset_rows(rows);
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

// Causal attention of each of the first `rows` rows' n new positions [first, first+n) over the
// row's cache of `layer`, which already holds their keys and values: softmax(q k^T / sqrt(hs)) v
// per head, the rows' heads shared out over the team.
void KvDecoder::attention(int layer, int first, int n, int rows) {
  team_.run([&](int member, int members) {
    const TeamShare heads = team_share(rows * dims_.NH, member, members);
    for (int rh = heads.first; rh < heads.last; ++rh) {
      const int row = rh / dims_.NH, h = rh % dims_.NH;
      for (int i = 0; i < n; ++i) attend(layer, row, h, first + i + 1, row * n + i, member);
    }
  });
}

// One head of one new position of `row` (row i of qkv_ and att_), over the row's cache's first
// `seen` positions, with member `member`'s row of scores.
void KvDecoder::attend(int layer, int row, int h, int seen, int i, int member) {
  const int C = dims_.C, NH = dims_.NH, hs = C / NH, T = dims_.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* scores = scores_.data() + static_cast<size_t>(member) * T;
  const size_t head = cache_at(row, layer, h, 0);
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

// Row `to` takes row 0's keys and values of positions [first, first+n) and its logits: the same
// window gives the same work.
void KvDecoder::copy_first_row(int to, int first, int n) {
  const size_t count = static_cast<size_t>(n) * (dims_.C / dims_.NH);
  for (int l = 0; l < dims_.L; ++l) {
    for (int h = 0; h < dims_.NH; ++h) {
      const size_t from = cache_at(0, l, h, first), at = cache_at(to, l, h, first);
      std::memcpy(keys_.data() + at, keys_.data() + from, count * sizeof(float));
      std::memcpy(values_.data() + at, values_.data() + from, count * sizeof(float));
    }
  }
  const size_t Vp = static_cast<size_t>(dims_.Vp);
  std::memcpy(logits_.data() + static_cast<size_t>(to) * Vp, logits_.data(), Vp * sizeof(float));
}

StepLogits KvDecoder::run(int first) {
  const int C = dims_.C, hs = C / dims_.NH;
  const int n = position() - first;  // new positions a row
  // Rows whose windows are the same are the same work: the first runs it, and its new keys,
  // values and logits are copied to the others.
  const int computed = rows_share_window() ? 1 : rows();
  const int m = computed * n;  // work rows: (computed, n)
  if (m > positions_) {
    positions_ = m;
    const size_t all = static_cast<size_t>(m);
    residual_.resize(all * C);
    normed_.resize(all * C);
    qkv_.resize(all * 3 * C);
    att_.resize(all * C);
    proj_.resize(all * C);
    hidden_.resize(all * 4 * C);
  }
  const float* P = params_.data();
  const auto layernorm = [&](float* out, const float* inp, size_t w, size_t b, int count) {
    for (int i = 0; i < count; ++i) {
      const float* x = inp + static_cast<size_t>(i) * C;
      math::layernorm_row_forward(out + static_cast<size_t>(i) * C, x, P + w, P + b, math::layernorm_row_stats(x, C),
                                  C);
    }
  };
  const auto add_residual = [&] {
    for (size_t j = 0; j < static_cast<size_t>(m) * C; ++j) residual_[j] = residual_[j] + proj_[j];
  };

  for (int r = 0; r < computed; ++r) {
    const std::int32_t* tokens = window(r).data() + first;
    for (int i = 0; i < n; ++i) {
      float* o = residual_.data() + static_cast<size_t>(r * n + i) * C;
      packed_row(o, P + layout_.wte(), tokens[i], dims_.Vp, C);
      const float* p = P + layout_.wpe() + static_cast<size_t>(first + i) * C;
      for (int k = 0; k < C; ++k) o[k] = o[k] + p[k];
    }
  }
  for (int l = 0; l < dims_.L; ++l) {
    const LayerOffsets& o = layout_.layer(l);
    layernorm(normed_.data(), residual_.data(), o.ln1_w, o.ln1_b, m);
    matmul(qkv_.data(), normed_.data(), P + o.qkv_w, P + o.qkv_b, m, C, 3 * C);
    for (int r = 0; r < computed; ++r) {
      for (int i = 0; i < n; ++i) {
        const float* row = qkv_.data() + static_cast<size_t>(r * n + i) * 3 * C;
        for (int h = 0; h < dims_.NH; ++h) {
          const size_t cached = cache_at(r, l, h, first + i);
          std::memcpy(keys_.data() + cached, row + C + h * hs, hs * sizeof(float));
          std::memcpy(values_.data() + cached, row + 2 * C + h * hs, hs * sizeof(float));
        }
      }
    }
    attention(l, first, n, computed);
    matmul(proj_.data(), att_.data(), P + o.attn_proj_w, P + o.attn_proj_b, m, C, C);
    add_residual();
    layernorm(normed_.data(), residual_.data(), o.ln2_w, o.ln2_b, m);
    matmul(hidden_.data(), normed_.data(), P + o.fc_w, P + o.fc_b, m, C, 4 * C);
    for (size_t j = 0; j < static_cast<size_t>(m) * 4 * C; ++j) hidden_[j] = math::gelu(hidden_[j]);
    matmul(proj_.data(), hidden_.data(), P + o.fc_proj_w, P + o.fc_proj_b, m, 4 * C, C);
    add_residual();
  }
  // Only each row's last position's logits are wanted: one row each through the final layernorm
  // and wte.
  for (int r = 0; r < computed; ++r) {
    layernorm(normed_.data() + static_cast<size_t>(r) * C, residual_.data() + static_cast<size_t>(r * n + n - 1) * C,
              layout_.lnf_w(), layout_.lnf_b(), 1);
  }
  const size_t Vp = static_cast<size_t>(dims_.Vp);
  std::fill(logits_.begin(), logits_.begin() + static_cast<std::ptrdiff_t>(computed * Vp), 0.0f);
  product(logits_.data(), P + layout_.wte(), normed_.data(), computed, dims_.Vp, C);
  for (int r = computed; r < rows(); ++r) copy_first_row(r, first, n);
  count_positions(n);
  return StepLogits(logits_.data(), rows(), dims_.Vp, dims_.V);
}

}  // namespace xtrain
