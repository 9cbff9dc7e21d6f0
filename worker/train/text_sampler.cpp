#include "worker/train/text_sampler.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "common/tokenizer/unicode_classes.hpp"
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
    const Utf8Unit unit = decode_utf8(bytes, i);
    const char32_t c = unit.code_point;
    // C0 and C1 control characters and DEL move a terminal's cursor or change its state.
    const bool control = c < 0x20 || (c >= 0x7f && c < 0xa0);
    if (unit.valid && (!control || c == '\n' || c == '\t')) {
      out.append(bytes, i, unit.length);
      i += unit.length;
    } else {
      out += '?';  // one a byte: what is left of a broken sequence may still start a character
      ++i;
    }
  }
  return out;
}

}  // namespace xtrain
