#include "worker/data_tool/documents.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "worker/data/token_source.hpp"

namespace xtrain::data_tool {
namespace {

namespace fs = std::filesystem;

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

// Bytes of a file's start that tell text from other data: git's and grep's test reads as many.
constexpr std::size_t kSniffBytes = 8000;

// Why the file is not UTF-8 text, from its first bytes ("" when nothing says so): encoded as it is,
// a compressed file, UTF-16 text or binary data would become tokens of noise.
std::string not_text(const fs::path& path) {
  std::string head(kSniffBytes, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw BadInput(path.string() + ": cannot open: " + std::strerror(errno));
  ssize_t n;
  do {
    n = ::read(fd, head.data(), head.size());
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n < 0) throw BadInput(path.string() + ": read failed: " + std::strerror(errno));
  head.resize(static_cast<std::size_t>(n));
  if (const char* compression = compression_of(head)) {
    return std::string(compression) + "-compressed, not text: decompress it first";
  }
  if (head.starts_with("\xff\xfe") || head.starts_with("\xfe\xff")) {
    return "UTF-16 text (its byte order mark), which GPT-2's tokenizer would read as bytes of noise: convert it to "
           "UTF-8 first (iconv -f UTF-16 -t UTF-8)";
  }
  if (const std::size_t nul = head.find('\0'); nul != std::string::npos) {
    return "binary data, not text (a NUL byte at offset " + std::to_string(nul) +
           "): leave it out of the input";
  }
  return "";
}

void add_file(const fs::path& path, bool jsonl, std::vector<InputFile>& out) {
  if (!jsonl && path.extension() == ".jsonl") {
    throw BadInput(path.string() + ": looks like JSON Lines; give --jsonl-field NAME to read the text from field "
                                     "NAME of each line");
  }
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw BadInput(path.string() + ": " + ec.message());
  if (const std::string why = not_text(path); !why.empty()) throw BadInput(path.string() + ": " + why);
  out.push_back({path.string(), size});
}

// A text file may be cut before byte `pos` when it is "\n" after a character that is not white
// space: that character ends a letter, number or other run (or a contraction), and the newline
// starts a white-space piece whatever precedes it, so both halves cut into the same pieces.
bool safe_cut(std::string_view text, std::size_t pos) {
  if (pos == 0 || pos >= text.size() || text[pos] != '\n') return false;
  const auto before = static_cast<unsigned char>(text[pos - 1]);
  return before < 0x80 && before != ' ' && !(before >= '\t' && before <= '\r');
}

}  // namespace

std::vector<InputFile> list_inputs(const std::vector<std::string>& arguments, bool jsonl) {
  std::vector<InputFile> files;
  for (const std::string& argument : arguments) {
    std::error_code ec;
    const fs::file_status status = fs::status(argument, ec);
    if (!fs::exists(status)) throw BadInput(argument + ": no such file or directory");
    if (fs::is_regular_file(status)) {
      add_file(argument, jsonl, files);
      continue;
    }
    if (!fs::is_directory(status)) throw BadInput(argument + ": not a regular file or a directory");
    std::vector<fs::path> found;
    for (auto it = fs::recursive_directory_iterator(argument, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path());
    }
    if (ec) throw BadInput(argument + ": cannot list: " + ec.message());
    if (found.empty()) throw BadInput(argument + ": no files in this directory");
    std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) { return a.native() < b.native(); });
    for (const fs::path& p : found) add_file(p, jsonl, files);
  }
  return files;
}

ChunkReader::ChunkReader(const std::vector<InputFile>& files, bool jsonl, std::size_t chunk_bytes)
    : files_(files), jsonl_(jsonl), chunk_bytes_(chunk_bytes) {}

ChunkReader::~ChunkReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool ChunkReader::open_next_file() {
  if (next_file_ == files_.size()) return false;
  const InputFile& f = files_[next_file_++];
  fd_ = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw BadInput(f.path + ": cannot open: " + std::strerror(errno));
  at_file_start_ = true;
  eof_ = false;
  pending_.clear();
  next_line_ = 1;
  return true;
}

// Appends up to chunk_bytes_ more bytes of the current file to `buffer`; 0 at its end.
std::size_t ChunkReader::read_more(std::string& buffer) {
  const std::size_t old = buffer.size();
  buffer.resize(old + chunk_bytes_);
  ssize_t n;
  do {
    n = ::read(fd_, buffer.data() + old, chunk_bytes_);
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw BadInput(files_[next_file_ - 1].path + ": read failed: " + std::strerror(errno));
  buffer.resize(old + static_cast<std::size_t>(n));
  if (n == 0) eof_ = true;
  return static_cast<std::size_t>(n);
}

bool ChunkReader::next(Chunk& chunk) {
  if (failed_) return false;
  try {
    return read_chunk(chunk);
  } catch (const BadInput& e) {
    failed_ = true;
    chunk = Chunk{};
    chunk.index = next_index_++;
    chunk.error = e.what();
    return true;
  }
}

bool ChunkReader::read_chunk(Chunk& chunk) {
  // A file is done when its bytes are all handed out; an empty file still makes one (empty) chunk.
  while (fd_ < 0 || (eof_ && pending_.empty() && !at_file_start_)) {
    if (fd_ >= 0) ::close(fd_), fd_ = -1;
    if (!open_next_file()) return false;
  }
  chunk = Chunk{};
  chunk.index = next_index_++;
  chunk.file = &files_[next_file_ - 1];
  chunk.first_line = next_line_;
  chunk.starts_document = at_file_start_;
  at_file_start_ = false;

  // Read until pending_ holds a chunk's worth and a place to cut it, or the file ends.
  std::size_t cut = std::string::npos;
  std::size_t searched = 0;
  while (cut == std::string::npos) {
    if (pending_.size() >= chunk_bytes_) {
      if (jsonl_) {
        const std::size_t nl = pending_.find('\n', std::max(chunk_bytes_, searched) - 1);
        if (nl != std::string::npos) cut = nl + 1;
      } else {
        for (std::size_t p = std::max(chunk_bytes_, searched); p < pending_.size() && cut == std::string::npos; ++p) {
          if (safe_cut(pending_, p)) cut = p;
        }
      }
      searched = pending_.size();
      if (cut != std::string::npos) break;
    }
    if (eof_ || read_more(pending_) == 0) {
      cut = pending_.size();
      break;
    }
  }
  chunk.bytes.assign(pending_, 0, cut);
  pending_.erase(0, cut);
  chunk.ends_document = eof_ && pending_.empty();
  if (jsonl_) next_line_ += static_cast<std::uint64_t>(std::count(chunk.bytes.begin(), chunk.bytes.end(), '\n'));
  return true;
}

EncodedChunk encode_chunk(const Chunk& chunk, const Gpt2Tokenizer& tokenizer, const std::string& jsonl_field) {
  EncodedChunk out;
  out.index = chunk.index;
  out.input_bytes = chunk.bytes.size();
  out.error = chunk.error;
  if (!out.error.empty()) return out;
  out.tokens.reserve(chunk.bytes.size() / 3);
  if (jsonl_field.empty()) {
    if (chunk.starts_document && chunk.ends_document && chunk.bytes.empty()) return out;  // an empty file
    out.documents.push_back({0, chunk.starts_document});
    if (chunk.starts_document) out.tokens.push_back(tokenizer.eot());
    tokenizer.encode(chunk.bytes, out.tokens);
    return out;
  }
  std::uint64_t line_number = chunk.first_line;
  for (std::size_t pos = 0; pos < chunk.bytes.size(); ++line_number) {
    std::size_t end = chunk.bytes.find('\n', pos);
    if (end == std::string::npos) end = chunk.bytes.size();
    const std::string_view line(chunk.bytes.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line
    const std::string where = chunk.file->path + ":" + std::to_string(line_number) + ": ";
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..."
      const std::string what = e.what();
      const auto column = what.find("column ");
      out.error = where + "not valid JSON" + (column == std::string::npos ? "" : " at " + what.substr(column));
      return out;
    }
    const auto field = doc.is_object() ? doc.find(jsonl_field) : doc.end();
    if (field == doc.end()) {
      out.error = where + (doc.is_object() ? "no field \"" + jsonl_field + "\""
                                           : "expected a JSON object, got " + std::string(doc.type_name()));
      return out;
    }
    if (!field->is_string()) {
      out.error = where + "field \"" + jsonl_field + "\" is " + field->type_name() + ", expected a string";
      return out;
    }
    const std::string& text = field->get_ref<const std::string&>();
    if (text.empty()) continue;
    out.documents.push_back({out.tokens.size(), true});
    out.tokens.push_back(tokenizer.eot());
    tokenizer.encode(text, out.tokens);
  }
  return out;
}

}  // namespace xtrain::data_tool
