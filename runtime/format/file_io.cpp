//===- file_io.cpp - Opening, reading and writing files safely ------------===//

#include "format/file_io.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace moert {

const char *describeFileType(unsigned mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISREG(mode))
    return "a regular file";
  return "not a file";
}

absl::StatusOr<InputFile> InputFile::open(const std::string &path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer. It has no effect on the regular files that pass the check.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open: ", std::strerror(errno)));
  InputFile file(fd, 0);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return absl::InternalError(
        absl::StrCat("cannot stat: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(
        "not a regular file (", describeFileType(st.st_mode), ")"));
  file.size_ = static_cast<uint64_t>(st.st_size);
  return file;
}

InputFile::InputFile(InputFile &&other) noexcept
    : fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

InputFile &InputFile::operator=(InputFile &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

absl::StatusOr<std::vector<uint8_t>> InputFile::readAll(uint64_t maxBytes) {
  if (size_ > maxBytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the file is ", size_, " bytes; at most ", maxBytes, " are read"));
  std::vector<uint8_t> bytes(static_cast<size_t>(size_));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pread(fd_, bytes.data() + done, bytes.size() - done,
                        static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return absl::DataLossError(
          absl::StrCat("cannot read: ", std::strerror(errno)));
    if (n == 0)
      return absl::DataLossError(absl::StrCat("the file shrank to ", done,
                                              " bytes while it was read"));
    done += static_cast<size_t>(n);
  }
  // A file that grew meanwhile would be read only in part.
  uint8_t extra;
  if (::pread(fd_, &extra, 1, static_cast<off_t>(done)) > 0)
    return absl::DataLossError("the file grew while it was read");
  return bytes;
}

absl::Status writeFile(const std::string &path, const void *data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  // A file that could not be written whole is removed, unless the path is
  // no regular file (/dev/full, a FIFO).
  struct stat st;
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  auto fail = [&](int err) {
    if (regular)
      ::unlink(path.c_str());
    return absl::InternalError(
        absl::StrCat(path, ": cannot write: ", std::strerror(err)));
  };
  const auto *p = static_cast<const uint8_t *>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return fail(err);
    }
    done += static_cast<size_t>(n);
  }
  // Network file systems report some write errors only at close.
  if (::close(fd) != 0)
    return fail(errno);
  return absl::OkStatus();
}

uint64_t physicalMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
  uint64_t bytes =
      pages > 0 && pageSize > 0
          ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize)
          : 0;
  // In a container the memory cgroup's limit is what the process can use
  // (cgroup v2; "max" when unlimited).
  if (std::FILE *limit = std::fopen("/sys/fs/cgroup/memory.max", "r")) {
    char text[32] = {};
    size_t n = std::fread(text, 1, sizeof(text) - 1, limit);
    std::fclose(limit);
    uint64_t value = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(std::string(text, n)),
                         &value) &&
        value > 0)
      bytes = bytes ? std::min(bytes, value) : value;
  }
  return bytes;
}

namespace {

/// The first number in `path` (0 when absent or not a number, as "max").
uint64_t readNumber(const std::string &path) {
  std::ifstream in(path);
  uint64_t value = 0;
  return in >> value ? value : 0;
}

} // namespace

uint64_t processMemoryAvailable() {
  uint64_t available = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemAvailable:")
        available = kib * 1024;
      meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
  }
  // "N:memory:/path" (v1) or "0::/path" (v2).
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos)
      continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    uint64_t limit = 0;
    if (controllers == "memory")
      limit =
          readNumber("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
    else if (controllers.empty())
      for (const char *root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
        if (uint64_t v = readNumber(root + path + "/memory.max"))
          limit = limit ? std::min(limit, v) : v;
    if (limit && (!available || limit < available))
      available = limit;
  }
  return available;
}

namespace {
/// The live FileMapping declarations: begin -> end.
struct FileMappings {
  std::mutex mutex;
  std::map<uintptr_t, uintptr_t> ranges;
};

FileMappings &fileMappings() {
  static FileMappings *mappings = new FileMappings;
  return *mappings;
}
} // namespace

FileMapping::FileMapping(const void *data, size_t size)
    : begin_(reinterpret_cast<uintptr_t>(data)) {
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  mappings.ranges[begin_] = begin_ + size;
}

FileMapping::~FileMapping() {
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  mappings.ranges.erase(begin_);
}

bool FileMapping::contains(const void *begin, const void *end) {
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  auto it = mappings.ranges.upper_bound(reinterpret_cast<uintptr_t>(begin));
  if (it == mappings.ranges.begin())
    return false;
  --it;
  return reinterpret_cast<uintptr_t>(end) <= it->second;
}

} // namespace moert
