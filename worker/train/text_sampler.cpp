#include "worker/train/text_sampler.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/gpt_decoder.hpp"
#include "worker/train/token_sampler.hpp"

namespace xtrain {

std::vector<std::int32_t> sample_tokens(GPT& model, const std::vector<std::int32_t>& prompt, const SampleOptions& o) {
  const ModelDims& d = model.dims();
  TokenSampler sampler({.temperature = o.temperature, .top_k = o.top_k, .top_p = 1.0}, sample_seed(o.seed, 0));
  std::vector<std::int32_t> out;
  GptDecoder decoder(model);
  std::span<const float> logits =
      decoder.append(std::span(prompt).last(std::min(prompt.size(), static_cast<size_t>(d.T)))).row(0);
  for (int n = 0; n < o.tokens; ++n) {
    const std::int32_t next = sampler.next(logits);
    if (next == o.end_token) break;
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
