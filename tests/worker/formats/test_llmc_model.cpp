// llm.c's model file: the bytes follow train_gpt2.c's order (checked at offsets computed here
// from llm.c's own size table), export and import round-trip (fp32 exactly, bf16 to the rounded
// values), and bad files are refused.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "tests/worker/test_files.hpp"
#include "worker/data/batch_sampler.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/llmc_model.hpp"
#include "worker/formats/model_io.hpp"
#include "tests/worker/gpt_test_util.hpp"

using namespace xtrain;
using xtrain::test::error_message;
using xtrain::test::model_spec;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;

namespace {

ModelSpec small_model() {
  return model_spec(3, 2, 8, 5, 70);  // Vp = 128
}

std::vector<float> distinct_floats(size_t n) {
  Xoshiro256 rng(99);
  std::vector<float> out(n);
  for (auto& x : out) x = static_cast<float>(rng.next() >> 40) + 0.5f;  // exact, and nonzero
  return out;
}

void import(const std::string& path, const ParamLayout& layout, float* params) {
  import_model(read_model_file_info(path), layout, params);
}

float float_at(const std::string& bytes, size_t offset) {
  float x;
  std::memcpy(&x, bytes.data() + offset, 4);
  return x;
}

std::int32_t int_at(const std::string& bytes, size_t index) {
  std::int32_t x;
  std::memcpy(&x, bytes.data() + 4 * index, 4);
  return x;
}

}  // namespace

TEST_CASE("the llm.c model file has llm.c's header and tensor order", "[llmc]") {
  ScratchDir dir;
  const ParamLayout layout(ModelDims::from(small_model()));
  const std::vector<float> params = distinct_floats(layout.total());
  export_llmc_model(dir / "model.bin", layout, params.data());
  const std::string bytes = read_bytes(dir / "model.bin");

  const size_t L = 3, C = 8, T = 5, Vp = 128;
  CHECK(int_at(bytes, 0) == 20240326);
  CHECK(int_at(bytes, 1) == 3);
  CHECK(int_at(bytes, 2) == 5);    // maxT
  CHECK(int_at(bytes, 3) == 70);   // V
  CHECK(int_at(bytes, 4) == 3);    // L
  CHECK(int_at(bytes, 5) == 2);    // NH
  CHECK(int_at(bytes, 6) == 8);    // C
  CHECK(int_at(bytes, 7) == 128);  // Vp
  for (size_t i = 8; i < 256; ++i) REQUIRE(int_at(bytes, i) == 0);

  // llm.c's param_sizes, in its order: where each tensor kind starts in the file.
  const size_t sizes[16] = {
      Vp * C,         // wte
      T * C,          // wpe
      L * C,          // ln1w
      L * C,          // ln1b
      L * 3 * C * C,  // qkvw
      L * 3 * C,      // qkvb
      L * C * C,      // attprojw
      L * C,          // attprojb
      L * C,          // ln2w
      L * C,          // ln2b
      L * 4 * C * C,  // fcw
      L * 4 * C,      // fcb
      L * C * 4 * C,  // fcprojw
      L * C,          // fcprojb
      C,              // lnfw
      C,              // lnfb
  };
  size_t start[16];
  size_t total = 0;
  for (int i = 0; i < 16; ++i) start[i] = 1024 + 4 * total, total += sizes[i];
  REQUIRE(bytes.size() == 1024 + 4 * total);
  CHECK(total == layout.total());

  const float* p = params.data();
  CHECK(float_at(bytes, start[0]) == p[layout.wte()]);
  CHECK(float_at(bytes, start[0] + 4 * (Vp * C - 1)) == p[layout.wte() + Vp * C - 1]);  // last padding row
  CHECK(float_at(bytes, start[1]) == p[layout.wpe()]);
  CHECK(float_at(bytes, start[2]) == p[layout.layer(0).ln1_w]);              // ln1w, layer 0
  CHECK(float_at(bytes, start[2] + 4 * C) == p[layout.layer(1).ln1_w]);      // ln1w, layer 1
  CHECK(float_at(bytes, start[3] + 4 * 2 * C) == p[layout.layer(2).ln1_b]);  // ln1b, layer 2
  CHECK(float_at(bytes, start[4] + 4 * (3 * C * C + 5)) == p[layout.layer(1).qkv_w + 5]);
  CHECK(float_at(bytes, start[5] + 4 * 3 * C) == p[layout.layer(1).qkv_b]);
  CHECK(float_at(bytes, start[6] + 4 * (2 * C * C + C)) == p[layout.layer(2).attn_proj_w + C]);
  CHECK(float_at(bytes, start[7]) == p[layout.layer(0).attn_proj_b]);
  CHECK(float_at(bytes, start[8] + 4) == p[layout.layer(0).ln2_w + 1]);
  CHECK(float_at(bytes, start[9] + 4 * C) == p[layout.layer(1).ln2_b]);
  CHECK(float_at(bytes, start[10] + 4 * 4 * C * C) == p[layout.layer(1).fc_w]);
  CHECK(float_at(bytes, start[11] + 4 * (2 * 4 * C + 31)) == p[layout.layer(2).fc_b + 31]);
  CHECK(float_at(bytes, start[12] + 4 * (C * 4 * C + 7)) == p[layout.layer(1).fc_proj_w + 7]);
  CHECK(float_at(bytes, start[13] + 4 * (2 * C + C - 1)) == p[layout.layer(2).fc_proj_b + C - 1]);
  CHECK(float_at(bytes, start[14]) == p[layout.lnf_w()]);
  CHECK(float_at(bytes, start[15] + 4 * (C - 1)) == p[layout.lnf_b() + C - 1]);
}

// A model's parameters: distinct values, and zero in wte's padding rows (which never train).
std::vector<float> model_params(const ParamLayout& layout) {
  std::vector<float> params = distinct_floats(layout.total());
  const ModelDims& d = layout.dims();
  std::fill(params.begin() + static_cast<long>(layout.wte()) + static_cast<long>(d.V) * d.C,
            params.begin() + static_cast<long>(layout.wte()) + static_cast<long>(d.Vp) * d.C, 0.0f);
  return params;
}

TEST_CASE("llm.c model export and import round-trip bit for bit", "[llmc]") {
  ScratchDir dir;
  const ParamLayout layout(ModelDims::from(small_model()));
  const std::vector<float> params = model_params(layout);
  export_llmc_model(dir / "model.bin", layout, params.data());
  std::vector<float> back(layout.total(), std::nanf(""));
  import(dir / "model.bin", layout, back.data());
  CHECK(std::memcmp(back.data(), params.data(), params.size() * 4) == 0);

  SECTION("a shorter seq_len takes the first rows of wpe") {
    ModelSpec shorter = small_model();
    shorter.seq_len = 3;
    const ParamLayout short_layout(ModelDims::from(shorter));
    std::vector<float> got(short_layout.total(), std::nanf(""));
    import(dir / "model.bin", short_layout, got.data());
    CHECK(std::memcmp(got.data() + short_layout.wpe(), params.data() + layout.wpe(), 4 * 3 * 8) == 0);
    CHECK(std::memcmp(got.data() + short_layout.lnf_w(), params.data() + layout.lnf_w(),
                      4 * (got.size() - short_layout.lnf_w())) == 0);
  }
  SECTION("version 5 holds every value rounded to bf16, and imports as those values") {
    export_llmc_model(dir / "model16.bin", layout, params.data(), kLlmcVersionBf16);
    const std::string bytes = read_bytes(dir / "model16.bin");
    CHECK(int_at(bytes, 1) == 5);
    CHECK(bytes.size() == 1024 + 2 * layout.total());
    std::vector<float> got(layout.total(), std::nanf(""));
    import(dir / "model16.bin", layout, got.data());
    for (size_t i = 0; i < params.size(); ++i) REQUIRE(xtrain::test::is_nearest_bf16(got[i], params[i]));
  }

  SECTION("a file padded to another Vp gives the real rows and zero padding") {
    const std::string bytes = read_bytes(dir / "model.bin");
    const size_t C = 8, V = 70, Vp = 128, file_Vp = 256;
    std::string other = bytes.substr(0, 1024 + 4 * V * C);
    std::memcpy(other.data() + 4 * 7, &file_Vp, 4);
    other += std::string(4 * (file_Vp - V) * C, '\x7f');  // the file's own padding: never read
    other += bytes.substr(1024 + 4 * Vp * C);
    write_bytes(dir / "other.bin", other);
    std::vector<float> got(layout.total(), 1.0f);
    import(dir / "other.bin", layout, got.data());
    CHECK(std::memcmp(got.data(), params.data(), 4 * V * C) == 0);
    CHECK(std::all_of(got.begin() + V * C, got.begin() + Vp * C, [](float x) { return x == 0.0f; }));
    CHECK(std::memcmp(got.data() + Vp * C, params.data() + Vp * C, 4 * (params.size() - Vp * C)) == 0);
  }
}

TEST_CASE("a bad llm.c model file is refused with one line and loads nothing", "[llmc][errors]") {
  ScratchDir dir;
  const ParamLayout layout(ModelDims::from(small_model()));
  const std::vector<float> params = distinct_floats(layout.total());
  const std::string path = dir / "model.bin";
  export_llmc_model(path, layout, params.data());
  const std::string good = read_bytes(path);
  auto with_int = [&](size_t index, std::int32_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + 4 * index, &value, 4);
    write_bytes(path, bytes);
  };
  ParamLayout target = layout;
  std::string expected;

  SECTION("missing") {
    std::filesystem::remove(path);
    expected = path + ": No such file or directory";
  }
  SECTION("wrong magic") {
    with_int(0, 20240520);
    expected = path +
               ": not an llm.c model file: magic is 20240520, expected 20240326 (model.init_from takes a Hugging "
               "Face GPT-2 directory, a checkpoint directory or an llm.c model file)";
  }
  SECTION("an unknown version") {
    with_int(1, 4);
    expected = path + ": llm.c model file version is 4, expected 3 (fp32) or 5 (bf16)";
  }
  SECTION("a bf16 header on fp32 data") {
    with_int(1, 5);
    expected = path + ": size is " + std::to_string(good.size()) + " bytes but its header's shape needs " +
               std::to_string(1024 + (good.size() - 1024) / 2);
  }
  SECTION("n_embd not a multiple of n_head") {
    with_int(5, 3);
    expected = path + ": n_embd 8 is not a multiple of n_head 3";
  }
  SECTION("another width than the spec") {
    ModelSpec wide = small_model();
    wide.n_embd = 16;
    target = ParamLayout(ModelDims::from(wide));
    expected = path + ": the file has model.n_embd 8 but the model being loaded has 16";
  }
  SECTION("a longer sequence than the file has positions for") {
    ModelSpec longer = small_model();
    longer.seq_len = 6;
    target = ParamLayout(ModelDims::from(longer));
    expected = path + ": the file has position embeddings for 5 tokens but model.seq_len is 6";
  }
  SECTION("truncated") {
    write_bytes(path, good.substr(0, good.size() - 4));
    expected = path + ": truncated: size is " + std::to_string(good.size() - 4) +
               " bytes but its header's shape needs " + std::to_string(good.size());
  }
  SECTION("cut inside the header") {
    write_bytes(path, good.substr(0, 100));
    expected = path + ": truncated: 100 bytes, less than the llm.c model header (1024)";
  }
  std::vector<float> into(target.total(), -3.0f);
  CHECK(error_message<FileError>([&] { import(path, target, into.data()); }) == expected);
  CHECK(std::all_of(into.begin(), into.end(), [](float x) { return x == -3.0f; }));
}

TEST_CASE("export replaces the file atomically and leaves no temporary behind", "[llmc]") {
  ScratchDir dir;
  const ParamLayout layout(ModelDims::from(small_model()));
  std::vector<float> params = model_params(layout);
  export_llmc_model(dir / "model.bin", layout, params.data());
  params[layout.lnf_b()] = -1.0f;
  export_llmc_model(dir / "model.bin", layout, params.data());
  std::vector<float> back(layout.total());
  import(dir / "model.bin", layout, back.data());
  CHECK(back[layout.lnf_b()] == -1.0f);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
  CHECK(error_message<FileError>([&] {
          export_llmc_model(dir / "no/such/dir/model.bin", layout, params.data());
        }).rfind(dir / "no/such/dir/model.bin.tmp-", 0) == 0);
}
