//===- plan_stream.h - Streaming a plan's bytes to a file -------*- C++ -*-===//
//
// Private to the plan writer: where PlanWriter::Impl::emit (plan_emit.cpp)
// puts the plan's bytes (a Sink: a vector, or a file written by a thread of
// its own from large staging buffers) and what reads the weights' sources
// ahead of it (SourceReadAhead: a thread that has the kernel read the next
// megabytes of the memory-mapped model while the current weight is
// converted and written; releasePages pages out what has been written).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_FORMAT_PLAN_STREAM_H
#define MOERT_FORMAT_PLAN_STREAM_H

#include "format/plan_writer.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace moert {
namespace detail {

/// Receives the file's bytes in order; `patch` rewrites earlier bytes, once
/// every byte has been appended.
class Sink {
public:
  virtual ~Sink() = default;
  virtual absl::Status append(const void *data, size_t size) = 0;
  virtual absl::Status patch(uint64_t offset, const void *data,
                             size_t size) = 0;
  /// Room for the next bytes, to be filled in place and then committed
  /// (`commit(n)`, n <= its size; nothing else may be appended in between).
  /// Never empty, and a multiple of any power of two up to 4096 that the
  /// bytes appended so far are a multiple of.
  virtual absl::StatusOr<std::pair<uint8_t *, size_t>> room();
  virtual absl::Status commit(size_t size);
  absl::Status pad(uint64_t &position, uint64_t target);

private:
  std::vector<uint8_t> scratch_;
};

/// Appends to a vector.
class VectorSink : public Sink {
public:
  std::vector<uint8_t> bytes;
  absl::Status append(const void *data, size_t size) override;
  absl::Status patch(uint64_t offset, const void *data, size_t size) override;
};

/// Writes a file from staging buffers, which a thread of its own writes
/// while the next ones are filled: with O_DIRECT where asked and the file
/// system allows (the plan's bytes then never pass through the page cache,
/// whose copies and write-back cost more than the disk's own rate), in
/// buffers of kDirectBufferBytes; else with plain writes of kBufferBytes.
class FileSink : public Sink {
public:
  static constexpr size_t kBufferBytes = size_t{512} << 10;
  static constexpr size_t kDirectBufferBytes = size_t{8} << 20;
  static constexpr int kBuffers = 4;

  /// Creates `path`, emptied unless `!truncate` (then written over in
  /// place, and cut to the bytes written when closed). `direct`: try
  /// O_DIRECT.
  static absl::StatusOr<std::unique_ptr<FileSink>>
  create(std::string path, bool direct, bool truncate = true);
  ~FileSink() override;
  /// Whether the file is a regular file (PlanWriter::write removes one that
  /// failed, unless it was written in place).
  bool regular() const { return regular_; }
  absl::Status append(const void *data, size_t size) override;
  absl::Status patch(uint64_t offset, const void *data, size_t size) override;
  absl::StatusOr<std::pair<uint8_t *, size_t>> room() override;
  absl::Status commit(size_t size) override;
  /// Writes what is left and closes the file.
  absl::Status close();

private:
  FileSink(std::string path, int fd, bool direct, bool regular);
  /// The size of each buffer.
  size_t bufferBytes_ = kBufferBytes;
  void writerLoop();
  /// Hands the current buffer to the writer thread.
  absl::Status submit();
  /// Waits for every submitted buffer and writes the partial last one; no
  /// append may follow.
  absl::Status finishStream();
  absl::Status failure(const char *what, int err);
  absl::Status writeAt(const uint8_t *data, size_t size, uint64_t offset);

  std::string path_;
  int fd_ = -1;
  bool direct_ = false, regular_ = false, finished_ = false;
  struct Buffer {
    uint8_t *data = nullptr;
    size_t fill = 0;
    uint64_t offset = 0;
  };
  Buffer buffers_[kBuffers];
  int current_ = 0;
  uint64_t end_ = 0; // Bytes appended so far.
  std::mutex mutex_;
  std::condition_variable changed_;
  /// Submitted buffers in order, as indices; `free_` those to fill.
  std::vector<int> queue_, free_;
  bool stop_ = false, writing_ = false;
  absl::Status error_;
  std::thread writer_;
};

/// Advises the kernel that the whole pages inside [data, data + size), just
/// written to the plan, are not needed again by this process: referenced
/// weights are usually a memory-mapped model, which writing would
/// otherwise leave resident in full. Inside a mapping declared with
/// moert::FileMapping (format/file_io.h), the pages are dropped from the
/// process (MADV_DONTNEED): the page cache keeps them while memory allows, for
/// the next reader (the plan's writer after the rewrite validator), and
/// reclaims them without unmapping anything when it needs the memory. Elsewhere
/// they are paged out (MADV_PAGEOUT, from the thread that read them), which
/// never changes the memory's contents (anonymous pages without swap just
/// stay), so any referenced buffer may be advised; failure is harmless. Small
/// weights (under 1 MiB) are not worth the call.
void releasePages(const void *data, size_t size);

/// While one lives, releasePages on the thread that made it does nothing:
/// for a writer whose sources are read again right after (the rewrite
/// validator writes each layer twice, compiler/verify).
class KeepSourcePages {
public:
  KeepSourcePages();
  ~KeepSourcePages();
  KeepSourcePages(const KeepSourcePages &) = delete;
  KeepSourcePages &operator=(const KeepSourcePages &) = delete;
};

/// Has the kernel read the bytes of `ranges` (the weights' sources, in the
/// order they are read) into the page cache up to `window` bytes ahead of
/// the reader, from a thread of its own, so that the disk reads the next
/// weights while the current one is converted and written. It never
/// changes the memory's contents, so any memory may be read ahead; failure
/// only costs speed.
class SourceReadAhead {
public:
  static constexpr uint64_t kWindow = uint64_t{64} << 20;
  explicit SourceReadAhead(std::vector<WeightPiece> ranges,
                           uint64_t window = kWindow);
  ~SourceReadAhead();
  /// The reader has read `bytes` more of the ranges' concatenation.
  void advance(uint64_t bytes);

private:
  void loop();

  std::vector<WeightPiece> ranges_;
  uint64_t window_;
  /// The reader's progress, and what of it the thread has been told.
  uint64_t read_ = 0, published_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t consumed_ = 0; // Guarded by mutex_.
  bool stop_ = false;
  std::thread thread_;
};

} // namespace detail
} // namespace moert

#endif // MOERT_FORMAT_PLAN_STREAM_H
