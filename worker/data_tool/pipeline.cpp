#include "worker/data_tool/pipeline.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "worker/data_tool/progress_line.hpp"

namespace xtrain::data_tool {

std::atomic<int> g_stop_signal{0};

namespace {

class Pipeline {
 public:
  Pipeline(const std::vector<InputFile>& files, const Gpt2Tokenizer& tokenizer, const PipelineOptions& options)
      : reader_(files, !options.jsonl_field.empty(), options.chunk_bytes),
        tokenizer_(tokenizer),
        options_(options),
        max_in_flight_(4 * static_cast<std::size_t>(options.threads)) {
    threads_.emplace_back([this] { read(); });
    for (int i = 0; i < options.threads; ++i) threads_.emplace_back([this] { encode(); });
  }
  ~Pipeline() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // The next chunk in input order; false at the end.
  bool next(EncodedChunk& out) {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (const int sig = g_stop_signal.load()) throw Interrupted{sig};
      if (const auto it = done_.find(next_index_); it != done_.end()) {
        out = std::move(it->second);
        done_.erase(it);
        ++next_index_;
        --in_flight_;
        changed_.notify_all();
        return true;
      }
      if (reader_done_ && next_index_ == chunks_read_) return false;
      changed_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }

 private:
  void read() {
    for (;;) {
      Chunk chunk;
      const bool more = reader_.next(chunk);  // only this thread touches reader_
      std::unique_lock lock(mutex_);
      if (!more) {
        reader_done_ = true;
        changed_.notify_all();
        return;
      }
      changed_.wait(lock, [&] { return stopping_ || in_flight_ < max_in_flight_; });
      if (stopping_) return;
      ++in_flight_;
      ++chunks_read_;
      queue_.push_back(std::move(chunk));
      changed_.notify_all();
    }
  }

  void encode() {
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      EncodedChunk encoded = encode_chunk(chunk, tokenizer_, options_.jsonl_field);
      {
        std::lock_guard lock(mutex_);
        done_.emplace(encoded.index, std::move(encoded));
      }
      changed_.notify_all();
    }
  }

  ChunkReader reader_;
  const Gpt2Tokenizer& tokenizer_;
  const PipelineOptions& options_;
  const std::size_t max_in_flight_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Chunk> queue_;                       // read, not yet taken by a worker
  std::map<std::uint64_t, EncodedChunk> done_;    // encoded, waiting for their turn
  std::size_t in_flight_ = 0;                     // read and not yet written
  std::uint64_t chunks_read_ = 0;
  std::uint64_t next_index_ = 0;                  // the next chunk to write
  bool reader_done_ = false;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

void run_pipeline(const std::vector<InputFile>& files, const Gpt2Tokenizer& tokenizer, ShardSet& shards,
                  const PipelineOptions& options) {
  std::uint64_t total_bytes = 0;
  for (const InputFile& f : files) total_bytes += f.size;
  ProgressLine progress(options.progress, total_bytes);
  std::uint64_t bytes = 0, documents = 0, tokens = 0;
  {
    Pipeline pipeline(files, tokenizer, options);
    EncodedChunk chunk;
    while (pipeline.next(chunk)) {
      if (!chunk.error.empty()) throw BadInput(chunk.error);
      for (std::size_t d = 0; d < chunk.documents.size(); ++d) {
        const EncodedChunk::Document& doc = chunk.documents[d];
        const std::size_t end = d + 1 < chunk.documents.size() ? chunk.documents[d + 1].begin : chunk.tokens.size();
        if (doc.starts) shards.begin_document(), ++documents;
        shards.append(std::span(chunk.tokens).subspan(doc.begin, end - doc.begin));
      }
      bytes += chunk.input_bytes;
      tokens += chunk.tokens.size();
      progress.update(bytes, documents, tokens);
    }
  }
  shards.finish();
  progress.update(bytes, documents, tokens, /*final=*/true);
}

}  // namespace xtrain::data_tool
