// Test support for the file formats: a fresh directory per test case (removed with everything in
// it when the case ends), whole-file reads and writes, and the message of an expected error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace xtrain::test {

class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/xtrain-test-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// what() of the E that `f` throws, or "(no error)".
template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

// True when `got` is a bfloat16 value (a float whose low 16 bits are zero) and no other bfloat16
// lies closer to `exact`: the rounding llm.c's version 5 files hold.
inline bool is_nearest_bf16(float got, float exact) {
  std::uint32_t bits;
  std::memcpy(&bits, &got, 4);
  if ((bits & 0xffff) != 0) return false;
  if (got == exact) return true;
  for (const std::uint32_t neighbour : {bits - 0x10000u, bits + 0x10000u}) {
    float other;
    std::memcpy(&other, &neighbour, 4);
    if (std::fabs(other - exact) < std::fabs(got - exact)) return false;
  }
  return true;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace xtrain::test
