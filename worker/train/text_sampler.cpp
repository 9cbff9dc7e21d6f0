#include "worker/train/text_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/gpt_decoder.hpp"

namespace xtrain {

std::vector<std::int32_t> sample_tokens(GPT& model, const std::vector<std::int32_t>& prompt, const SampleOptions& o) {
  const ModelDims& d = model.dims();
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int> order(static_cast<size_t>(d.V));
  std::vector<double> probs(static_cast<size_t>(d.V));
  const int k = o.top_k > 0 ? std::min(o.top_k, d.V) : d.V;
  std::vector<std::int32_t> out;

  GptDecoder decoder(model);
  std::span<const float> logits =
      decoder.append(std::span(prompt).last(std::min(prompt.size(), static_cast<size_t>(d.T)))).row(0);
  for (int n = 0; n < o.tokens; ++n) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
    int next = order[0];
    if (o.temperature > 0) {
      // softmax over the k best at the given temperature, shifted by the maximum for stability
      const double top = logits[static_cast<size_t>(order[0])];
      double total = 0;
      for (int i = 0; i < k; ++i) {
        probs[static_cast<size_t>(i)] = std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / o.temperature);
        total += probs[static_cast<size_t>(i)];
      }
      double u = uniform(rng) * total;
      for (int i = 0; i < k; ++i) {
        next = order[static_cast<size_t>(i)];
        u -= probs[static_cast<size_t>(i)];
        if (u <= 0) break;
      }
    }
    out.push_back(next);
    if (n + 1 < o.tokens) logits = decoder.append(std::span(&next, 1)).row(0);
  }
  return out;
}

std::string printable(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto u = static_cast<unsigned char>(bytes[i]);
    if (u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f)) {
      out += bytes[i++];
      continue;
    }
    // A UTF-8 sequence: a lead byte, then 1-3 continuation bytes 10xxxxxx, shortest form only
    // (C0, C1, F5..FF never lead; E0/F0 need a large enough second byte; F4 stays <= U+10FFFF;
    // ED would encode a surrogate below A0).
    const size_t n = u >= 0xc2 && u <= 0xdf ? 2 : u >= 0xe0 && u <= 0xef ? 3 : u >= 0xf0 && u <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= bytes.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(bytes[i + k]) & 0xc0) == 0x80;
    if (ok && n >= 3) {
      const auto second = static_cast<unsigned char>(bytes[i + 1]);
      ok = !(u == 0xe0 && second < 0xa0) && !(u == 0xed && second >= 0xa0) && !(u == 0xf0 && second < 0x90) &&
           !(u == 0xf4 && second >= 0x90);
    }
    if (ok && n == 2 && u == 0xc2 && static_cast<unsigned char>(bytes[i + 1]) < 0xa0) ok = false;  // C1 controls
    if (ok) {
      out.append(bytes, i, n);
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

}  // namespace xtrain
