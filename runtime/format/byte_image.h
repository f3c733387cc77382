//===- byte_image.h - Byte images of stats for MPI gathers -----*- C++ -*-===//
//
// The writer and reader of the byte images that carry per-device statistics
// (MoE layer stats, traces, moe-run's recordings) from MPI ranks to rank 0
// (DeviceGroup::gather). The reader checks every size against the bytes left
// before it allocates, and stays failed after the first short read.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_BYTE_IMAGE_H
#define MOERT_BYTE_IMAGE_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace moert::detail {

/// Byte images in the host's byte order: both ends of a gather are ranks of
/// one job, on hosts of the same kind.
class ByteWriter {
public:
  void word(uint64_t value) { bytes(&value, sizeof(value)); }
  void real(double value) { bytes(&value, sizeof(value)); }
  void text(const std::string &value) {
    word(value.size());
    bytes(value.data(), value.size());
  }
  template <typename T> void words(const std::vector<T> &values) {
    word(values.size());
    for (T value : values)
      word(static_cast<uint64_t>(value));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

private:
  void bytes(const void *data, size_t size) {
    auto *p = static_cast<const uint8_t *>(data);
    out_.insert(out_.end(), p, p + size);
  }
  std::vector<uint8_t> out_;
};

class ByteReader {
public:
  ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == size_; }
  uint64_t word() {
    uint64_t value = 0;
    bytes(&value, sizeof(value));
    return value;
  }
  double real() {
    double value = 0;
    bytes(&value, sizeof(value));
    return value;
  }
  std::string text() {
    uint64_t size = word();
    if (!ok_ || size > size_ - pos_) {
      ok_ = false;
      return {};
    }
    std::string value(reinterpret_cast<const char *>(data_ + pos_), size);
    pos_ += size;
    return value;
  }
  template <typename T> std::vector<T> words() {
    uint64_t count = word();
    if (!ok_ || count > (size_ - pos_) / sizeof(uint64_t)) {
      ok_ = false;
      return {};
    }
    std::vector<T> values(count);
    for (T &value : values)
      value = static_cast<T>(word());
    return values;
  }

private:
  void bytes(void *out, size_t size) {
    if (!ok_ || size > size_ - pos_) {
      ok_ = false;
      return;
    }
    std::memcpy(out, data_ + pos_, size);
    pos_ += size;
  }
  const uint8_t *data_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

} // namespace moert::detail

#endif // MOERT_BYTE_IMAGE_H
