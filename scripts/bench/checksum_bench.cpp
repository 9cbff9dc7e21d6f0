// What checkpoint checksums cost: CRC-32C (worker/formats/crc32c.hpp; SSE4.2 when the CPU has it, else
// the table-driven version) against the FNV-1a digest the worker already uses, over a buffer of
// --mb MiB; then the checkpoint's write path (OutputFile: write, checksum on the way, fsync)
// and the verification a resume makes (checksum_file: read back and checksum), on a file in
// --dir, after one untimed write of the same size; then a checkpoint's model file written whole
// (write_safetensors: the data's CRC-32C for its header, the write and the file's CRC-32C) and
// loaded back with the data's CRC-32C verified. Prints a table. Usage: xtrain-bench-checksum [--mb N] [--dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <unistd.h>

#include "worker/formats/crc32c.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/safetensors.hpp"
#include "worker/train/run_report.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) try {
  using namespace xtrain;
  long mb = 500;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) mb = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    else throw std::invalid_argument(std::string("unknown argument ") + argv[i]);
  }
  const size_t bytes = static_cast<size_t>(mb) << 20;
  std::vector<unsigned char> data(bytes);
  std::uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < bytes; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&data[i], &x, std::min<size_t>(8, bytes - i));
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("checkpoint checksums, %ld MiB\n| what | time | GB/s |\n| --- | --- | --- |\n", mb);
  const auto row = [&](const char* what, double s) { std::printf("| %s | %.3f s | %.2f |\n", what, s, gb / s); };

  auto t0 = Clock::now();
  const std::uint32_t crc = crc32c(data.data(), bytes);
  row("CRC-32C (the CPU's best)", seconds(t0));
  t0 = Clock::now();
  const std::uint32_t portable = crc32c_portable(data.data(), bytes);
  row("CRC-32C (portable tables)", seconds(t0));
  t0 = Clock::now();
  const std::string fnv = fnv1a_hex(data.data(), bytes);
  row("FNV-1a 64 (the parameter digest)", seconds(t0));
  if (crc != portable) throw std::runtime_error("the two CRC-32C implementations disagree");

  const std::string path = dir + "/xtrain-bench-checksum-" + std::to_string(::getpid()) + ".bin";
  // A first write of this size into the page cache also pays for memory the machine has not
  // handed out yet (on the build VMs 1.8 s against 0.35 s for 500 MB with dd, conv=fsync): one
  // write first, not timed, so that the rows below compare the writes themselves.
  {
    OutputFile warm(path);
    warm.write(data.data(), bytes);
    warm.finish();
  }
  t0 = Clock::now();
  {
    OutputFile out(path);
    out.write(data.data(), bytes);
    out.finish();
    if (out.checksum().crc32c != crc) throw std::runtime_error("the writer's checksum differs");
  }
  row("write + fsync, checksummed on the way", seconds(t0));
  t0 = Clock::now();
  const FileChecksum read_back = checksum_file(path);
  row("read back + checksum (resume's check)", seconds(t0));
  ::unlink(path.c_str());
  if (read_back.crc32c != crc) throw std::runtime_error("the file's checksum differs");

  // The data as GPT-2's largest matrices, (768, 3072) floats each, the last one shorter.
  std::vector<SafetensorsTensor> tensors;
  const auto* floats = reinterpret_cast<const float*>(data.data());
  for (size_t at = 0, n = bytes / sizeof(float); at < n; at += 768 * 3072) {
    const auto count = static_cast<std::int64_t>(std::min<size_t>(768 * 3072, n - at));
    tensors.push_back({"t" + std::to_string(tensors.size()), {count}, floats + at});
  }
  t0 = Clock::now();
  const FileChecksum written = write_safetensors(path, tensors, {});
  row("write_safetensors + fsync (data and file CRC-32C, one pass)", seconds(t0));
  t0 = Clock::now();
  SafetensorsFile file(path);
  file.load();
  row("load a safetensors file, its data's CRC-32C verified", seconds(t0));
  if (checksum_file(path).crc32c != written.crc32c) throw std::runtime_error("write_safetensors' checksum differs");
  ::unlink(path.c_str());
  std::printf("(FNV-1a %s, CRC-32C %s)\n", fnv.c_str(), crc32c_hex(crc).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "xtrain-bench-checksum: %s\n", e.what());
  return 1;
}
