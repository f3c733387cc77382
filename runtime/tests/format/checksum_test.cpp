//===- checksum_test.cpp - The plans' CRC-32 ------------------------------===//
//
// detail::crc32 (libdeflate's) is the standard CRC-32 and equals zlib's
// crc32_z, which computed every checksum of the plans written before it, at
// every length, alignment and split; crc32Combine (zlib's) joins two of
// them. A tiered plan's header, section and per-expert checksums are zlib's,
// so a plan written before loads and its experts verify.
//
//===----------------------------------------------------------------------===//

#include "expert_network.h"
#include "format/plan_file.h"
#include "loader/plan_impl.h"

#include <random>
#include <zlib.h>

namespace moert::testing {
namespace {

uint32_t zlibCrc(const uint8_t *data, size_t size) {
  return static_cast<uint32_t>(crc32_z(0, data, size));
}

std::vector<uint8_t> randomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t &byte : bytes)
    byte = static_cast<uint8_t>(rng());
  return bytes;
}

TEST(Crc32, IsTheStandardCrc32) {
  const char *check = "123456789";
  const auto *bytes = reinterpret_cast<const uint8_t *>(check);
  EXPECT_EQ(detail::crc32(0, bytes, 9), 0xCBF43926u);
  EXPECT_EQ(detail::crc32(detail::crc32(0, bytes, 4), bytes + 4, 5),
            0xCBF43926u);
  EXPECT_EQ(detail::crc32(0, nullptr, 0), 0u);
  EXPECT_EQ(detail::crc32(0xCBF43926u, bytes, 0), 0xCBF43926u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(detail::crc32(0, zeros.data(), zeros.size()), 0x190A55ADu);
}

TEST(Crc32, EqualsZlibsAtEveryLengthAlignmentAndSplit) {
  // Past 11 MiB + 13: an expert input of the sizes, unaligned.
  std::vector<uint8_t> bytes = randomBytes((11 << 20) + 64, 7);
  std::vector<size_t> sizes;
  for (size_t size = 0; size <= 300; ++size)
    sizes.push_back(size);
  for (size_t size : {4095, 4096, 4097, 65536 + 5, 1 << 20, (11 << 20) + 13})
    sizes.push_back(size);
  for (size_t size : sizes) {
    // Every start alignment for short lengths, a few for long ones.
    size_t step = size <= 300 ? 1 : 5;
    for (size_t offset = 0; offset < 16; offset += step)
      ASSERT_EQ(detail::crc32(0, bytes.data() + offset, size),
                zlibCrc(bytes.data() + offset, size))
          << size << " bytes at offset " << offset;
  }
  // Continued over random pieces, as the plan writer feeds it.
  std::mt19937 rng(3);
  size_t at = 0;
  uint32_t crc = 0;
  while (at < bytes.size()) {
    size_t piece = std::min<size_t>(bytes.size() - at, rng() % 100000);
    crc = detail::crc32(crc, bytes.data() + at, piece);
    at += piece;
  }
  EXPECT_EQ(crc, zlibCrc(bytes.data(), bytes.size()));
}

TEST(Crc32, CombineJoinsTwoChecksums) {
  std::vector<uint8_t> bytes = randomBytes(100000, 9);
  for (size_t split : {0, 1, 4096, 65537, 100000}) {
    uint32_t first = detail::crc32(0, bytes.data(), split);
    uint32_t second =
        detail::crc32(0, bytes.data() + split, bytes.size() - split);
    EXPECT_EQ(detail::crc32Combine(first, second, bytes.size() - split),
              zlibCrc(bytes.data(), bytes.size()))
        << "split at " << split;
  }
}

TEST(Crc32, APlansChecksumsAreZlibsSoOlderPlansLoad) {
  Network net;
  net.biases = true;
  net.init(/*experts=*/8, /*hidden=*/64, /*inter=*/96, /*seed=*/11);
  absl::StatusOr<std::vector<uint8_t>> plan =
      writeTieredPlan(net, 4, /*tiered=*/true, uint64_t{1} << 40, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint8_t *bytes = plan->data();
  detail::FileHeader header = detail::decodeHeader(bytes);
  size_t table = header.sectionCount * kSectionEntrySize;
  std::vector<uint8_t> zeroed(bytes, bytes + kFileHeaderSize + table);
  std::fill_n(zeroed.begin() + detail::kHeaderChecksumOffset, 4, 0);
  EXPECT_EQ(header.checksum, zlibCrc(zeroed.data(), zeroed.size()));
  ASSERT_EQ(header.sectionCount, 2u);
  for (uint32_t i = 0; i < header.sectionCount; ++i) {
    detail::SectionEntry entry =
        detail::decodeSection(bytes + kFileHeaderSize + i * kSectionEntrySize);
    EXPECT_EQ(entry.checksum, zlibCrc(bytes + entry.offset, entry.size))
        << "section " << i;
  }
  // Every expert's checksum of every paged input, and every expert read.
  absl::StatusOr<std::unique_ptr<Plan>> loaded =
      Plan::loadFromMemory(plan->data(), plan->size());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const detail::TierInfo &tiers = (*loaded)->impl().schedules[0].tiers;
  ASSERT_EQ(tiers.layers.size(), 1u);
  const detail::TierLayerInfo &layer = tiers.layers[0];
  ASSERT_EQ(layer.experts, 8u);
  ASSERT_GE(layer.inputs.size(), 3u);
  for (uint32_t e = 0; e < layer.experts; ++e)
    for (size_t i = 0; i < layer.inputs.size(); ++i) {
      const detail::PagedInput &input = layer.inputs[i];
      EXPECT_EQ(layer.crc[e * layer.inputs.size() + i],
                zlibCrc(bytes + input.fileOffset + e * input.expertBytes,
                        input.expertBytes))
          << "expert " << e << ", input " << i;
    }
  std::vector<int64_t> offsets = {0, 1, 1, 2, 3, 3, 4, 4, 4};
  SessionOptions options;
  options.threads = 2;
  options.deviceMemory = tiers.residentBytes + 2 * layer.expertBytes;
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::create(**loaded, options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> x = randomFloats(4 * net.H, 1);
  ASSERT_TRUE((*session)
                  ->setInput("x", DType::F32, {4, net.H}, x.data(),
                             x.size() * sizeof(float))
                  .ok());
  ASSERT_TRUE((*session)
                  ->setInput("offsets", DType::I64, {9}, offsets.data(),
                             offsets.size() * sizeof(int64_t))
                  .ok());
  absl::Status run = (*session)->run();
  EXPECT_TRUE(run.ok()) << run;
}

} // namespace
} // namespace moert::testing
