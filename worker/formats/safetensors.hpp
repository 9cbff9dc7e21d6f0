// The safetensors format (Hugging Face):
//   [8 bytes: header length N, little-endian u64]
//   [N bytes: JSON {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [BEGIN, END]}, ...,
//              "__metadata__": {"KEY": "VALUE", ...}}, padded with spaces so 8 + N is a multiple of 8]
//   [the data section: each tensor's bytes at [BEGIN, END), row-major, little-endian, no gaps]
// The writer writes F32; the reader reads F32, F16 and BF16 tensors as floats (every dtype's size
// is known, so a file with integer buffers besides still parses). The writer adds "xtrain_crc32c"
// to the metadata, the data section's CRC-32C, which the reader verifies when present (and
// "xtrain_digest", the 64-bit check of files written before it), so a flipped bit fails loudly
// instead of training on.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "worker/formats/file_io.hpp"
#include "worker/model/host_access.hpp"

namespace xtrain {

// How a tensor's floats are stored in the file: as they are (F32), or rounded to bfloat16 (BF16,
// to nearest, ties to even, as PyTorch's tensor.to(torch.bfloat16)).
enum class StoredAs { kF32, kBF16 };

struct SafetensorsTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* data = nullptr;  // prod(shape) floats
  // `data` holds the (shape[1], shape[0]) matrix, and the file its transpose (Hugging Face's
  // Conv1D weights): written a block of rows at a time, never a transposed copy of the whole.
  bool transposed = false;
  StoredAs stored_as = StoredAs::kF32;
};

// Writes the tensors in the given order; fsyncs the file. Not atomic by itself: checkpoints
// write into a temporary directory that is renamed once every file is complete. The tensors'
// `data` is in `memory` (read once), stored as each tensor's stored_as says. Returns the written
// file's size and checksum.
FileChecksum write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               std::map<std::string, std::string> metadata, const HostAccess& memory = {});

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or another safetensors dtype (not readable as floats)
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
};

// Reading checks everything the header claims against the file: length within the file, valid
// JSON, known dtypes, shapes matching byte counts, offsets contiguous from 0 to the end of the
// file. Every error is a FileError naming the file and, where there is one, the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // reads and checks the header only

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }  // in file order

  // The tensor `name`, which must exist, have exactly `shape` and a float dtype (F32, F16, BF16).
  const SafetensorsEntry& get(const std::string& name, const std::vector<std::int64_t>& shape) const;

  // Maps the file and verifies the data's checksum (or an older file's digest) when the header has one.
  // With `recorded` (a checkpoint's state.json entry), the whole file's size and CRC-32C too, in
  // the same pass: the header, which the data's checksum leaves out, is covered as well.
  void load(const RecordedChecksum* recorded = nullptr);
  // Tensor `name` (of exactly `shape`) as floats into `out`, in `memory`; needs load().
  void copy(const std::string& name, const std::vector<std::int64_t>& shape, float* out,
            const HostAccess& memory = {}) const;
  // Elements [first, first + count) of a float tensor, as floats; needs load().
  void copy_elements(const SafetensorsEntry& entry, std::uint64_t first, std::uint64_t count, float* out) const;

 private:
  std::string path_;
  std::uint64_t data_offset_ = 0;  // where the data section starts in the file
  std::uint64_t data_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsEntry> tensors_;
  std::unique_ptr<MappedFile> file_;
};

std::string format_shape(const std::vector<std::int64_t>& shape);  // "[768, 2304]"

}  // namespace xtrain
