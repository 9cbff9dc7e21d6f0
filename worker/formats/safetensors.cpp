#include "worker/formats/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "worker/formats/crc32c.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/float16.hpp"
#include "worker/formats/transpose.hpp"

namespace xtrain {
namespace {

using nlohmann::json;

// The data section's CRC-32C (crc32c.hpp: what it detects, and in hardware at about 10 GB/s),
// 8 hex digits. Files written before it carry kLegacyDigestKey instead, which is still verified.
constexpr const char* kChecksumKey = "xtrain_crc32c";
constexpr const char* kLegacyDigestKey = "xtrain_digest";
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

// The check that files written before 2026-12-07 carry: a running 64-bit check over the 32-bit
// words of the data, however they are split into calls; a last partial word does not count. Each
// step (h ^ w) * odd is a bijection of h, so any single changed word changes the result. A serial
// chain of multiplies, about 3 GB/s: why new files carry the CRC-32C.
class LegacyDigest {
 public:
  void add(const void* data, std::uint64_t bytes) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    for (; carried_ > 0 && bytes > 0; ++p, --bytes) {  // the word the previous call began
      carry_[carried_++] = *p;
      if (carried_ == 4) {
        mix(carry_);
        carried_ = 0;
      }
    }
    const std::uint64_t whole = bytes - bytes % 4;
    for (std::uint64_t i = 0; i < whole; i += 4) mix(p + i);
    for (std::uint64_t i = whole; i < bytes; ++i) carry_[carried_++] = p[i];
  }
  std::string hex() const {
    std::uint64_t x = h_ ^ (h_ >> 31);
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
    return buf;
  }

 private:
  void mix(const std::uint8_t* word) {
    std::uint32_t w;
    std::memcpy(&w, word, 4);
    h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ULL;
  }

  std::uint64_t h_ = 0xcbf29ce484222325ULL;
  std::uint8_t carry_[4] = {};
  int carried_ = 0;
};

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (auto s : shape) n *= static_cast<std::uint64_t>(s);
  return n;
}

// Bytes per element of the safetensors dtypes; 0 for a name the format does not have.
std::uint64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::uint64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8},     {"I32", 4},     {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2},  {"U8", 1},      {"BOOL", 1},    {"F8_E4M3", 1},
      {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

bool is_float_dtype(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

// Hands `sink` the bytes of `t` as the file holds them, in order: its data (a piece at a time
// where `memory` is not the host's), or for a transposed tensor blocks of whole rows of the
// transpose, built in `block` from all of the tensor at once.
template <typename Sink>
void for_each_piece(const SafetensorsTensor& t, const HostAccess& memory, std::vector<float>& block, Sink&& sink) {
  const std::uint64_t count = element_count(t.shape);
  if (!t.transposed) {
    return memory.read(t.data, count, [&](const float* host, size_t, size_t n) { sink(host, n * sizeof(float)); });
  }
  const float* data = memory.whole(t.data, count);
  const auto rows = static_cast<size_t>(t.shape[0]), cols = static_cast<size_t>(t.shape[1]);
  // Rows of the transpose are columns of `data`: each block reads `per_block` adjacent floats of
  // every row of `data`, so its reads stay sequential and the block (up to 1 MiB) stays in cache.
  const size_t per_block = std::max<size_t>(1, std::min(rows, (size_t{1} << 18) / std::max<size_t>(cols, 1)));
  block.resize(per_block * cols);
  for (size_t first = 0; first < rows; first += per_block) {
    const size_t n = std::min(per_block, rows - first);
    transpose(data + first, cols, n, rows, block.data(), cols);  // (cols, n) of data -> (n, cols)
    sink(block.data(), n * cols * sizeof(float));
  }
}

// Hands `sink` the bytes of `t` as the file stores them: for_each_piece's floats, or each piece
// rounded to bfloat16 1 Mi values at a time in `half`.
template <typename Sink>
void for_each_stored_piece(const SafetensorsTensor& t, const HostAccess& memory, std::vector<float>& block,
                           std::vector<std::uint16_t>& half, Sink&& sink) {
  if (t.stored_as == StoredAs::kF32) return for_each_piece(t, memory, block, sink);
  constexpr std::uint64_t kChunk = 1 << 20;
  for_each_piece(t, memory, block, [&](const void* piece, std::uint64_t bytes) {
    const auto* f = static_cast<const float*>(piece);
    for (std::uint64_t at = 0, n = bytes / sizeof(float); at < n; at += kChunk) {
      const std::uint64_t count = std::min(kChunk, n - at);
      half.resize(count);
      for (std::uint64_t i = 0; i < count; ++i) half[i] = float_to_bf16(f[at + i]);
      sink(half.data(), count * sizeof(std::uint16_t));
    }
  });
}

}  // namespace

std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One pass over the data: the header goes first with the checksum's place held by as many zeros,
// the data go out with their CRC-32C taken on the way, and the header is written again over its
// first self (the same length: the checksum is always 8 hex digits). A GPU's data cross to the
// host once, and a file cut short by a crash fails its check.
FileChecksum write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               std::map<std::string, std::string> metadata, const HostAccess& memory) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const bool bf16 = t.stored_as == StoredAs::kBF16;
    const std::uint64_t bytes = element_count(t.shape) * (bf16 ? sizeof(std::uint16_t) : sizeof(float));
    header[t.name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // The 8-byte length, then the JSON padded with spaces so that 8 + N, where the data start,
  // stays 8-aligned for F32 data.
  metadata.erase(kLegacyDigestKey);  // a caller's copy of an older file's metadata: not this data's
  const auto header_bytes = [&](const std::string& checksum) {
    metadata[kChecksumKey] = checksum;
    header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
    return bytes + text;
  };

  OutputFile out(path);
  const std::string placeholder = header_bytes(crc32c_hex(0));
  out.write(placeholder.data(), placeholder.size());
  Crc32c data_crc;
  std::vector<float> block;         // a transposed tensor's rows, block by block
  std::vector<std::uint16_t> half;  // a BF16 tensor's values, 1 Mi at a time
  for (const auto& t : tensors) {
    for_each_stored_piece(t, memory, block, half, [&](const void* piece, std::uint64_t n) {
      data_crc.update(piece, n);
      out.write(piece, n);
    });
  }
  const std::string final_header = header_bytes(crc32c_hex(data_crc.value()));
  if (final_header.size() != placeholder.size()) throw std::logic_error("write_safetensors: the header changed size");
  out.overwrite(0, final_header.data(), final_header.size());
  out.finish();
  return out.checksum();
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  InputFile in(path);
  if (in.size() < 8)
    throw FileError(path, "truncated: " + std::to_string(in.size()) + " bytes, not a safetensors file");
  std::uint8_t length[8];
  in.read_at(0, length, sizeof length);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(length[i]) << (8 * i);
  if (n > in.size() - 8 || n > kMaxHeaderBytes) {
    throw FileError(path, "safetensors header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(in.size()) + " bytes)");
  }
  std::string text(n, '\0');
  in.read_at(8, text.data(), n);
  data_offset_ = 8 + n;
  data_size_ = in.size() - data_offset_;

  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw FileError(path, "safetensors header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw FileError(path, "__metadata__ is not an object of strings");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) throw FileError(path, "__metadata__." + key + " is not a string");
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name + ": ";
    if (!value.is_object() || value.size() != 3 || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      throw FileError(path, where + "expected {dtype, shape, data_offsets}, got " + value.dump());
    }
    const json& dtype = value["dtype"];
    if (!dtype.is_string() || dtype_size(dtype.get<std::string>()) == 0) {
      throw FileError(path, where + "dtype " + dtype.dump() + " is not a safetensors dtype");
    }
    SafetensorsEntry e;
    e.name = name;
    e.dtype = dtype.get<std::string>();
    const json& shape = value["shape"];
    if (!shape.is_array()) throw FileError(path, where + "shape is not a list");
    for (const auto& s : shape) {
      if (!s.is_number_unsigned() || s.get<std::uint64_t>() > (1ULL << 40)) {
        throw FileError(path, where + "shape " + shape.dump() + " is not a list of sizes");
      }
      e.shape.push_back(s.get<std::int64_t>());
    }
    const json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned() || offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>()) {
      throw FileError(path, where + "data_offsets " + offsets.dump() + " is not [begin, end]");
    }
    e.begin = offsets[0].get<std::uint64_t>();
    e.end = offsets[1].get<std::uint64_t>();
    const std::uint64_t bytes = element_count(e.shape) * dtype_size(e.dtype);
    if (e.end - e.begin != bytes) {
      throw FileError(path, where + "shape " + format_shape(e.shape) + " needs " + std::to_string(bytes) +
                                " bytes but data_offsets " + offsets.dump() + " hold " +
                                std::to_string(e.end - e.begin));
    }
    tensors_.push_back(std::move(e));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : tensors_) {
    if (e.begin != expected) {
      throw FileError(path, "tensor " + e.name + ": data_offsets begin at " + std::to_string(e.begin) + ", expected " +
                                std::to_string(expected) +
                                (previous ? " where tensor " + previous->name + " ends" : " (the first tensor)") +
                                "; tensors must be contiguous");
    }
    if (e.end > data_size_) {
      throw FileError(path, "truncated: tensor " + e.name + " ends at data byte " + std::to_string(e.end) +
                                " but the file holds " + std::to_string(data_size_) + " bytes of data");
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size_) {
    throw FileError(path, std::to_string(data_size_ - expected) + " bytes after the last tensor's data");
  }
}

const SafetensorsEntry& SafetensorsFile::get(const std::string& name, const std::vector<std::int64_t>& shape) const {
  for (const auto& e : tensors_) {
    if (e.name != name) continue;
    if (e.shape != shape) {
      throw FileError(path_, "tensor " + name + " has shape " + format_shape(e.shape) + " but the model needs " +
                                 format_shape(shape));
    }
    if (!is_float_dtype(e.dtype)) {
      throw FileError(path_, "tensor " + name + " has dtype " + e.dtype + ", expected F32, F16 or BF16");
    }
    return e;
  }
  throw FileError(path_, "tensor " + name + " is missing");
}

void SafetensorsFile::load(const RecordedChecksum* recorded) {
  auto file = std::make_unique<MappedFile>(path_);
  if (file->size() != data_offset_ + data_size_) {
    throw FileError(path_, "changed size while being read (" + std::to_string(file->size()) + " bytes, was " +
                               std::to_string(data_offset_ + data_size_) + ")");
  }
  const auto checksum = metadata_.find(kChecksumKey);
  const auto legacy = metadata_.find(kLegacyDigestKey);
  const bool crc_needed = checksum != metadata_.end() || recorded != nullptr;
  const bool digest_needed = checksum == metadata_.end() && legacy != metadata_.end();
  Crc32c crc;
  if (crc_needed || digest_needed) {
    // The first read of a mapped file's data: progress a piece at a time.
    constexpr std::uint64_t kPiece = 16 << 20;
    LegacyDigest digest;
    const std::uint8_t* data = file->data() + data_offset_;
    for (std::uint64_t at = 0; at < data_size_; at += kPiece) {
      const std::uint64_t n = std::min(kPiece, data_size_ - at);
      if (crc_needed) crc.update(data + at, n);
      if (digest_needed) digest.add(data + at, n);
      WorkProgress::advance(n);
    }
    if (checksum != metadata_.end() || digest_needed) {
      const std::string& stored = digest_needed ? legacy->second : checksum->second;
      const std::string found = digest_needed ? digest.hex() : crc32c_hex(crc.value());
      if (found != stored) {
        throw FileError(path_, std::string("corrupt: the data's ") + (digest_needed ? "digest" : "CRC-32C") +
                                   " is " + found + " but the header says " + stored);
      }
    }
  }
  if (recorded != nullptr) {
    const std::uint32_t whole = crc32c_combine(crc32c(file->data(), data_offset_), crc.value(), data_size_);
    check_recorded_checksum(path_, {file->size(), whole}, *recorded);
  }
  file_ = std::move(file);
}

void SafetensorsFile::copy(const std::string& name, const std::vector<std::int64_t>& shape, float* out,
                           const HostAccess& memory) const {
  const SafetensorsEntry& e = get(name, shape);
  memory.fill(out, element_count(e.shape),
              [&](float* host, size_t offset, size_t n) { copy_elements(e, offset, n, host); });
}

void SafetensorsFile::copy_elements(const SafetensorsEntry& e, std::uint64_t first, std::uint64_t count,
                                    float* out) const {
  if (!file_) throw std::logic_error("SafetensorsFile::copy before load()");
  if (!is_float_dtype(e.dtype) || first + count > element_count(e.shape)) {
    throw std::logic_error("SafetensorsFile::copy_elements: not a float tensor, or past its end");
  }
  const std::uint8_t* data = file_->data() + data_offset_ + e.begin;
  if (e.dtype == "F32") {
    std::memcpy(out, data + first * 4, count * 4);
    return;
  }
  float (*convert)(std::uint16_t) = e.dtype == "F16" ? f16_to_float : bf16_to_float;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint16_t h;
    std::memcpy(&h, data + (first + i) * 2, 2);
    out[i] = convert(h);
  }
}

}  // namespace xtrain
