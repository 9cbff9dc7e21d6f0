#include "worker/text_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "worker/gpt.hpp"

namespace xtrain {

std::string sample_text(GPT& model, const SampleOptions& o) {
  const ModelDims& d = model.dims();
  std::vector<std::int32_t> context;
  for (unsigned char c : o.prompt.empty() ? std::string("\n") : o.prompt) {
    if (c >= d.V) throw std::invalid_argument("sample.prompt: byte " + std::to_string(c) + " is outside the vocabulary");
    context.push_back(c);
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::int32_t> window(static_cast<size_t>(d.T), 0);  // (1,T); causal: the tail padding is never seen
  std::vector<float> logits(static_cast<size_t>(d.Vp));
  std::vector<int> order(static_cast<size_t>(d.V));
  std::vector<double> probs(static_cast<size_t>(d.V));
  const int k = o.top_k > 0 ? std::min(o.top_k, d.V) : d.V;
  std::string out;

  for (int n = 0; n < o.tokens; ++n) {
    const size_t len = std::min(context.size(), static_cast<size_t>(d.T));
    std::copy(context.end() - static_cast<long>(len), context.end(), window.begin());
    model.forward(window.data(), nullptr, 1);
    model.backend().download(logits.data(), model.logits() + (len - 1) * static_cast<size_t>(d.Vp),
                             static_cast<size_t>(d.Vp));

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
    context.push_back(next);
    out += static_cast<char>(next);
  }
  return out;
}

std::string printable(const std::string& bytes) {
  std::string out = bytes;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (!(u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f))) c = '?';
  }
  return out;
}

}  // namespace xtrain
