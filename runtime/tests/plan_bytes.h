//===- plan_bytes.h - Editing plan files behind valid checksums -*- C++ -*-===//
//
// What the corruption tests use to damage a plan's bytes so that the damage
// reaches the checks past the checksums: header and table edits with a fresh
// header checksum, program bytes flipped with the section checksum redone.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_PLAN_BYTES_H
#define MOERT_TESTS_PLAN_BYTES_H

#include "format/plan_file.h"

#include <cstdint>
#include <vector>

namespace moert::testing {

/// Decodes the header and table, lets `edit` change them, re-encodes them
/// with a fresh header checksum.
template <typename Fn>
std::vector<uint8_t> rewrite(std::vector<uint8_t> bytes, Fn edit) {
  detail::FileHeader header = detail::decodeHeader(bytes.data());
  std::vector<detail::SectionEntry> sections;
  for (uint32_t i = 0; i < header.sectionCount; ++i)
    sections.push_back(detail::decodeSection(bytes.data() + kFileHeaderSize +
                                             i * kSectionEntrySize));
  edit(header, sections);
  detail::encodeHeader(header, bytes.data());
  for (size_t i = 0; i < sections.size(); ++i)
    detail::encodeSection(sections[i], bytes.data() + kFileHeaderSize +
                                           i * kSectionEntrySize);
  size_t tableSize = sections.size() * kSectionEntrySize;
  header.checksum = detail::headerChecksum(
      bytes.data(), bytes.data() + kFileHeaderSize, tableSize);
  detail::encodeHeader(header, bytes.data());
  return bytes;
}

/// Flips a bit of the program section and recomputes the section and header
/// checksums, so that only the FlatBuffer verifier and the program
/// validation stand between the bytes and the runtime.
inline std::vector<uint8_t> flipProgram(const std::vector<uint8_t> &bytes,
                                        size_t index, uint8_t mask) {
  detail::SectionEntry program =
      detail::decodeSection(bytes.data() + kFileHeaderSize);
  std::vector<uint8_t> damaged = bytes;
  damaged[program.offset + index] ^= mask;
  return rewrite(damaged, [&](detail::FileHeader &,
                              std::vector<detail::SectionEntry> &s) {
    s[0].checksum = detail::crc32(0, damaged.data() + s[0].offset, s[0].size);
  });
}

} // namespace moert::testing

#endif // MOERT_TESTS_PLAN_BYTES_H
