// The safetensors format (worker/formats/safetensors.*): our writer's layout, byte for byte, and the
// reader's refusal of every kind of damage, with one message naming the file and the tensor.
#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/worker/test_files.hpp"
#include "tests/worker/piecewise_memory.hpp"
#include "worker/formats/crc32c.hpp"
#include "worker/formats/safetensors.hpp"
#include "worker/formats/transpose.hpp"

using namespace xtrain;
using xtrain::test::error_message;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;

namespace {

// A safetensors file written by hand: header text as given, then `data_bytes` zero bytes.
void write_raw_safetensors(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(header.size() >> (8 * i));
  write_bytes(path, bytes + header + std::string(data_bytes, '\0'));
}

// The check that files written before the CRC-32C carry ("xtrain_digest"), written out here from
// its definition: over the data's little-endian 32-bit words, h = (h ^ w) * 0x9e3779b97f4a7c15
// from FNV's offset basis, then h ^ (h >> 31) as 16 hex digits.
std::string legacy_digest(const std::string& data) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i + 4 <= data.size(); i += 4) {
    std::uint32_t w = 0;
    for (int b = 0; b < 4; ++b) w |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[i + b])) << (8 * b);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h ^ (h >> 31)));
  return hex;
}

}  // namespace

TEST_CASE("safetensors round-trips tensors and metadata in the documented layout", "[safetensors]") {
  ScratchDir dir;
  // Distinct values (a misplaced copy shows), some not representable in fewer bits.
  const std::vector<float> a = {0.1f, -2.5f, 3.0e-8f, 1234.5f, -0.75f, 7.0f}, b = {1.0f / 3, -1e20f, 0.0f, 2.0f, -9.5f},
                           c = {42.0f};
  write_safetensors(dir / "t.safetensors", {{"a", {2, 3}, a.data()}, {"b.weight", {5}, b.data()}, {"c", {}, c.data()}},
                    {{"format", "pt"}, {"note", "hello"}});

  const std::string bytes = read_bytes(dir / "t.safetensors");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes.size() == 8 + n + 4 * (6 + 5 + 1));
  const auto header = nlohmann::json::parse(bytes.substr(8, n));  // trailing spaces are JSON whitespace
  CHECK(header["a"]["dtype"] == "F32");
  CHECK(header["a"]["shape"] == nlohmann::json({2, 3}));
  CHECK(header["a"]["data_offsets"] == nlohmann::json({0, 24}));
  CHECK(header["b.weight"]["data_offsets"] == nlohmann::json({24, 44}));
  CHECK(header["__metadata__"]["note"] == "hello");
  CHECK(std::memcmp(bytes.data() + 8 + n, a.data(), 24) == 0);
  const std::string data = bytes.substr(8 + n);
  CHECK(header["__metadata__"]["xtrain_crc32c"] == crc32c_hex(crc32c(data.data(), data.size())));

  SafetensorsFile file(dir / "t.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  REQUIRE(file.tensors().size() == 3);
  CHECK(file.tensors()[1].name == "b.weight");
  file.load();
  std::vector<float> a2(6), b2(5), c2(1);
  file.copy("a", {2, 3}, a2.data());
  file.copy("b.weight", {5}, b2.data());
  file.copy("c", {}, c2.data());
  CHECK(a2 == a);
  CHECK(b2 == b);
  CHECK(c2 == c);
}

TEST_CASE("a transposed tensor is written as its transpose, block by block, around plain ones", "[safetensors]") {
  ScratchDir dir;
  // (1000, 300) in the file, from a (300, 1000) matrix: 300 floats a row, so the writer's 1 MiB
  // blocks hold 873 rows, and the last block is short (127 rows).
  constexpr int kRows = 1000, kCols = 300;
  std::vector<float> source(static_cast<size_t>(kRows) * kCols);  // (kCols, kRows)
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const std::vector<float> before = {1.5f, -2.0f}, after = {3.25f};
  write_safetensors(dir / "t.safetensors",
                    {{"before", {2}, before.data()},
                     {"w", {kRows, kCols}, source.data(), /*transposed=*/true},
                     {"after", {1}, after.data()}},
                    {});
  SafetensorsFile file(dir / "t.safetensors");
  file.load();  // verifies the CRC-32C, computed over the same blocks
  std::vector<float> w(source.size()), b(2), a(1);
  file.copy("w", {kRows, kCols}, w.data());
  file.copy("before", {2}, b.data());
  file.copy("after", {1}, a.data());
  bool transposed = true;
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      transposed = transposed && w[static_cast<size_t>(r) * kCols + c] == source[static_cast<size_t>(c) * kRows + r];
    }
  }
  CHECK(transposed);
  CHECK(b == before);
  CHECK(a == after);
}

TEST_CASE("transpose: every element lands at its mirror, with row strides and sizes that are no multiple of 16",
          "[safetensors]") {
  // A (37, 23) corner of a matrix 41 floats a row, into a (23, 37) corner of one 40 floats a row;
  // what lies outside the corner stays untouched.
  constexpr size_t kRows = 37, kCols = 23, kInStride = 41, kOutStride = 40;
  std::vector<float> in(kRows * kInStride), out(kCols * kOutStride, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  transpose(in.data(), kRows, kCols, kInStride, out.data(), kOutStride);
  size_t wrong = 0;
  for (size_t c = 0; c < kCols; ++c) {
    for (size_t r = 0; r < kOutStride; ++r) {
      const float expected = r < kRows ? in[r * kInStride + c] : -1.0f;
      wrong += out[c * kOutStride + r] != expected;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("tensors in memory the host cannot address are written a piece at a time, byte for byte as from the host's",
          "[safetensors]") {
  ScratchDir dir;
  std::vector<float> plain(2500), square(200 * 300);  // square: (300, 200) in memory, (200, 300) in the file
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<float>(i) * 0.25f - 3.0f;
  for (size_t i = 0; i < square.size(); ++i) square[i] = static_cast<float>(i % 977) * -1.5f;
  const float one = 9.5f;
  const std::vector<SafetensorsTensor> tensors = {
      {"plain", {50, 50}, plain.data()}, {"w", {200, 300}, square.data(), /*transposed=*/true}, {"one", {}, &one}};
  const FileChecksum host_sum = write_safetensors(dir / "host.safetensors", tensors, {{"k", "v"}});
  test::PiecewiseMemory device(1000);
  const FileChecksum device_sum = write_safetensors(dir / "device.safetensors", tensors, {{"k", "v"}}, device.access());
  CHECK(read_bytes(dir / "device.safetensors") == read_bytes(dir / "host.safetensors"));
  // The checksum returned is the file's as it ends up, its header rewritten with the data's CRC-32C.
  const FileChecksum on_disk = checksum_file(dir / "device.safetensors");
  CHECK((device_sum.bytes == on_disk.bytes && device_sum.crc32c == on_disk.crc32c));
  CHECK((host_sum.bytes == on_disk.bytes && host_sum.crc32c == on_disk.crc32c));
  // Once over the data (their CRC-32C is taken as they are written): the plain tensor in pieces of at
  // most 1000, the transposed one whole (its rows in the file are columns in memory).
  CHECK(device.views == std::vector<size_t>{1000, 1000, 500, 60000, 1});

  SafetensorsFile file(dir / "device.safetensors");
  file.load();
  std::vector<float> back(plain.size(), std::nanf(""));
  file.copy("plain", {50, 50}, back.data(), device.access());
  CHECK(back == plain);
  CHECK(device.stores == std::vector<size_t>{1000, 1000, 500});
}

TEST_CASE("the safetensors reader rejects damaged files, naming the file and the tensor", "[safetensors][errors]") {
  ScratchDir dir;
  const std::string path = dir / "bad.safetensors";
  auto open = [&] { SafetensorsFile f(path); };

  SECTION("header length past the end") {
    write_bytes(path, std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10));
    CHECK(error_message<FileError>(open) ==
          path + ": safetensors header length 255 runs past the end of the file (10 bytes)");
  }
  SECTION("shorter than the length field") {
    write_bytes(path, "abc");
    CHECK(error_message<FileError>(open) == path + ": truncated: 3 bytes, not a safetensors file");
  }
  SECTION("header not JSON") {
    write_raw_safetensors(path, "{\"a\": [", 0);
    CHECK(error_message<FileError>(open) == path + ": safetensors header is not a JSON object");
  }
  SECTION("a dtype safetensors does not have") {
    write_raw_safetensors(path, R"({"w": {"dtype": "F12", "shape": [2], "data_offsets": [0, 4]}})", 4);
    CHECK(error_message<FileError>(open) == path + ": tensor w: dtype \"F12\" is not a safetensors dtype");
  }
  SECTION("an integer tensor where floats are needed") {
    write_raw_safetensors(path, R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16);
    SafetensorsFile f(path);  // a file may hold integer buffers; reading one as floats is the error
    CHECK(error_message<FileError>([&] { f.get("w", {2}); }) == path + ": tensor w has dtype I64, expected F32, F16 or BF16");
  }
  SECTION("a shape that does not match the byte count") {
    write_raw_safetensors(path, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20);
    CHECK(error_message<FileError>(open) ==
          path + ": tensor w: shape [2, 3] needs 24 bytes but data_offsets [0,20] hold 20");
  }
  SECTION("a gap between tensors") {
    write_raw_safetensors(path,
                          R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                          12);
    CHECK(error_message<FileError>(open) ==
          path + ": tensor b: data_offsets begin at 8, expected 4 where tensor a ends; tensors must be contiguous");
  }
  SECTION("a file cut short") {
    write_raw_safetensors(path, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 10);
    CHECK(error_message<FileError>(open) ==
          path + ": truncated: tensor a ends at data byte 16 but the file holds 10 bytes of data");
  }
  SECTION("bytes after the last tensor") {
    write_raw_safetensors(path, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 9);
    CHECK(error_message<FileError>(open) == path + ": 5 bytes after the last tensor's data");
  }
  SECTION("a flipped bit in the data") {
    const std::vector<float> a = {1, 2, 3, 4};
    write_safetensors(path, {{"a", {4}, a.data()}}, {});
    std::string bytes = read_bytes(path);
    bytes[bytes.size() - 3] ^= 0x10;
    write_bytes(path, bytes);
    SafetensorsFile f(path);  // the header is still fine
    const std::string error = error_message<FileError>([&] { f.load(); });
    CHECK(error.rfind(path + ": corrupt: the data's CRC-32C is ", 0) == 0);
  }
  SECTION("a missing tensor or a wrong shape") {
    const std::vector<float> a = {1, 2, 3, 4};
    write_safetensors(path, {{"a", {2, 2}, a.data()}}, {});
    SafetensorsFile f(path);
    CHECK(error_message<FileError>([&] { f.get("b", {4}); }) == path + ": tensor b is missing");
    CHECK(error_message<FileError>([&] { f.get("a", {4}); }) ==
          path + ": tensor a has shape [2, 2] but the model needs [4]");
  }
}

TEST_CASE("tensors stored as BF16: rounded as PyTorch rounds, odd lengths, transposed, in pieces, CRC-32C checked",
          "[safetensors]") {
  ScratchDir dir;
  std::vector<float> odd(2501), square(7 * 5);  // odd: 5002 bytes, a word split across tensors
  for (size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<float>(i) * 0.3337f - 41.0f;
  for (size_t i = 0; i < square.size(); ++i) square[i] = 1.0f + static_cast<float>(i) * 1e-3f;
  const float one = 1.00390625f;  // 1 + 2^-8: a tie between two bfloat16 values, to even (1.0)
  const std::vector<SafetensorsTensor> tensors = {{"odd", {2501}, odd.data(), false, StoredAs::kBF16},
                                                  {"w", {5, 7}, square.data(), /*transposed=*/true, StoredAs::kBF16},
                                                  {"f32", {}, &one},
                                                  {"one", {}, &one, false, StoredAs::kBF16}};
  write_safetensors(dir / "host.safetensors", tensors, {});
  test::PiecewiseMemory device(333);  // pieces of odd byte counts once rounded: the CRC runs across them
  write_safetensors(dir / "device.safetensors", tensors, {}, device.access());
  CHECK(read_bytes(dir / "device.safetensors") == read_bytes(dir / "host.safetensors"));

  SafetensorsFile file(dir / "device.safetensors");
  CHECK_NOTHROW(file.load());  // the CRC-32C of the BF16 data, whole, agrees with the writer's
  CHECK(file.get("odd", {2501}).dtype == "BF16");
  CHECK(file.get("w", {5, 7}).dtype == "BF16");
  CHECK(file.get("one", {}).dtype == "BF16");
  CHECK(file.get("f32", {}).dtype == "F32");
  CHECK(file.get("odd", {2501}).end - file.get("odd", {2501}).begin == 5002);
  std::vector<float> back(odd.size());
  file.copy("odd", {2501}, back.data());
  for (size_t i = 0; i < odd.size(); ++i) REQUIRE(test::is_nearest_bf16(back[i], odd[i]));
  std::vector<float> w(square.size());
  file.copy("w", {5, 7}, w.data());
  for (size_t r = 0; r < 5; ++r) {
    for (size_t c = 0; c < 7; ++c) REQUIRE(test::is_nearest_bf16(w[r * 7 + c], square[c * 5 + r]));
  }
  float tie = 0.0f;
  file.copy("one", {}, &tie);
  CHECK(tie == 1.0f);
}

TEST_CASE("a file written before the CRC-32C is verified by its digest, and a new file drops a copied one",
          "[safetensors]") {
  ScratchDir dir;
  const std::string path = dir / "old.safetensors";
  const std::vector<float> values = {1.5f, -2.0f, 1e-3f, 7.0f, 123.25f};  // 20 bytes: five whole words
  std::string data(values.size() * sizeof(float), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  const auto write_old = [&](const std::string& stored) {
    const nlohmann::json header = {{"v", {{"dtype", "F32"}, {"shape", {5}}, {"data_offsets", {0, 20}}}},
                                   {"__metadata__", {{"xtrain_digest", legacy_digest(data)}}}};
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(text.size() >> (8 * i));
    write_bytes(path, bytes + text + stored);
  };
  write_old(data);
  SafetensorsFile sound(path);
  CHECK_NOTHROW(sound.load());
  std::vector<float> back(5);
  sound.copy("v", {5}, back.data());
  CHECK(back == values);

  std::string damaged = data;
  damaged[6] ^= 0x04;
  write_old(damaged);
  SafetensorsFile bad(path);
  CHECK(error_message<FileError>([&] { bad.load(); }).rfind(path + ": corrupt: the data's digest is ", 0) == 0);

  // Rewriting an old file with its metadata: the new file carries its own CRC-32C, not the old digest.
  write_old(data);
  SafetensorsFile old(path);
  write_safetensors(dir / "new.safetensors", {{"v", {5}, values.data()}}, old.metadata());
  SafetensorsFile rewritten(dir / "new.safetensors");
  CHECK(rewritten.metadata().count("xtrain_digest") == 0);
  CHECK(rewritten.metadata().at("xtrain_crc32c") == crc32c_hex(crc32c(data.data(), data.size())));
  CHECK_NOTHROW(rewritten.load());
}
