//===- plan_stream.cpp - Streaming a plan's bytes to a file ---------------===//

#include "format/plan_stream.h"

#include "format/file_io.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/mman.h>

namespace moert {
namespace detail {

//===----------------------------------------------------------------------===//
// Sink
//===----------------------------------------------------------------------===//

absl::StatusOr<std::pair<uint8_t *, size_t>> Sink::room() {
  scratch_.resize(size_t{64} << 10);
  return std::make_pair(scratch_.data(), scratch_.size());
}

absl::Status Sink::commit(size_t size) { return append(scratch_.data(), size); }

absl::Status Sink::pad(uint64_t &position, uint64_t target) {
  static const uint8_t zeros[4096] = {};
  while (position < target) {
    size_t n = static_cast<size_t>(
        std::min<uint64_t>(target - position, sizeof(zeros)));
    MOERT_RETURN_IF_ERROR(append(zeros, n));
    position += n;
  }
  return absl::OkStatus();
}

absl::Status VectorSink::append(const void *data, size_t size) {
  const auto *p = static_cast<const uint8_t *>(data);
  bytes.insert(bytes.end(), p, p + size);
  return absl::OkStatus();
}

absl::Status VectorSink::patch(uint64_t offset, const void *data, size_t size) {
  std::memcpy(bytes.data() + offset, data, size);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// FileSink
//===----------------------------------------------------------------------===//

namespace {
constexpr size_t kDirectAlignment = 4096;
} // namespace

absl::StatusOr<std::unique_ptr<FileSink>>
FileSink::create(std::string path, bool direct, bool truncate) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0);
#if defined(O_DIRECT)
  int fd = direct ? ::open(path.c_str(), flags | O_DIRECT, 0666) : -1;
  // File systems without direct I/O (tmpfs) refuse the flag.
  if (fd < 0)
    direct = false;
#else
  int fd = -1;
  direct = false;
#endif
  if (fd < 0)
    fd = ::open(path.c_str(), flags, 0666);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  struct stat st;
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
#if defined(O_DIRECT)
  // Direct I/O is for the disk's files; a device or a FIFO is written as is.
  if (direct && !regular) {
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
    direct = false;
  }
#endif
  std::unique_ptr<FileSink> sink(
      new FileSink(std::move(path), fd, direct, regular));
  // Direct writes wait for the disk: fewer, larger ones. Buffered ones
  // return once copied, and smaller buffers keep a small plan's RSS small.
  if (direct)
    sink->bufferBytes_ = kDirectBufferBytes;
  // Mapped rather than allocated: page-aligned for direct I/O, and given
  // back to the system when the sink goes (malloc would keep them in its
  // heap, where they would add to the peak RSS of all that follows).
  for (Buffer &buffer : sink->buffers_) {
    void *data = ::mmap(nullptr, sink->bufferBytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED)
      return absl::ResourceExhaustedError(
          absl::StrCat(sink->path_, ": cannot allocate write buffers"));
    buffer.data = static_cast<uint8_t *>(data);
  }
  for (int b = 1; b < kBuffers; ++b)
    sink->free_.push_back(b);
  sink->writer_ = std::thread([s = sink.get()] { s->writerLoop(); });
  return sink;
}

FileSink::FileSink(std::string path, int fd, bool direct, bool regular)
    : path_(std::move(path)), fd_(fd), direct_(direct), regular_(regular) {}

FileSink::~FileSink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable())
    writer_.join();
  if (fd_ >= 0)
    ::close(fd_);
  for (Buffer &buffer : buffers_)
    if (buffer.data)
      ::munmap(buffer.data, bufferBytes_);
}

absl::Status FileSink::failure(const char *what, int err) {
  return absl::InternalError(
      absl::StrCat(path_, ": cannot ", what, ": ", std::strerror(err)));
}

absl::Status FileSink::writeAt(const uint8_t *data, size_t size,
                               uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    // A device or a FIFO is written in order, without offsets.
    ssize_t n = regular_ ? ::pwrite(fd_, data + done, size - done,
                                    static_cast<off_t>(offset + done))
                         : ::write(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
#if defined(O_DIRECT)
    // A file system that took O_DIRECT at open may still refuse the write
    // (an alignment it needs larger than a page): written as is instead.
    if (n < 0 && errno == EINVAL && direct_ &&
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) == 0) {
      direct_ = false;
      continue;
    }
#endif
    if (n <= 0)
      return failure("write", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void FileSink::writerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty())
      return;
    int index = queue_.front();
    queue_.erase(queue_.begin());
    writing_ = true;
    Buffer &buffer = buffers_[index];
    bool failed = !error_.ok();
    lock.unlock();
    absl::Status status;
    if (!failed) {
      // Direct I/O writes whole blocks: the last buffer's tail is zeros
      // that the file is truncated past once written.
      size_t size = buffer.fill;
      if (direct_) {
        size_t rounded =
            (size + kDirectAlignment - 1) & ~(kDirectAlignment - 1);
        std::memset(buffer.data + size, 0, rounded - size);
        size = rounded;
      }
      status = writeAt(buffer.data, size, buffer.offset);
    }
    lock.lock();
    if (error_.ok())
      error_ = status;
    writing_ = false;
    free_.push_back(index);
    changed_.notify_all();
  }
}

absl::Status FileSink::submit() {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.push_back(current_);
  changed_.notify_all();
  changed_.wait(lock, [&] { return !free_.empty() || !error_.ok(); });
  MOERT_RETURN_IF_ERROR(error_);
  current_ = free_.back();
  free_.pop_back();
  buffers_[current_].fill = 0;
  buffers_[current_].offset = end_;
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint8_t *, size_t>> FileSink::room() {
  if (finished_)
    return absl::InternalError(
        absl::StrCat(path_, ": appended to after it was finished"));
  Buffer &buffer = buffers_[current_];
  return std::make_pair(buffer.data + buffer.fill, bufferBytes_ - buffer.fill);
}

absl::Status FileSink::commit(size_t size) {
  Buffer &buffer = buffers_[current_];
  buffer.fill += size;
  end_ += size;
  if (buffer.fill == bufferBytes_)
    return submit();
  return absl::OkStatus();
}

absl::Status FileSink::append(const void *data, size_t size) {
  const auto *p = static_cast<const uint8_t *>(data);
  while (size) {
    MOERT_ASSIGN_OR_RETURN(auto space, room());
    size_t n = std::min(size, space.second);
    std::memcpy(space.first, p, n);
    MOERT_RETURN_IF_ERROR(commit(n));
    p += n;
    size -= n;
  }
  return absl::OkStatus();
}

absl::Status FileSink::finishStream() {
  if (finished_)
    return absl::OkStatus();
  finished_ = true;
  std::unique_lock<std::mutex> lock(mutex_);
  if (buffers_[current_].fill)
    queue_.push_back(current_);
  stop_ = true;
  changed_.notify_all();
  lock.unlock();
  writer_.join();
  MOERT_RETURN_IF_ERROR(error_);
  // Direct writes of the last buffer end on a block boundary.
  if (regular_ && ::ftruncate(fd_, static_cast<off_t>(end_)) != 0)
    return failure("write", errno);
#if defined(O_DIRECT)
  // Patches are small and anywhere: written through the page cache.
  if (direct_ && ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0)
    return failure("write", errno);
#endif
  return absl::OkStatus();
}

absl::Status FileSink::patch(uint64_t offset, const void *data, size_t size) {
  MOERT_RETURN_IF_ERROR(finishStream());
  if (!regular_)
    return failure("seek", ESPIPE);
  return writeAt(static_cast<const uint8_t *>(data), size, offset);
}

absl::Status FileSink::close() {
  MOERT_RETURN_IF_ERROR(finishStream());
  int fd = fd_;
  fd_ = -1;
  // Network file systems report some write errors only at close.
  if (::close(fd) != 0)
    return failure("write", errno);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// SourceReadAhead
//===----------------------------------------------------------------------===//

namespace {

/// Ranges smaller than this are left to the reader's page faults, and
/// their pages stay.
constexpr uint64_t kMinRangeBytes = uint64_t{1} << 20;
/// Pages are read ahead in steps of this many bytes.
constexpr uint64_t kStepBytes = uint64_t{4} << 20;
/// The reader publishes its progress in steps of this many bytes.
constexpr uint64_t kPublishBytes = uint64_t{1} << 20;

/// The whole pages inside [begin, end), as [first, last) addresses.
std::pair<uintptr_t, uintptr_t> innerPages(uintptr_t begin, uintptr_t end) {
  static const uintptr_t page = [] {
    long size = ::sysconf(_SC_PAGESIZE);
    return static_cast<uintptr_t>(size > 0 ? size : 4096);
  }();
  uintptr_t first = (begin + page - 1) & ~(page - 1), last = end & ~(page - 1);
  return {first, std::max(first, last)};
}

void advise(std::pair<uintptr_t, uintptr_t> pages, int advice) {
#if defined(__linux__)
  if (pages.second > pages.first)
    (void)::madvise(reinterpret_cast<void *>(pages.first),
                    pages.second - pages.first, advice);
#else
  (void)pages;
  (void)advice;
#endif
}

/// Asks the kernel to read [first, last) into the page cache, as one
/// sequential stream. The reader's faults then only map the pages: pages
/// that another thread maps (MADV_POPULATE_READ, or touching them) are not
/// paged out by MADV_PAGEOUT.
void readIn(std::pair<uintptr_t, uintptr_t> pages) {
#if defined(__linux__)
  advise(pages, MADV_SEQUENTIAL);
  advise(pages, MADV_WILLNEED);
#else
  (void)pages;
#endif
}

/// Releases [first, last) (releasePages says how).
void release(std::pair<uintptr_t, uintptr_t> pages) {
#if defined(__linux__)
  if (FileMapping::contains(reinterpret_cast<const void *>(pages.first),
                            reinterpret_cast<const void *>(pages.second))) {
    advise(pages, MADV_DONTNEED);
    return;
  }
#if defined(MADV_PAGEOUT)
  advise(pages, MADV_PAGEOUT);
#endif
#else
  (void)pages;
#endif
}

/// KeepSourcePages objects alive on this thread.
thread_local int keptPages = 0;

} // namespace

KeepSourcePages::KeepSourcePages() { ++keptPages; }
KeepSourcePages::~KeepSourcePages() { --keptPages; }

void releasePages(const void *data, size_t size) {
  if (size < kMinRangeBytes || keptPages > 0)
    return;
  auto begin = reinterpret_cast<uintptr_t>(data);
  release(innerPages(begin, begin + size));
}

SourceReadAhead::SourceReadAhead(std::vector<WeightPiece> ranges,
                                 uint64_t window)
    : ranges_(std::move(ranges)), window_(window) {
  thread_ = std::thread([this] { loop(); });
}

SourceReadAhead::~SourceReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void SourceReadAhead::advance(uint64_t bytes) {
  read_ += bytes;
  if (read_ - published_ < kPublishBytes)
    return;
  published_ = read_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    consumed_ = read_;
  }
  changed_.notify_one();
}

void SourceReadAhead::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t at = 0;
  for (const WeightPiece &range : ranges_) {
    uint64_t base = at;
    at += range.bytes;
    if (!range.data || range.bytes < kMinRangeBytes)
      continue;
    auto begin = reinterpret_cast<uintptr_t>(range.data);
    auto end = begin + range.bytes;
    // Steps end on page boundaries, so that their whole pages tile the
    // range's.
    for (uintptr_t from = begin; from < end;) {
      uintptr_t to = std::min<uintptr_t>(
          end, innerPages(from + kStepBytes, from + kStepBytes).first);
      uint64_t stepEnd = base + (to - begin);
      changed_.wait(lock,
                    [&] { return stop_ || stepEnd <= consumed_ + window_; });
      if (stop_)
        return;
      lock.unlock();
      readIn(innerPages(from, to));
      lock.lock();
      from = to;
    }
  }
}

} // namespace detail
} // namespace moert
