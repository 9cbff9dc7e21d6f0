// Whole models in and out: the weights of any file model.init_from accepts (common/model_file.hpp)
// into our flat layout, and a flat layout out as a Hugging Face GPT-2 directory (the llm.c model
// file is worker/formats/llmc_model.hpp's export_llmc_model).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "common/tokenizer/gpt2_vocabulary.hpp"
#include "common/model_file.hpp"
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

// The vocabulary a Hugging Face export ships: its files, and <|endoftext|> (its id and text),
// which GPT-2 uses as its bos, eos and unk token.
struct ExportVocab {
  VocabularyFiles files;
  std::int32_t eot = -1;
  std::string eot_text = "<|endoftext|>";
};

// Writes a Hugging Face GPT-2 directory `dir`: config.json, model.safetensors (F32, the released
// gpt2's names) and, when `vocab` is given, its files as vocab.json + merges.txt with
// tokenizer_config.json (GPT2Tokenizer, the special tokens, model_max_length) and
// generation_config.json (bos_token_id, eos_token_id), so that AutoTokenizer and
// AutoModelForCausalLM load it and generate stops at <|endoftext|> with no extra arguments. Without
// them, `llmc_table` (llm.c's tokenizer file's bytes) goes in as gpt2_tokenizer.bin: transformers
// ignores it, our commands decode with it (common/model_file.hpp). Everything is written under
// DIR.tmp-PID, fsynced and renamed into place; an existing `dir` is replaced only with `replace`
// (else FileError). A failure leaves no temporary behind.
void export_hf_directory(const std::string& dir, const ParamLayout& layout, const float* params,
                         const std::optional<ExportVocab>& vocab, bool replace,
                         const std::optional<std::string>& llmc_table = std::nullopt);

}  // namespace xtrain
