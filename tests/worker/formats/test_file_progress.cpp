// WorkProgress (common/work_progress.hpp) as file work advances it (worker/formats/file_io.hpp):
// long reads, writes, checksums and safetensors loads run the hook of their own thread once per
// `every_bytes`, so that the worker's heartbeat shows a rank writing or loading a large checkpoint
// as alive.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "tests/worker/test_files.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/safetensors.hpp"

using namespace xtrain;
using xtrain::test::ScratchDir;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;
// The smallest interval for which every interval crossed is one beat: reads and writes advance in
// pieces of at most 16 MiB.
constexpr std::uint64_t kEvery = 16 * kMiB;

// Writes `bytes` bytes to `path` in one call, as a checkpoint's tensor goes out.
void write_in_one_call(const std::string& path, std::uint64_t bytes) {
  const std::string data(bytes, 'x');
  OutputFile out(path);
  out.write(data.data(), data.size());
  out.finish();
}

}  // namespace

TEST_CASE("file progress: a hook per every_bytes written, read and checksummed, on this thread only",
          "[file_io]") {
  ScratchDir dir;
  const std::string path = dir / "big.bin";
  int beats = 0;
  SECTION("written in one call of 40 MiB: 2 beats at 16 MiB") {
    const WorkProgress progress([&] { ++beats; }, kEvery);
    write_in_one_call(path, 40 * kMiB);
    CHECK(beats == 2);
  }
  SECTION("read back whole, and checksummed") {
    write_in_one_call(path, 40 * kMiB);
    const WorkProgress progress([&] { ++beats; }, kEvery);
    std::vector<char> back(40 * kMiB);
    InputFile(path).read_at(0, back.data(), back.size());
    CHECK(beats == 2);
    checksum_file(path);
    CHECK(beats == 5);  // 80 MiB in all: what the read left over counts towards the next beat
  }
  SECTION("a safetensors file: written, then its digest verified on load") {
    const std::vector<float> values(48 * kMiB / sizeof(float), 0.5f);
    {
      const WorkProgress progress([&] { ++beats; }, kEvery);
      write_safetensors(path, {{"t", {static_cast<std::int64_t>(values.size())}, values.data()}}, {});
    }
    CHECK(beats == 3);  // one pass: the write, with the digest taken on the way
    beats = 0;
    const WorkProgress progress([&] { ++beats; }, kEvery);
    SafetensorsFile(path).load();
    CHECK(beats == 3);  // the digest over the mapping: the data's first read from disk
  }
  SECTION("another thread's I/O does not beat for this one; an inner hook stands in for the outer") {
    const WorkProgress outer([&] { ++beats; }, kEvery);
    std::thread([&] { write_in_one_call(path, 64 * kMiB); }).join();
    CHECK(beats == 0);
    int inner_beats = 0;
    {
      const WorkProgress inner([&] { ++inner_beats; }, kEvery);
      write_in_one_call(path, 32 * kMiB);
    }
    CHECK((inner_beats == 2 && beats == 0));
    write_in_one_call(path, 32 * kMiB);
    CHECK(beats == 2);
  }
  SECTION("with no hook installed, I/O runs as before") {
    write_in_one_call(path, 2 * kMiB);
    CHECK(checksum_file(path).bytes == 2 * kMiB);
    CHECK(beats == 0);
  }
}
