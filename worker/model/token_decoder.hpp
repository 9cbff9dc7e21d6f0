// What `generate` runs a model with, one call per new token. Two decoders implement it, each with
// a KV cache (one position of work per new token): the CPU's own (worker/cpu/kv_decoder.hpp: fp32,
// its products on repacked weights) and GPT's forward and step on any backend
// (worker/model/gpt_decoder.hpp: what runs on a GPU). Both keep their window of tokens here, by
// one rule, so that the same model, prompt and seed give the same text on either, up to the
// rounding of their sums.
//
// Rows: a decoder may run several sequences side by side (GptDecoder: the samples of one prompt
// in one batch on a GPU), each with its own window, all of the same length: every call appends
// the same number of tokens to each.
//
// The window past the context: GPT-2's positions are learned absolute embeddings, so a token
// belongs to its position and the window cannot shift by one. When new tokens do not fit, the
// newest half of the window (at most what leaves them room) is kept and run again from position
// 0, so the model always sees between T/2 and T tokens of context.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/model/param_layout.hpp"

namespace xtrain {

// What TokenDecoder::append returns: the logits of each row's last position, (rows, Vp), valid
// until the decoder's next call or other work on its model. A decoder on a GPU in bf16 hands over
// the bits it downloaded, and a row becomes floats when it is asked for, on the thread that asks:
// generate's rows side by side convert on the threads that draw from them, each row while it is
// in that core's cache. (All 16 rows of a GPT-2 step in one pass on one core took 250-500 us on
// the build VMs, the order of the GPU's whole step.)
class StepLogits {
 public:
  StepLogits(const float* floats, int rows, int Vp, int V);  // (rows, Vp) floats
  // (rows, Vp) bf16 bits, each row converted into its row of `converted` (rows, Vp) floats.
  StepLogits(const std::uint16_t* bf16, float* converted, int rows, int Vp, int V);

  int rows() const { return rows_; }
  // Row r's first V logits, the vocabulary's (std::out_of_range for r outside [0, rows)).
  // Different rows may be asked for from different threads at once; a bf16 row is converted at
  // every call, so ask once a row.
  std::span<const float> row(int r) const;

 private:
  const float* floats_ = nullptr;        // fp32 rows, read in place
  const std::uint16_t* bf16_ = nullptr;  // or bf16 rows, converted by row() into converted_
  float* converted_ = nullptr;
  int rows_, Vp_, V_;
};

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  TokenDecoder(const TokenDecoder&) = delete;
  TokenDecoder& operator=(const TokenDecoder&) = delete;

  int context() const { return dims_.T; }
  int rows() const { return static_cast<int>(windows_.size()); }
  int position() const { return static_cast<int>(windows_[0].size()); }  // tokens in each window
  const std::vector<std::int32_t>& window(int row = 0) const { return windows_.at(static_cast<size_t>(row)); }

  void reset();

  // Positions run through the model since construction, slides and refills included (what the
  // cache saves shows here), counted once for all rows.
  std::uint64_t positions_computed() const { return positions_computed_; }

  // Puts `tokens`, (rows, n) row-major, at each window's next n positions (sliding first, above,
  // when they do not fit) and returns the logits of each row's last one. More than the context
  // per row is std::length_error; an id outside [0, V), or no tokens, std::out_of_range; a count
  // that is not a multiple of rows(), std::invalid_argument; the windows are unchanged then.
  StepLogits append(std::span<const std::int32_t> tokens);

 protected:
  TokenDecoder(const ModelDims& dims, int rows);

  // Runs every window's positions [first, position()) through the model (the ones before `first`
  // ran in earlier calls, since the last slide) and returns each row's last logits.
  virtual StepLogits run(int first) = 0;

  void count_positions(int n) { positions_computed_ += static_cast<std::uint64_t>(n); }
  // Whether every row's window is row 0's (generate's prompt, before the samples part): both
  // decoders then run one row and copy its keys, values and logits to the others.
  bool rows_share_window() const;
  // Empties the windows and makes `rows` (>= 1) of them.
  void reset_rows(int rows);

  ModelDims dims_;

 private:
  std::vector<std::vector<std::int32_t>> windows_;  // (rows) of position() tokens each
  std::uint64_t positions_computed_ = 0;
};

}  // namespace xtrain
