#include "worker/model/gpt_decoder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xtrain {

GptDecoder::GptDecoder(GPT& model, int rows)
    : TokenDecoder(model.dims(), rows),
      model_(model),
      tokens_(static_cast<size_t>(rows) * static_cast<size_t>(model.dims().T), 0),
      step_tokens_(static_cast<size_t>(rows)),
      converted_(model.backend().act_dtype() == DType::bf16
                     ? static_cast<size_t>(rows) * static_cast<size_t>(model.dims().Vp)
                     : 0) {
  if (rows > model.max_batch()) {
    throw std::invalid_argument("GptDecoder: " + std::to_string(rows) + " rows, but the model holds " +
                                std::to_string(model.max_batch()) + " sequence(s)");
  }
}

StepLogits GptDecoder::run(int first) {
  const size_t T = static_cast<size_t>(dims_.T);
  const bool cached = forwards_seen_ != 0 && forwards_seen_ == model_.forwards();
  if (cached && first > 0 && position() - first == 1) {
    for (int r = 0; r < rows(); ++r) step_tokens_[static_cast<size_t>(r)] = window(r).back();
    model_.forward_step(step_tokens_, first);
    count_positions(1);
  } else {
    // Rows whose windows are the same run as one sequence, whose keys, values and logits are then
    // copied to the others.
    const int distinct = rows_share_window() ? 1 : rows();
    for (int r = 0; r < distinct; ++r) std::copy(window(r).begin(), window(r).end(), tokens_.begin() + r * T);
    model_.forward_window(tokens_.data(), distinct, position() - 1);
    if (distinct < rows()) model_.copy_first_sequence(rows());
    count_positions(dims_.T);
  }
  const void* logits = model_.backend().download_view(model_.step_logits(), static_cast<size_t>(rows()) * dims_.Vp);
  forwards_seen_ = model_.forwards();
  if (converted_.empty()) return StepLogits(static_cast<const float*>(logits), rows(), dims_.Vp, dims_.V);
  return StepLogits(static_cast<const std::uint16_t*>(logits), converted_.data(), rows(), dims_.Vp, dims_.V);
}

}  // namespace xtrain
