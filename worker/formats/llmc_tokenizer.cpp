#include "worker/formats/llmc_tokenizer.hpp"

#include <array>
#include <cstring>

#include "common/model_file.hpp"
#include "worker/formats/file_io.hpp"

namespace xtrain {
namespace {

using Header = std::array<std::uint32_t, 256>;

}  // namespace

LlmcTokenizer read_llmc_tokenizer(const std::string& path) {
  const MappedFile file(path);
  const auto fail = [&](const std::string& what) { return FileError(path, "llm.c tokenizer file: " + what); };
  Header header{};
  if (file.size() < sizeof header) throw fail("shorter than its header of 1024 bytes");
  std::memcpy(header.data(), file.data(), sizeof header);
  if (header[0] != kLlmcTokenizerMagic) {
    throw fail("magic is " + std::to_string(header[0]) + ", expected " + std::to_string(kLlmcTokenizerMagic));
  }
  if (header[1] != 1 && header[1] != 2) throw fail("version " + std::to_string(header[1]) + ", expected 1 or 2");
  constexpr std::uint32_t kGpt2Eot = 50256;  // what llm.c assumes of a version 1 file
  const std::uint32_t vocab = header[2];
  const std::uint32_t eot = header[1] == 2 ? header[3] : kGpt2Eot;
  if (eot >= vocab) {
    throw fail("eot id " + std::to_string(eot) + " is outside its " + std::to_string(vocab) + " tokens");
  }
  LlmcTokenizer out;
  out.path = path;
  out.eot = static_cast<std::int32_t>(eot);
  out.tokens.reserve(vocab);
  std::uint64_t at = sizeof header;
  for (std::uint32_t id = 0; id < vocab; ++id) {
    if (at >= file.size()) {
      throw fail("ends after " + std::to_string(id) + " of its " + std::to_string(vocab) + " tokens");
    }
    const std::uint8_t length = file.data()[at++];
    if (length == 0 || at + length > file.size()) {
      throw fail("token " + std::to_string(id) + (length == 0 ? " has no bytes" : " runs past the end of the file"));
    }
    out.tokens.emplace_back(reinterpret_cast<const char*>(file.data() + at), length);
    at += length;
  }
  if (at != file.size()) throw fail(std::to_string(file.size() - at) + " bytes after its last token");
  return out;
}

std::string llmc_tokenizer_bytes(const LlmcTokenizer& table) {
  Header header{};
  header[0] = kLlmcTokenizerMagic;
  header[1] = 2;
  header[2] = static_cast<std::uint32_t>(table.tokens.size());
  header[3] = static_cast<std::uint32_t>(table.eot);
  std::string file(reinterpret_cast<const char*>(header.data()), sizeof header);
  for (size_t id = 0; id < table.tokens.size(); ++id) {
    const std::string& bytes = table.tokens[id];
    if (bytes.empty() || bytes.size() > 255) {
      throw FileError(table.path, "token " + std::to_string(id) + " has " + std::to_string(bytes.size()) +
                                      " bytes; llm.c's tokenizer file holds 1 to 255");
    }
    file += static_cast<char>(static_cast<unsigned char>(bytes.size()));
    file += bytes;
  }
  return file;
}

}  // namespace xtrain
