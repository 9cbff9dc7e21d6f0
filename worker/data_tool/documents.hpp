// xtrain-data's input side: the input files in order, cut into chunks of about a megabyte that
// worker threads encode independently, and the encoding of one chunk.
//
// A document is a text file, or one line of a JSON Lines file (the string in field `jsonl_field`).
// Chunks never change the tokens: a text file is cut only before a "\n" that follows a character
// other than white space, where the GPT-2 pre-tokeniser always starts a new piece; JSON Lines files
// are cut between lines. So the shards do not depend on the chunk size or the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bad_input.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"

namespace xtrain::data_tool {

// Chunks of about a megabyte: large enough that cutting costs nothing, small enough that a few per
// worker thread in flight hold little memory.
inline constexpr std::size_t kChunkBytes = 1 << 20;

struct InputFile {
  std::string path;
  std::uint64_t size = 0;
};

// The files to read, in order: each argument is a file, or a directory whose regular files are
// taken recursively in byte order of their paths (names starting with "." are skipped). With a
// JSON Lines field every file is JSON Lines; without one, a *.jsonl file is an error (it would be
// read as one text). A file whose first 8000 bytes show it is not UTF-8 text (compressed, UTF-16 by
// its byte order mark, or binary by a NUL byte) is an error naming what it is. Throws BadInput.
std::vector<InputFile> list_inputs(const std::vector<std::string>& arguments, bool jsonl);

struct Chunk {
  std::uint64_t index = 0;        // position in the stream of chunks
  const InputFile* file = nullptr;
  std::string bytes;              // text of one file, or whole lines of a JSON Lines file
  std::uint64_t first_line = 0;   // JSON Lines: the line number of the first line in bytes
  bool starts_document = false;   // text: the file's first chunk
  bool ends_document = false;     // text: the file's last chunk
  std::string error;              // the file could not be read (BadInput text): the stream ends here
};

// Reads the files and cuts them into chunks, one at a time (not thread-safe).
class ChunkReader {
 public:
  ChunkReader(const std::vector<InputFile>& files, bool jsonl, std::size_t chunk_bytes);
  ~ChunkReader();
  // False at the end. A file that cannot be read yields a chunk with `error` set, then the end.
  bool next(Chunk& chunk);

 private:
  bool read_chunk(Chunk& chunk);  // throws BadInput
  bool open_next_file();
  std::size_t read_more(std::string& buffer);

  const std::vector<InputFile>& files_;
  bool jsonl_;
  std::size_t chunk_bytes_;
  std::size_t next_file_ = 0;
  int fd_ = -1;
  bool at_file_start_ = false;
  bool eof_ = false;
  std::string pending_;           // read but not yet handed out
  std::uint64_t next_line_ = 1;   // JSON Lines: the number of pending_'s first line
  std::uint64_t next_index_ = 0;
  bool failed_ = false;
};

// A chunk's tokens: each document's tokens after an EOT (llm.c's layout: "EOT doc EOT doc ...",
// so a model sampled from EOT starts a document); empty documents are left out.
struct EncodedChunk {
  std::uint64_t index = 0;
  std::uint64_t input_bytes = 0;
  std::vector<std::int32_t> tokens;
  // Where each document's tokens (its EOT first) start in `tokens`, and whether they start the
  // document there (a text file may span several chunks: only the first starts it).
  struct Document {
    std::size_t begin;
    bool starts;
  };
  std::vector<Document> documents;
  std::string error;  // BadInput text (a broken JSON line); the chunk is then unusable
};

EncodedChunk encode_chunk(const Chunk& chunk, const Gpt2Tokenizer& tokenizer, const std::string& jsonl_field);

}  // namespace xtrain::data_tool
