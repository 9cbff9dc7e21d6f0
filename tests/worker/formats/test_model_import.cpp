// Starting from released weights: Hugging Face GPT-2 directories and llm.c model files written
// here by hand from the formats' descriptions (not by our writers), in every form the releases
// use, load with exactly the values that were written and give the same logits as those weights
// uploaded directly; every kind of bad file is refused with one line naming file and tensor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/model_file.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/formats/float16.hpp"
#include "worker/model/gpt.hpp"
#include "worker/formats/model_io.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/piecewise_memory.hpp"

using namespace xtrain;
using xtrain::test::model_spec;
using nlohmann::json;
using xtrain::test::error_message;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;
namespace fs = std::filesystem;

namespace {

constexpr int kPositions = 8;  // n_positions of the files; the model uses seq_len 5 of them

ModelSpec small_model() {
  return model_spec(2, 2, 8, 5, 70);  // padded to 128
}

// Values k/64 with |k| <= 127: exact in F16, BF16 and F32, so every dtype must load them exactly.
std::vector<float> exact_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % 255) - 127) / 64.0f;
  return v;
}

// The bytes of `values` in a safetensors dtype. F16 and BF16 by bit manipulation that is only
// right for the exact values above (checked), so the test does not lean on our converters.
std::string encode(const float* values, size_t n, const std::string& dtype) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    if (dtype == "F32") {
      out.append(reinterpret_cast<const char*>(&bits), 4);
      continue;
    }
    std::uint16_t h = 0;
    if (dtype == "BF16") {
      REQUIRE((bits & 0xffff) == 0);
      h = static_cast<std::uint16_t>(bits >> 16);
    } else if (values[i] != 0.0f) {  // F16: rebias the exponent 127 -> 15, keep 10 mantissa bits
      const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      REQUIRE((bits & 0x1fff) == 0);
      REQUIRE(exponent > 0);
      h = static_cast<std::uint16_t>(((bits >> 16) & 0x8000) | (exponent << 10) | ((bits >> 13) & 0x3ff));
    }
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// safetensors by its description: u64 header length, the JSON header padded with spaces to a
// multiple of 8, then the tensors' bytes back to back in the order given.
void write_safetensors_by_hand(const std::string& path, const std::vector<RawTensor>& tensors) {
  json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(text.size() >> (8 * i));
  write_bytes(path, length + text + data);
}

// Which of the released layout's variations to write.
struct Released {
  std::string dtype = "F32";
  bool prefix = false;   // "transformer." before every GPT2Model name
  bool buffers = false;  // h.N.attn.bias (the causal mask) and h.N.attn.masked_bias
  bool lm_head = false;  // GPT2LMHeadModel's lm_head.weight, equal to wte
};

// The weights a test starts from: our flat layout with exact values, padding rows zero, plus the
// wpe rows beyond seq_len that only the file has.
struct Weights {
  ModelSpec spec = small_model();
  ParamLayout layout{ModelDims::from(spec)};
  std::vector<float> params = exact_values(layout.total(), 7);
  std::vector<float> wpe_file = exact_values(static_cast<size_t>(kPositions) * 8, 8);  // (kPositions, C)

  Weights() {
    const ModelDims& d = layout.dims();
    std::fill(params.begin() + static_cast<long>(layout.wte() + static_cast<size_t>(d.V) * d.C),
              params.begin() + static_cast<long>(layout.wte() + static_cast<size_t>(d.Vp) * d.C), 0.0f);
    std::copy(wpe_file.begin(), wpe_file.begin() + d.T * d.C, params.begin() + static_cast<long>(layout.wpe()));
  }

  // A Hugging Face GPT-2 directory as the releases have it: config.json and model.safetensors
  // with GPT2Model's names; Conv1D weights (in, out), i.e. the transposes of our (out, in).
  std::vector<RawTensor> tensors(const Released& r) const {
    const ModelDims& d = layout.dims();
    const std::string p = r.prefix ? "transformer." : "";
    std::vector<RawTensor> out;
    auto ours = [&](const std::string& name, std::vector<std::int64_t> shape) {
      const ParamTensor& t = layout.find(name);
      out.push_back({p + name, r.dtype, shape, encode(params.data() + t.offset, t.count, r.dtype)});
    };
    auto conv1d = [&](const std::string& name) {  // ours (out, in) -> file (in, out)
      const ParamTensor& t = layout.find(name);
      const size_t rows = static_cast<size_t>(t.shape[0]), cols = static_cast<size_t>(t.shape[1]);
      std::vector<float> hf(t.count);
      for (size_t o = 0; o < rows; ++o)
        for (size_t i = 0; i < cols; ++i) hf[i * rows + o] = params[t.offset + o * cols + i];
      out.push_back({p + name, r.dtype, {static_cast<long>(cols), static_cast<long>(rows)}, encode(hf.data(), hf.size(), r.dtype)});
    };
    const std::string wte = encode(params.data() + layout.wte(), static_cast<size_t>(d.V) * d.C, r.dtype);
    out.push_back({p + "wte.weight", r.dtype, {d.V, d.C}, wte});
    out.push_back({p + "wpe.weight", r.dtype, {kPositions, d.C}, encode(wpe_file.data(), wpe_file.size(), r.dtype)});
    for (int l = 0; l < d.L; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      ours(h + "ln_1.weight", {d.C});
      ours(h + "ln_1.bias", {d.C});
      if (r.buffers) {
        std::vector<float> mask(kPositions * kPositions);
        for (int i = 0; i < kPositions; ++i)
          for (int j = 0; j <= i; ++j) mask[i * kPositions + j] = 1.0f;
        out.push_back({p + h + "attn.bias", "F32", {1, 1, kPositions, kPositions}, encode(mask.data(), mask.size(), "F32")});
        const float masked = -10000.0f;
        out.push_back({p + h + "attn.masked_bias", "F32", {}, encode(&masked, 1, "F32")});
      }
      conv1d(h + "attn.c_attn.weight");
      ours(h + "attn.c_attn.bias", {3 * d.C});
      conv1d(h + "attn.c_proj.weight");
      ours(h + "attn.c_proj.bias", {d.C});
      ours(h + "ln_2.weight", {d.C});
      ours(h + "ln_2.bias", {d.C});
      conv1d(h + "mlp.c_fc.weight");
      ours(h + "mlp.c_fc.bias", {4 * d.C});
      conv1d(h + "mlp.c_proj.weight");
      ours(h + "mlp.c_proj.bias", {d.C});
    }
    ours("ln_f.weight", {d.C});
    ours("ln_f.bias", {d.C});
    if (r.lm_head) out.push_back({"lm_head.weight", r.dtype, {d.V, d.C}, wte});
    return out;
  }

  void write_config(const std::string& dir) const {
    const ModelDims& d = layout.dims();
    const json config = {{"model_type", "gpt2"},   {"n_layer", d.L},          {"n_head", d.NH},
                         {"n_embd", d.C},          {"n_positions", kPositions}, {"n_ctx", kPositions},
                         {"vocab_size", d.V},      {"n_inner", nullptr},        {"activation_function", "gelu_new"},
                         {"layer_norm_epsilon", 1e-05}};
    write_bytes(dir + "/config.json", config.dump(2));
  }

  void write_hf(const std::string& dir, const Released& r) const {
    fs::create_directories(dir);
    write_config(dir);
    write_safetensors_by_hand(dir + "/model.safetensors", tensors(r));
  }

  // An llm.c model file by train_gpt2.py's write_model: the header, then each tensor kind across
  // all layers, wte padded to Vp rows with zeros, all fp32 (version 3) or all bf16 (version 5).
  void write_llmc(const std::string& path, int version) const {
    const ModelDims& d = layout.dims();
    std::int32_t header[256] = {20240326, version, kPositions, d.V, d.L, d.NH, d.C, d.Vp};
    std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
    const std::string dtype = version == 3 ? "F32" : "BF16";
    auto put = [&](const float* p, size_t n) { bytes += encode(p, n, dtype); };
    put(params.data() + layout.wte(), static_cast<size_t>(d.Vp) * d.C);  // padding rows are zero
    put(wpe_file.data(), wpe_file.size());
    const char* kinds[] = {"ln_1.weight",        "ln_1.bias",       "attn.c_attn.weight", "attn.c_attn.bias",
                           "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
                           "mlp.c_fc.weight",    "mlp.c_fc.bias",   "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    for (const char* kind : kinds) {
      for (int l = 0; l < d.L; ++l) {
        const ParamTensor& t = layout.find("h." + std::to_string(l) + "." + kind);
        put(params.data() + t.offset, t.count);  // (out, in) in llm.c as in our layout
      }
    }
    put(params.data() + layout.lnf_w(), static_cast<size_t>(d.C));
    put(params.data() + layout.lnf_b(), static_cast<size_t>(d.C));
    write_bytes(path, bytes);
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The weights of the model file at `path`, read into host memory; read into a GPU's a piece at a
// time too (pieces of 61 floats: odd, so they end inside tensors and inside wte's padding), which
// must give the same bits.
std::vector<float> load(const std::string& path, const ParamLayout& layout) {
  std::vector<float> out(layout.total(), std::nanf("")), pieces(out);
  const ModelFileInfo info = read_model_file_info(path);
  import_model(info, layout, out.data());
  test::PiecewiseMemory device(61);
  import_model(info, layout, pieces.data(), device.access());
  CHECK(bitwise_equal(pieces, out));
  return out;
}

// Logits (B, T, Vp) of `params` on a fixed batch, CPU backend.
std::vector<float> logits_of(const ModelSpec& spec, const std::vector<float>& params) {
  CpuBackend backend;
  const int B = 2;
  GPT gpt(spec, backend, B);
  backend.upload(gpt.params(), params.data(), params.size());
  std::vector<std::int32_t> tokens(static_cast<size_t>(B) * spec.seq_len);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 37 + 11) % spec.vocab_size);
  gpt.forward(tokens.data(), nullptr, B);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(gpt.dims().Vp));
  backend.download(logits.data(), gpt.logits(), logits.size());
  return logits;
}

}  // namespace

TEST_CASE("a Hugging Face GPT-2 directory in the released layout loads with exactly its values", "[import]") {
  ScratchDir dir;
  const Weights w;
  Released r;
  SECTION("F32, with the transformer. prefix, the attention buffers and lm_head") {
    r.prefix = r.buffers = r.lm_head = true;
  }
  SECTION("F16, without the prefix (the released gpt2's model.safetensors), with the buffers") {
    r.dtype = "F16";
    r.buffers = true;
  }
  SECTION("BF16, with the prefix and lm_head") {
    r.dtype = "BF16";
    r.prefix = r.lm_head = true;
  }
  w.write_hf(dir / "gpt2", r);
  const ModelFileInfo info = read_model_file_info(dir / "gpt2");
  CHECK(info.format == ModelFormat::kHuggingFace);
  CHECK(info.weights == dir / "gpt2/model.safetensors");
  CHECK(info.n_positions == kPositions);
  CHECK(info.vocab_size == 70);
  CHECK(info.tokenizer.empty());
  CHECK(describe(info) == "Hugging Face GPT-2 directory " + dir / "gpt2");
  // seq_len 5 of the 8 positions: wpe's first 5 rows; wte's padding rows zero.
  CHECK(bitwise_equal(load(dir / "gpt2", w.layout), w.params));
}

TEST_CASE("a whole model loads at its full context, and one too large for memory is a runtime failure naming its size",
          "[import]") {
  ScratchDir dir;
  const Weights w;
  w.write_hf(dir / "gpt2", Released{});
  ModelFileInfo info = read_model_file_info(dir / "gpt2");

  const FlatModel flat = load_flat_model(info);
  REQUIRE(flat.layout.dims().T == kPositions);  // every row of wpe, not a context of seq_len
  REQUIRE(flat.params.size() == flat.layout.total());
  for (const ParamTensor& t : flat.layout.tensors()) {
    INFO(t.name);
    const float* got = flat.params.data() + t.offset;
    const float* want = t.name == "wpe.weight" ? w.wpe_file.data() : w.params.data() + w.layout.find(t.name).offset;
    CHECK(std::memcmp(got, want, t.count * sizeof(float)) == 0);
  }

  // 4,000 layers of width 65,536: about 2e14 parameters, 800 TB, more than any address space
  // holds, so the allocation fails however the machine overcommits memory.
  info.n_layer = 4000;
  info.n_embd = 65536;
  info.n_head = 64;
  const double millions = static_cast<double>(ParamLayout(dims_of(info)).total()) / 1e6;
  REQUIRE(millions > 2e8);
  char expected[128];
  std::snprintf(expected, sizeof expected, "out of memory for the %.2fM parameters of ", millions);
  CHECK_THROWS_WITH(load_flat_model(info), std::string(expected) + dir / "gpt2");
  CHECK_THROWS_AS(load_flat_model(info), ModelOutOfMemory);
}

TEST_CASE("llm.c model files written by hand load and give the logits of the same weights", "[import][llmc]") {
  ScratchDir dir;
  const Weights w;
  const std::vector<float> direct = logits_of(w.spec, w.params);
  for (const int version : {3, 5}) {
    INFO("version " << version);
    const std::string path = dir / ("model-v" + std::to_string(version) + ".bin");
    w.write_llmc(path, version);
    const ModelFileInfo info = read_model_file_info(path);
    CHECK(info.format == ModelFormat::kLlmc);
    CHECK(info.llmc_version == version);
    CHECK(info.llmc_padded_vocab == 128);
    const std::vector<float> loaded = load(path, w.layout);
    CHECK(bitwise_equal(loaded, w.params));  // v5 too: the values are exact in bf16
    CHECK(bitwise_equal(logits_of(w.spec, loaded), direct));
  }
}

TEST_CASE("a bad safetensors file is refused with one line naming the file and the tensor", "[import][errors]") {
  ScratchDir dir;
  const Weights w;
  const std::string model = dir / "gpt2/model.safetensors";
  w.write_hf(dir / "gpt2", Released{});
  std::vector<RawTensor> tensors = w.tensors(Released{});
  auto tensor = [&](const std::string& name) -> RawTensor& {
    return *std::find_if(tensors.begin(), tensors.end(), [&](const RawTensor& t) { return t.name == name; });
  };
  std::string expected;
  bool in_headers = true;  // check_model_headers (the launcher's plan) refuses it with the same line
  SECTION("a wrong shape: a Conv1D weight stored (out, in)") {
    std::swap(tensor("h.1.mlp.c_fc.weight").shape[0], tensor("h.1.mlp.c_fc.weight").shape[1]);
    expected = model + ": tensor h.1.mlp.c_fc.weight has shape [32, 8] but the model needs [8, 32]";
  }
  SECTION("an unsupported dtype") {
    tensor("ln_f.bias").dtype = "I32";
    expected = model + ": tensor ln_f.bias has dtype I32, expected F32, F16 or BF16";
  }
  SECTION("a dtype safetensors does not have") {
    tensor("ln_f.bias").dtype = "F24";
    expected = model + ": tensor ln_f.bias: dtype \"F24\" is not a safetensors dtype";
  }
  SECTION("a missing tensor") {
    tensors.erase(std::find_if(tensors.begin(), tensors.end(), [](auto& t) { return t.name == "h.0.ln_2.bias"; }));
    expected = model + ": tensor h.0.ln_2.bias is missing";
  }
  SECTION("a tensor that is not GPT-2's") {
    tensors.push_back({"h.0.mlp.c_gate.weight", "F32", {1}, std::string(4, '\0')});
    expected = model + ": unexpected tensor h.0.mlp.c_gate.weight (not a GPT-2 parameter)";
  }
  SECTION("fewer positions than config.json's n_positions (and than seq_len)") {
    tensor("wpe.weight").shape[0] = 4;
    tensor("wpe.weight").bytes.resize(4 * 8 * 4);
    expected = model + ": tensor wpe.weight has 4 rows (positions) but the model's config gives n_positions 8";
  }
  SECTION("more positions than config.json's n_positions") {
    tensor("wpe.weight").shape[0] = kPositions + 2;
    tensor("wpe.weight").bytes.resize((kPositions + 2) * 8 * 4);
    expected = model + ": tensor wpe.weight has 10 rows (positions) but the model's config gives n_positions 8";
  }
  SECTION("an lm_head that is not wte") {
    RawTensor lm_head = tensor("wte.weight");
    lm_head.name = "lm_head.weight";
    lm_head.bytes[4 * (3 * 8 + 2) + 1] ^= 1;
    tensors.push_back(lm_head);
    expected = model + ": tensor lm_head.weight differs from wte.weight (first at row 3, column 2): the model ties "
                       "its output layer to the token embedding, so an untied lm_head cannot be loaded";
    in_headers = false;  // found in the data
  }
  write_safetensors_by_hand(model, tensors);
  SECTION("truncated") {
    fs::resize_file(model, fs::file_size(model) - 6);
    expected = model + ": truncated: tensor ln_f.bias ends at data byte ";
  }
  SECTION("a header that lies about the offsets") {
    std::string bytes = xtrain::test::read_bytes(model);
    const std::string from = "\"data_offsets\":[0,2240]", to = "\"data_offsets\":[8,2248]";  // wte, shifted
    const size_t at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(), to);
    write_bytes(model, bytes);
    expected = model + ": tensor wte.weight: data_offsets begin at 8, expected 0 (the first tensor); tensors must be "
                       "contiguous";
  }
  REQUIRE(!expected.empty());
  std::vector<float> into(w.layout.total(), -3.0f);
  const std::string error =
      error_message<FileError>([&] { import_model(read_model_file_info(dir / "gpt2"), w.layout, into.data()); });
  CAPTURE(error);
  CHECK(error.rfind(expected, 0) == 0);
  CHECK(error.find('\n') == std::string::npos);
  CHECK(std::all_of(into.begin(), into.end(), [](float x) { return x == -3.0f; }));
  if (in_headers) {
    CHECK(error_message<FileError>([&] { check_model_headers(read_model_file_info(dir / "gpt2"), w.layout); }) ==
          error);
  }
}

TEST_CASE("the header check passes a sound export and refuses one whose data's CRC-32C is wrong", "[import][errors]") {
  ScratchDir dir;
  const Weights w;
  export_hf_directory(dir / "hf", w.layout, w.params.data(), {}, std::nullopt, false);
  CHECK_NOTHROW(check_model_headers(read_model_file_info(dir / "hf"), w.layout));
  std::string bytes = xtrain::test::read_bytes(dir / "hf/model.safetensors");
  bytes[bytes.size() - 7] ^= 0x01;  // a bit of the last tensor's data: no header or size changes
  write_bytes(dir / "hf/model.safetensors", bytes);
  CHECK(error_message<FileError>([&] { check_model_headers(read_model_file_info(dir / "hf"), w.layout); })
            .rfind(dir / "hf/model.safetensors" + ": corrupt: the data's CRC-32C is ", 0) == 0);
}

TEST_CASE("16-bit floats: F16 and BF16 read exactly, bf16 written to nearest even", "[import]") {
  CHECK(f16_to_float(0x3c00) == 1.0f);
  CHECK(f16_to_float(0xc000) == -2.0f);
  CHECK(f16_to_float(0x7bff) == 65504.0f);                 // the largest half
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));    // the smallest subnormal
  CHECK(f16_to_float(0x03ff) == std::ldexp(1023.0f, -24)); // the largest subnormal
  CHECK(std::signbit(f16_to_float(0x8000)));
  CHECK(f16_to_float(0x7c00) == INFINITY);
  CHECK(std::isnan(f16_to_float(0x7e00)));
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(bf16_to_float(0xc1a0) == -20.0f);
  // bf16 keeps 7 mantissa bits: near 1 its step is 2^-7.
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // half a step: tie, to even (down)
  CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // 1.5 steps: tie, to even (up)
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);  // just above the tie
  CHECK(float_to_bf16(-20.0f) == 0xc1a0);
  CHECK(float_to_bf16(std::nextafter(INFINITY, 0.0f)) == 0x7f80);  // the largest float rounds to infinity
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}
