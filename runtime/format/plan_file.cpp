//===- plan_file.cpp - Encoding of the plan file header -------------------===//

#include "format/plan_file.h"

#include <algorithm>
#include <cstring>
#include <libdeflate.h>
#include <zlib.h>

namespace moert {

namespace detail {
namespace {

template <typename T> void put(uint8_t *out, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out[offset + i] =
        static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
}

template <typename T> T get(const uint8_t *in, size_t offset) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<uint64_t>(in[offset + i]) << (8 * i);
  return static_cast<T>(value);
}

} // namespace

void encodeHeader(const FileHeader &header, uint8_t out[kFileHeaderSize]) {
  std::memset(out, 0, kFileHeaderSize);
  std::memcpy(out, header.magic, sizeof(header.magic));
  put<uint16_t>(out, 8, header.versionMajor);
  put<uint16_t>(out, 10, header.versionMinor);
  put<uint32_t>(out, 12, header.headerSize);
  put<uint64_t>(out, 16, header.fileSize);
  put<uint32_t>(out, 24, header.sectionCount);
  put<uint32_t>(out, 28, header.sectionTableOffset);
  put<uint32_t>(out, 32, header.backend);
  put<uint32_t>(out, 36, header.deviceCount);
  put<uint32_t>(out, 40, header.cudaArch);
  put<uint32_t>(out, 44, header.flags);
  put<uint32_t>(out, kHeaderChecksumOffset, header.checksum);
}

FileHeader decodeHeader(const uint8_t in[kFileHeaderSize]) {
  FileHeader header;
  std::memcpy(header.magic, in, sizeof(header.magic));
  header.versionMajor = get<uint16_t>(in, 8);
  header.versionMinor = get<uint16_t>(in, 10);
  header.headerSize = get<uint32_t>(in, 12);
  header.fileSize = get<uint64_t>(in, 16);
  header.sectionCount = get<uint32_t>(in, 24);
  header.sectionTableOffset = get<uint32_t>(in, 28);
  header.backend = get<uint32_t>(in, 32);
  header.deviceCount = get<uint32_t>(in, 36);
  header.cudaArch = get<uint32_t>(in, 40);
  header.flags = get<uint32_t>(in, 44);
  header.checksum = get<uint32_t>(in, kHeaderChecksumOffset);
  header.reservedZero = std::all_of(in + 52, in + kFileHeaderSize,
                                    [](uint8_t byte) { return byte == 0; });
  return header;
}

void encodeSection(const SectionEntry &entry, uint8_t out[kSectionEntrySize]) {
  put<uint32_t>(out, 0, entry.kind);
  put<uint32_t>(out, 4, entry.flags);
  put<uint64_t>(out, 8, entry.offset);
  put<uint64_t>(out, 16, entry.size);
  put<uint32_t>(out, 24, entry.checksum);
  put<uint32_t>(out, 28, entry.reserved);
}

SectionEntry decodeSection(const uint8_t in[kSectionEntrySize]) {
  SectionEntry entry;
  entry.kind = get<uint32_t>(in, 0);
  entry.flags = get<uint32_t>(in, 4);
  entry.offset = get<uint64_t>(in, 8);
  entry.size = get<uint64_t>(in, 16);
  entry.checksum = get<uint32_t>(in, 24);
  entry.reserved = get<uint32_t>(in, 28);
  return entry;
}

uint32_t crc32(uint32_t crc, const void *data, size_t size) {
  return ::libdeflate_crc32(crc, data, size);
}

uint32_t crc32Combine(uint32_t first, uint32_t second, uint64_t secondSize) {
  // libdeflate has no combine; zlib's computes the same CRC-32.
  return static_cast<uint32_t>(
      ::crc32_combine(first, second, static_cast<z_off_t>(secondSize)));
}

uint32_t headerChecksum(const uint8_t header[kFileHeaderSize],
                        const uint8_t *sectionTable, size_t sectionTableSize) {
  uint8_t copy[kFileHeaderSize];
  std::memcpy(copy, header, kFileHeaderSize);
  std::memset(copy + kHeaderChecksumOffset, 0, 4);
  uint32_t crc = crc32(0, copy, kFileHeaderSize);
  return crc32(crc, sectionTable, sectionTableSize);
}

} // namespace detail
} // namespace moert
