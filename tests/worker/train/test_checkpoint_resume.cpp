// Which checkpoint a resume or a model's use takes, and what is read to choose it: the newest
// intact one, a damaged one skipped (a flipped bit anywhere, a truncated file, a step that
// disagrees with the name), an explicit path refused naming the file, and each file read once.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/worker/test_files.hpp"
#include "tests/worker/train/checkpoint_model.hpp"
#include "worker/train/checkpoint.hpp"

using namespace xtrain;
using namespace xtrain::test;
namespace fs = std::filesystem;

namespace {

// Bytes this process has read by read(2) and pread(2) so far (mapped pages are not counted).
std::uint64_t bytes_read_by_calls() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  FAIL("no rchar in /proc/self/io");
  return 0;
}

// Flips one bit of the file, `from_end` bytes before its end: the size stays.
void flip(const std::string& path, size_t from_end) {
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - from_end] ^= 0x10;
  write_bytes(path, bytes);
}

}  // namespace

TEST_CASE("resume picks the newest intact checkpoint, never a partial one", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  CHECK_FALSE(find_resume_checkpoint(run.path(), "auto"));  // no checkpoints directory yet
  model.save(run.path(), 1);
  model.save(run.path(), 2);
  CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000002");
  CHECK_FALSE(find_resume_checkpoint(run.path(), "never"));

  // A writer killed before its rename: complete-looking files under a temporary name.
  fs::copy(run / "checkpoints/step-00000002", run / "checkpoints/step-00000003.tmp-777");
  fs::create_directories(run / "checkpoints/step-00000004.tmp-778");
  write_bytes(run / "checkpoints/not-a-checkpoint", "x");
  CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000002");

  SECTION("a truncated file makes auto fall back to the one before") {
    truncate_file(run / "checkpoints/step-00000002/optimizer.safetensors", 100);
    CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000001");
    fs::remove(run / "checkpoints/step-00000001/state.json");
    CHECK_FALSE(find_resume_checkpoint(run.path(), "auto"));
  }
  SECTION("an explicit path must exist and be intact") {
    CHECK(find_resume_checkpoint(run.path(), run / "checkpoints/step-00000001") == run / "checkpoints/step-00000001");
    const std::string missing = run / "checkpoints/step-00000007";
    CHECK(error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), missing); }) ==
          "checkpoint " + missing + ": No such file or directory");
    CHECK(error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), "~/ck/step-00000001"); }) ==
          "checkpoint ~/ck/step-00000001: No such file or directory; \"~\" is expanded by shells, not in a spec or "
          "a quoted argument: write " + std::string(std::getenv("HOME")) + "/ck/step-00000001");
    // A run directory or its checkpoints/ named instead of a checkpoint: which one to give.
    const std::string newest = ", whose newest checkpoint is " + run / "checkpoints/step-00000002" +
                               ": set checkpoint.resume to one checkpoint";
    CHECK(error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), run.path()); }) ==
          "checkpoint " + run.path() + ": is a run directory" + newest);
    CHECK(error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), run / "checkpoints"); }) ==
          "checkpoint " + run / "checkpoints" + ": is a run's checkpoints/ folder" + newest);
    const std::string cut = run / "checkpoints/step-00000001";
    truncate_file(cut + "/model.safetensors", 4);
    CHECK(error_message<CheckpointError>([&] {
            find_resume_checkpoint(run.path(), cut);
          }).rfind("checkpoint " + cut + ": model.safetensors: truncated: tensor ", 0) == 0);
  }
}

TEST_CASE("a flipped bit (size unchanged): auto falls back, and an explicit path is refused naming the file",
          "[checkpoint][errors]") {
  ScratchDir run;
  CheckpointModel model;
  model.save(run.path(), 1);
  const std::string newest = model.save(run.path(), 2);
  SECTION("in the weights' data") { flip(newest + "/model.safetensors", 100); }
  SECTION("in the optimizer's data") { flip(newest + "/optimizer.safetensors", 5); }
  SECTION("in config.json") { flip(newest + "/config.json", 3); }
  SECTION("in the tokenizer's merges.txt") { flip(newest + "/merges.txt", 2); }
  SECTION("in the optimizer's header, still valid JSON") {  // adam_step 9 becomes 8: no data changed
    std::string bytes = read_bytes(newest + "/optimizer.safetensors");
    const size_t at = bytes.find("\"adam_step\":\"9\"");
    REQUIRE(at != std::string::npos);
    bytes[at + 13] ^= 0x01;
    write_bytes(newest + "/optimizer.safetensors", bytes);
  }
  SECTION("in state.json, still valid JSON") {  // "step": 2 becomes 3
    std::string bytes = read_bytes(newest + "/state.json");
    const size_t at = bytes.find("\"step\": 2");
    REQUIRE(at != std::string::npos);
    bytes[at + 8] ^= 0x01;
    write_bytes(newest + "/state.json", bytes);
    REQUIRE(nlohmann::json::parse(bytes)["step"] == 3);
  }
  CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000001");
  const std::string error = error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), newest); });
  INFO(error);
  CHECK(error.rfind("checkpoint " + newest + ": ", 0) == 0);
  CHECK(error.find(": damaged: its CRC-32C is ") != std::string::npos);

  // A rank's resume checks the tensor files as they load, and falls back or refuses alike.
  std::vector<float> p(model.layout.total(), -7.0f), m(p), v(p);
  JobSpec spec = model.spec;
  const auto resume = [&] {
    return resume_from_checkpoint(run.path(), spec, model.layout, 12345, p.data(), m.data(), v.data());
  };
  const auto resumed = resume();
  REQUIRE(resumed);
  CHECK(resumed->dir == run / "checkpoints/step-00000001");
  CHECK(resumed->state.step == 1);
  CHECK(p == model.params);
  CHECK(v == model.v);
  p.assign(p.size(), -7.0f);
  spec.checkpoint.resume = newest;
  const std::string loading = error_message<CheckpointDamage>([&] { resume(); });
  INFO(loading);
  CHECK(loading.rfind(error.substr(0, error.find(": damaged")), 0) == 0);  // the same checkpoint and file
  CHECK((loading.find(": damaged: its CRC-32C is ") != std::string::npos ||
         loading.find(": corrupt: the data's CRC-32C is ") != std::string::npos));
  CHECK(std::all_of(p.begin(), p.end(), [](float x) { return x == -7.0f; }));
}

TEST_CASE("a rank's resume reads each file of the checkpoint once", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 4);
  const std::uint64_t tensor_bytes =
      fs::file_size(dir + "/model.safetensors") + fs::file_size(dir + "/optimizer.safetensors");
  std::vector<float> p(model.layout.total()), m(p), v(p);

  // The launcher's choice reads every file whole, and a load maps the tensor files again.
  std::uint64_t before = bytes_read_by_calls();
  REQUIRE(find_resume_checkpoint(run.path(), "auto") == dir);
  load_checkpoint(dir, model.spec, model.layout, 12345, p.data(), m.data(), v.data());
  const std::uint64_t twice = bytes_read_by_calls() - before;
  // The rank's: the small files and headers, then the tensor files only as they load.
  before = bytes_read_by_calls();
  REQUIRE(resume_from_checkpoint(run.path(), model.spec, model.layout, 12345, p.data(), m.data(), v.data()));
  const std::uint64_t once = bytes_read_by_calls() - before;
  CHECK(p == model.params);
  INFO(twice << " against " << once << " bytes read, " << tensor_bytes << " of them in tensor files");
  // Exactly the tensor files less, but for the few bytes' difference in /proc/self/io's own text.
  CHECK(twice - once + 16 >= tensor_bytes);
  CHECK(twice - once <= tensor_bytes + 16);
}

TEST_CASE("a checkpoint whose step disagrees with its directory's name is skipped", "[checkpoint][errors]") {
  ScratchDir run;
  CheckpointModel model;
  model.save(run.path(), 2);
  fs::copy(run / "checkpoints/step-00000002", run / "checkpoints/step-00000003");  // a copy under another name
  CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000002");
  const std::string copy = run / "checkpoints/step-00000003";
  CHECK(error_message<CheckpointError>([&] { find_resume_checkpoint(run.path(), copy); }) ==
        "checkpoint " + copy + ": state.json: step is 2 but the directory's name says 3");
  fs::copy(run / "checkpoints/step-00000002", run / "best");  // any other name is not checked
  CHECK(find_resume_checkpoint(run.path(), run / "best") == run / "best");
}

TEST_CASE("a checkpoint written before checksums were recorded still resumes", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 3);
  nlohmann::json state = nlohmann::json::parse(read_bytes(dir + "/state.json"));
  state.erase("files");
  state.erase("crc32c");
  state["format_version"] = 1;
  write_bytes(dir + "/state.json", state.dump(2));
  CHECK(find_resume_checkpoint(run.path(), "auto") == dir);
  CHECK(find_resume_checkpoint(run.path(), dir) == dir);
  std::vector<float> p(model.layout.total()), m(p), v(p);
  CHECK(load_checkpoint(dir, model.spec, model.layout, 12345, p.data(), m.data(), v.data()).step == 3);
  CHECK(p == model.params);
}

TEST_CASE("a model's use of a run directory skips damaged weights but never reads the optimizer's state",
          "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  model.save(run.path(), 1);
  const std::string newest = model.save(run.path(), 2);
  std::uint64_t before = bytes_read_by_calls();
  REQUIRE(find_resume_checkpoint(run.path(), "auto") == newest);
  const std::uint64_t resume_reads = bytes_read_by_calls() - before;
  before = bytes_read_by_calls();
  REQUIRE(find_model_checkpoint(run.path()) == newest);
  const std::uint64_t model_reads = bytes_read_by_calls() - before;
  INFO(resume_reads << " bytes read for a resume, " << model_reads << " for a model's use");
  CHECK(resume_reads - model_reads + 16 >= fs::file_size(newest + "/optimizer.safetensors"));

  flip(newest + "/optimizer.safetensors", 5);
  CHECK(find_resume_checkpoint(run.path(), "auto") == run / "checkpoints/step-00000001");
  CHECK(find_model_checkpoint(run.path()) == newest);

  flip(newest + "/model.safetensors", 5);
  CHECK(find_model_checkpoint(run.path()) == run / "checkpoints/step-00000001");
  fs::remove(run / "checkpoints/step-00000001/config.json");
  CHECK_FALSE(find_model_checkpoint(run.path()));
}
