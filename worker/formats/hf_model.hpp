// Hugging Face GPT-2 weights: our flat parameter buffer to and from a model.safetensors with
// GPT2Model's names and layouts (wte.weight (V, C) with only the V real rows; the Conv1D weights
// attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj stored (in, out), the transposes of ours),
// and the config.json (a GPT2Config) that goes with it.
//
// Writing gives the released gpt2's own layout: no "transformer." prefix, no attn.bias buffers,
// F32. Reading takes what the released gpt2 ... gpt2-xl and GPT2LMHeadModel.save_pretrained hold:
//   - names with or without the "transformer." prefix;
//   - the attention-mask buffers h.N.attn.bias and h.N.attn.masked_bias, ignored;
//   - lm_head.weight, accepted only when equal to wte.weight: our output layer is tied to wte;
//   - F32, F16 or BF16 tensors (every F16 and BF16 value is exactly a float);
//   - wpe.weight with at least seq_len rows (n_positions of them; the first seq_len are taken).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/model/param_layout.hpp"
#include "worker/formats/safetensors.hpp"

namespace xtrain {

// A GPT2Config for the model (GPT2LMHeadModel, tied embeddings, tanh GELU, n_positions = T; no
// bos or eos token for a byte-level model), its torch_dtype that of weights stored as `stored_as`.
nlohmann::json hf_config(const ModelDims& d, StoredAs stored_as = StoredAs::kF32);

// Writes `params` (layout.total() floats in `memory`) as model.safetensors at `path`, every
// tensor stored as `stored_as` says, and fsyncs it (not atomic by itself: callers write into a
// temporary directory that is renamed when complete). Returns the file's size and CRC-32C.
FileChecksum write_hf_model(const std::string& path, const ParamLayout& layout, const float* params,
                            const HostAccess& memory = {}, StoredAs stored_as = StoredAs::kF32);

class HfModelReader {
 public:
  // Reads the header of the safetensors file at `path` and matches it to `layout`: every
  // parameter present once with its Hugging Face shape and a float dtype, nothing unknown besides
  // the ignored buffers; wpe with `positions` rows (the config's n_positions, at least the
  // layout's T: its first T rows are loaded). Throws FileError naming the file and the tensor.
  HfModelReader(const std::string& path, const ParamLayout& layout, std::int64_t positions);
  HfModelReader(const HfModelReader&) = delete;
  HfModelReader& operator=(const HfModelReader&) = delete;

  // Maps the data, verifies its digest (when it has one), the whole file against `recorded` (when
  // given: SafetensorsFile::load) and lm_head.weight (when present), then fills `params`
  // (layout.total() floats in `memory`): wte's padding rows zero, Conv1D weights transposed.
  // `params` is untouched when a check fails.
  void load(float* params, const HostAccess& memory = {}, const RecordedChecksum* recorded = nullptr);

 private:
  SafetensorsFile file_;
  const ParamLayout& layout_;
  std::vector<const SafetensorsEntry*> entries_;  // the file's tensor for each of layout_.tensors()
  const SafetensorsEntry* lm_head_ = nullptr;
};

}  // namespace xtrain
