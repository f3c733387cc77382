//===- file_io.h - Opening, reading and writing files safely ----*- C++ -*-===//
//
// The one way moec and the runtime open the files a user names: plans,
// models, external data, .npy inputs. Opening never blocks (a FIFO opened
// without a writer would wait forever), anything but a regular file is
// refused, and reads are sized by fstat of the open descriptor, so
// /dev/zero or a directory cannot be read without bound. Writes check every
// error, the final close included (a full disk often shows only there).
// Pure C++ and POSIX: the compiler links it, the runtime never needs LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_FILE_IO_H
#define MOERT_FILE_IO_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// A regular file open for reading; closes its descriptor when destroyed.
class InputFile {
public:
  /// Opens `path` without blocking and checks that it is a regular file.
  /// The error message does not name the file (each caller names it in its
  /// own way): "cannot open: No such file or directory", "not a regular file
  /// (a FIFO)".
  static absl::StatusOr<InputFile> open(const std::string &path);

  InputFile(InputFile &&other) noexcept;
  InputFile &operator=(InputFile &&other) noexcept;
  InputFile(const InputFile &) = delete;
  InputFile &operator=(const InputFile &) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  /// The size fstat reported when the file was opened.
  uint64_t size() const { return size_; }

  /// Reads the whole file: exactly size() bytes, an error if it is larger
  /// than `maxBytes` or changes size while it is read. The message does not
  /// name the file.
  absl::StatusOr<std::vector<uint8_t>> readAll(uint64_t maxBytes = UINT64_MAX);

private:
  InputFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// What kind of file `mode` (st_mode) is: "a directory", "a FIFO", ...
const char *describeFileType(unsigned mode);

/// Writes `size` bytes to `path` (created or truncated), checking each write
/// and the close. Errors name the file: "PATH: cannot create: ...",
/// "PATH: cannot write: No space left on device".
absl::Status writeFile(const std::string &path, const void *data, size_t size);

/// The machine's physical memory in bytes (0 when it cannot be told).
uint64_t physicalMemoryBytes();

/// The memory this process may use: MemAvailable of /proc/meminfo, at most
/// its memory cgroup's limit (v1 or v2); 0 when unknown.
uint64_t processMemoryAvailable();

/// Declares [data, data + size) a read-only mapping of a file while it
/// lives, so that the plan writer's detail::releasePages may drop its pages
/// from the process and leave them to the page cache (dropping the pages of
/// anonymous memory would zero them). Destroy it before unmapping.
class FileMapping {
public:
  FileMapping(const void *data, size_t size);
  ~FileMapping();
  FileMapping(const FileMapping &) = delete;
  FileMapping &operator=(const FileMapping &) = delete;

  /// Whether [begin, end) lies inside one declared mapping.
  static bool contains(const void *begin, const void *end);

private:
  uintptr_t begin_;
};

} // namespace moert

#endif // MOERT_FILE_IO_H
