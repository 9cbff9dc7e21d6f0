// Whole models in and out: the weights of any file model.init_from accepts (common/model_file.hpp)
// into our flat layout, and a flat layout out as a Hugging Face GPT-2 directory (the llm.c model
// file is worker/formats/llmc_model.hpp's export_llmc_model).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model_file.hpp"
#include "worker/formats/safetensors.hpp"
#include "worker/model/host_access.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

// The shape of a model file's weights at a context of `seq_len` positions (at most n_positions).
ModelSpec spec_of(const ModelFileInfo& file, int seq_len);

// The layout a model file's weights fill at their full context (T = n_positions).
ModelDims dims_of(const ModelFileInfo& file);

// Reads the weights of `file` into `params` (layout.total() floats in `memory`). The layout's L, NH, C and V
// must be the file's and its T at most the file's n_positions (the first T rows of wpe are
// taken); wte's padding rows become zero. Throws FileError naming the file and the tensor;
// `params` is untouched when a check fails.
void import_model(const ModelFileInfo& file, const ParamLayout& layout, float* params,
                  const HostAccess& memory = {});

// A whole model's weights at their full context in one flat fp32 buffer.
struct FlatModel {
  ParamLayout layout;
  std::vector<float> params;  // (layout.total())
};

// The memory for a model's parameters could not be had: a failure of the machine, not of the
// input ("out of memory for the 124.44M parameters of gpt2").
class ModelOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// import_model into a FlatModel of dims_of(file); throws what import_model throws, and
// ModelOutOfMemory where the buffer cannot be allocated.
FlatModel load_flat_model(const ModelFileInfo& file);

// What import_model checks before it copies any tensor: the shape against the layout, the tensor
// file's header (safetensors: every tensor's name, dtype, shape and data offsets against the
// file's size; llm.c: the header against the size) and a safetensors file's data digest where
// it has one (our exports). Throws the same FileError. The launcher's plan runs it, so a
// truncated, damaged or foreign model file fails before any rank starts.
void check_model_headers(const ModelFileInfo& file, const ParamLayout& layout);

// Writes a Hugging Face GPT-2 directory `dir`: config.json, model.safetensors (the released gpt2's
// names; F32, or BF16 with config.json's torch_dtype "bfloat16", as `stored_as` says) and the
// `tokenizer`'s files (read_tokenizer_files': for GPT-2's vocabulary
// vocab.json, merges.txt, tokenizer.json and tokenizer_config.json, so that AutoTokenizer loads
// it; llm.c's tokenizer file goes in as gpt2_tokenizer.bin, which transformers ignores and our
// commands decode with). `eot`, <|endoftext|>'s id where the tokenizer has one, goes into
// config.json and generation_config.json as bos_token_id and eos_token_id, so that generate stops
// at it with no extra arguments. Everything is written under DIR.tmp-PID, fsynced and renamed into
// place; an existing `dir` is replaced only with `replace` (else FileError). A failure leaves no
// temporary behind.
void export_hf_directory(const std::string& dir, const ParamLayout& layout, const float* params,
                         const std::vector<NamedFile>& tokenizer, std::optional<std::int32_t> eot, bool replace,
                         StoredAs stored_as = StoredAs::kF32);

}  // namespace xtrain
