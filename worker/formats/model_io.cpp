#include "worker/formats/model_io.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <new>

#include "common/atomic_file.hpp"
#include "common/checkpoint_dirs.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/hf_model.hpp"
#include "worker/formats/llmc_model.hpp"
#include "worker/formats/safetensors.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;

// The file's shape is the layout's (its context at least the layout's).
void check_shape(const ModelFileInfo& file, const ParamLayout& layout) {
  const ModelDims& d = layout.dims();
  const struct {
    int file;
    int ours;
    const char* field;
  } dims[] = {{file.n_layer, d.L, "model.n_layer"},
              {file.n_head, d.NH, "model.n_head"},
              {file.n_embd, d.C, "model.n_embd"},
              {file.vocab_size, d.V, "model.vocab_size"}};
  for (const auto& x : dims) {
    if (x.file != x.ours) {
      throw FileError(file.shape_source, "the file has " + std::string(x.field) + " " + std::to_string(x.file) +
                                             " but the model being loaded has " + std::to_string(x.ours));
    }
  }
  if (file.n_positions < d.T) {
    throw FileError(file.shape_source, "the file has position embeddings for " + std::to_string(file.n_positions) +
                                           " tokens but model.seq_len is " + std::to_string(d.T));
  }
}

}  // namespace

ModelSpec spec_of(const ModelFileInfo& file, int seq_len) {
  ModelSpec m;
  m.n_layer = file.n_layer;
  m.n_head = file.n_head;
  m.n_embd = file.n_embd;
  m.seq_len = seq_len;
  m.vocab_size = file.vocab_size;
  return m;
}

ModelDims dims_of(const ModelFileInfo& file) { return ModelDims::from(spec_of(file, file.n_positions)); }

FlatModel load_flat_model(const ModelFileInfo& file) {
  ParamLayout layout(dims_of(file));
  try {
    std::vector<float> params(layout.total());
    import_model(file, layout, params.data());
    return {std::move(layout), std::move(params)};
  } catch (const std::bad_alloc&) {  // the buffer, or import_model's staging of a tensor
    char millions[32];
    std::snprintf(millions, sizeof millions, "%.2fM", static_cast<double>(layout.total()) / 1e6);
    throw ModelOutOfMemory("out of memory for the " + std::string(millions) + " parameters of " + file.path);
  }
}

void check_model_headers(const ModelFileInfo& file, const ParamLayout& layout) {
  check_shape(file, layout);
  // An llm.c file's header and size were checked by read_model_file_info; a safetensors file's
  // header (names, dtypes, shapes, data offsets against its size) by the reader's constructor,
  // and the data's digest where our writer recorded one by load(), on the mapping (~3 GB/s).
  if (file.format == ModelFormat::kLlmc) return;
  HfModelReader(file.weights, layout, file.n_positions);
  SafetensorsFile(file.weights).load();
}

void import_model(const ModelFileInfo& file, const ParamLayout& layout, float* params, const HostAccess& memory) {
  check_shape(file, layout);
  if (file.format == ModelFormat::kLlmc) {
    import_llmc_model(file, layout, params, memory);
  } else {
    HfModelReader reader(file.weights, layout, file.n_positions);
    reader.load(params, memory);
  }
}

void export_hf_directory(const std::string& dir, const ParamLayout& layout, const float* params,
                         const std::vector<NamedFile>& tokenizer, std::optional<std::int32_t> eot, bool replace,
                         StoredAs stored_as) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !replace) throw FileError(dir, "exists (give --force to replace it)");
  const std::string tmp = dir + kCheckpointTmpMarker + std::to_string(::getpid());
  try {
    fs::remove_all(tmp);
    fs::create_directory(tmp);
    nlohmann::json config = hf_config(layout.dims(), stored_as);
    if (eot) config["bos_token_id"] = config["eos_token_id"] = *eot;
    write_file_atomic(tmp + "/" + kModelConfigFile, config.dump(2) + "\n");
    write_hf_model(tmp + "/" + kModelWeightsFile, layout, params, {}, stored_as);
    for (const NamedFile& file : tokenizer) write_file_atomic(tmp + "/" + file.name, file.content);
    if (eot) {
      const nlohmann::json generation = {{"bos_token_id", *eot}, {"eos_token_id", *eot}};
      write_file_atomic(tmp + "/generation_config.json", generation.dump(2) + "\n");
    }
    fsync_directory(tmp);
    if (fs::exists(dir)) {
      const std::string old = tmp + "-old";
      fs::rename(dir, old);
      rename_into_place(tmp, dir);
      fs::remove_all(old);
    } else {
      rename_into_place(tmp, dir);
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw FileError(e.path1().string(), e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace xtrain
