//===- plan_stream_test.cpp - Streaming a plan's bytes to a file ----------===//

#include "format/plan_stream.h"

#include "format/file_io.h"
#include "format/plan_writer.h"

#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace moert::testing {
namespace {

using detail::FileSink;
using detail::Sink;
using detail::VectorSink;

/// Appends the same bytes to `sink` in the ways emit does: copies of every
/// size (several buffers' worth among them, and sizes that cut a buffer
/// anywhere), bytes filled in place, and two patches once all is appended.
absl::Status feed(Sink &sink, const std::vector<uint8_t> &data) {
  size_t at = 0;
  std::mt19937 rng(7);
  std::vector<size_t> sizes = {1, 4095, FileSink::kDirectBufferBytes * 2 + 17,
                               64, FileSink::kBufferBytes - 3};
  for (int i = 0; i < 40; ++i)
    sizes.push_back(rng() % 300000);
  for (size_t i = 0; i < sizes.size() && at < data.size(); ++i) {
    size_t n = std::min(sizes[i], data.size() - at);
    if (i % 2) {
      MOERT_RETURN_IF_ERROR(sink.append(data.data() + at, n));
      at += n;
      continue;
    }
    while (n) {
      MOERT_ASSIGN_OR_RETURN(auto room, sink.room());
      if (room.second == 0)
        return absl::InternalError("empty room");
      size_t take = std::min(n, room.second);
      std::memcpy(room.first, data.data() + at, take);
      MOERT_RETURN_IF_ERROR(sink.commit(take));
      at += take;
      n -= take;
    }
  }
  MOERT_RETURN_IF_ERROR(sink.append(data.data() + at, data.size() - at));
  const char patch[] = "patched";
  MOERT_RETURN_IF_ERROR(sink.patch(3, patch, sizeof(patch)));
  return sink.patch(FileSink::kDirectBufferBytes + 5, patch, sizeof(patch));
}

/// `size` random bytes.
std::vector<uint8_t> randomBytes(size_t size, std::mt19937 &rng) {
  std::vector<uint8_t> data(size);
  for (uint8_t &byte : data)
    byte = static_cast<uint8_t>(rng());
  return data;
}

/// Feeds `data` to a FileSink at `path` and to a VectorSink, and expects
/// the file to hold what the vector does.
void expectFileSinkWrites(const std::string &path,
                          const std::vector<uint8_t> &data, bool direct,
                          bool truncate, const std::string &what) {
  VectorSink expected;
  ASSERT_TRUE(feed(expected, data).ok());
  ASSERT_EQ(expected.bytes.size(), data.size());
  auto sink = FileSink::create(path, direct, truncate);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_TRUE((*sink)->regular());
  ASSERT_TRUE(feed(**sink, data).ok());
  ASSERT_TRUE((*sink)->close().ok());
  absl::StatusOr<InputFile> file = InputFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<uint8_t>> bytes = file->readAll(~uint64_t{0});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(*bytes == expected.bytes) << what;
}

TEST(FileSink, WritesWhatAVectorHolds) {
  std::mt19937 rng(1);
  std::vector<uint8_t> data =
      randomBytes(FileSink::kDirectBufferBytes * 5 + 12345, rng);
  // With direct I/O (the last block's padding truncated away) and without.
  for (bool direct : {true, false}) {
    std::string path = ::testing::TempDir() + "/plan_stream_test.bin";
    expectFileSinkWrites(path, data, direct, /*truncate=*/true,
                         direct ? "direct" : "buffered");
    std::remove(path.c_str());
  }
}

TEST(FileSink, OverwritesInPlaceAndEndsWhereTheBytesEnd) {
  // A file written again without truncation (the rewrite validator's
  // scratch plan): larger, then smaller, then larger than before, each time
  // the file is exactly what was fed.
  std::string path = ::testing::TempDir() + "/plan_stream_in_place.bin";
  std::mt19937 rng(2);
  for (size_t size : {FileSink::kDirectBufferBytes * 2 + 77,
                      FileSink::kDirectBufferBytes + 4097,
                      FileSink::kDirectBufferBytes * 3 + 5})
    expectFileSinkWrites(path, randomBytes(size, rng), /*direct=*/true,
                         /*truncate=*/false, std::to_string(size) + " bytes");
  std::remove(path.c_str());
}

TEST(FileSink, ReportsWriteErrors) {
  // The error of the writer thread comes back from a later call.
  auto sink = FileSink::create("/dev/full", /*direct=*/true);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_FALSE((*sink)->regular());
  std::vector<uint8_t> data(FileSink::kDirectBufferBytes * FileSink::kBuffers +
                            1);
  absl::Status status = (*sink)->append(data.data(), data.size());
  if (status.ok())
    status = (*sink)->close();
  EXPECT_THAT(status,
              StatusHas("/dev/full: cannot write: No space left on device"));
  EXPECT_THAT(FileSink::create("/nonexistent/plan.bin", true).status(),
              StatusHas("/nonexistent/plan.bin: cannot create"));
}

/// A plan of one weight [E, rows, cols] from `pieces`, stored transposed and
/// copied to its output by an Identity step: the output's values.
std::vector<float> transposedThroughPlan(std::vector<WeightPiece> pieces,
                                         int64_t experts, int64_t rows,
                                         int64_t cols, bool toFile) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t w = s.addWeightPieces("w", DType::F32, {experts, rows, cols},
                                std::move(pieces));
  s.transposeExpertMatrices(w);
  int32_t y = s.addTensor("y", DType::F32, {experts, cols, rows});
  s.addStep(fb::OpKind::Identity, "copy", {w}, {y});
  s.addOutput(y);
  std::unique_ptr<Plan> plan;
  if (toFile) {
    std::string path = ::testing::TempDir() + "/plan_stream_test.plan";
    EXPECT_TRUE(writer.write(path).ok());
    auto loaded = Plan::load(path);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    std::remove(path.c_str());
    if (!loaded.ok())
      return {};
    plan = std::move(*loaded);
  } else {
    auto bytes = writer.serialize();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto loaded = Plan::loadFromMemory(bytes->data(), bytes->size());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok())
      return {};
    plan = std::move(*loaded);
  }
  auto session = Session::create(*plan);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok() || !(*session)->run().ok())
    return {};
  auto out = (*session)->output("y");
  const auto *values = static_cast<const float *>(out->data);
  return std::vector<float>(values, values + experts * rows * cols);
}

TEST(PlanStream, TransposesExpertMatrices) {
  // Shapes with and without whole 8 x 8 blocks, and with part of a strip
  // (16 columns by 64 rows) at the end; expert 1 split over two pieces
  // (read through a copy), one of them unaligned.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{64, 128},
                            {9, 19},
                            {16, 3},
                            {1, 70},
                            {136, 40},
                            {130, 45}}) {
    const int64_t experts = 3, per = rows * cols;
    std::vector<float> values(experts * per);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(i) * 0.5f - 7.0f;
    std::vector<uint8_t> unaligned(per * sizeof(float) + 1);
    std::memcpy(unaligned.data() + 1, values.data() + per + 1,
                (per - 1) * sizeof(float));
    std::vector<WeightPiece> pieces = {
        {values.data(), per * sizeof(float)},
        {values.data() + per, sizeof(float)},
        {unaligned.data() + 1, (per - 1) * sizeof(float)},
        {values.data() + 2 * per, per * sizeof(float)}};
    std::vector<float> expected(values.size());
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          expected[e * per + c * rows + r] = values[e * per + r * cols + c];
    for (bool toFile : {false, true})
      EXPECT_EQ(transposedThroughPlan(pieces, experts, rows, cols, toFile),
                expected)
          << rows << " x " << cols << (toFile ? ", file" : ", memory");
  }
}

TEST(PlanStream, FileHoldsTheSerializedBytes) {
  // A plan large enough to be written with direct I/O, from one buffer read
  // ahead and released, narrowed in part.
  const int64_t rows = 1024, cols = 1024, experts = 66;
  std::vector<float> values(rows * cols * 4);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::sin(static_cast<float>(i));
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<WeightPiece> pieces;
  for (int64_t e = 0; e < experts; ++e)
    pieces.push_back(
        {values.data() + (e % 4) * rows * cols, rows * cols * sizeof(float)});
  int32_t w = s.addWeightPieces("w", DType::F32, {experts, rows, cols}, pieces);
  s.transposeExpertMatrices(w);
  int32_t h = s.addNarrowedWeightPieces("h", DType::BF16, {4, rows, cols},
                                        {{values.data(), values.size() * 4}});
  int32_t y = s.addTensor("y", DType::BF16, {4, rows, cols});
  s.addStep(fb::OpKind::Identity, "copy", {h}, {y});
  s.addOutput(y);
  (void)w;
  std::string path = ::testing::TempDir() + "/plan_stream_large.plan";
  ASSERT_TRUE(writer.write(path).ok());
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<InputFile> file = InputFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<uint8_t>> written = file->readAll(~uint64_t{0});
  ASSERT_TRUE(written.ok()) << written.status();
  std::remove(path.c_str());
  EXPECT_GT(written->size(), uint64_t{256} << 20);
  EXPECT_TRUE(*written == *bytes);
}

#if defined(__linux__)
/// How many of the pages of [data, data + bytes) are in memory.
size_t residentPages(const void *data, size_t bytes) {
  const size_t page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (::mincore(const_cast<void *>(data), bytes, in.data()) != 0)
    return 0;
  size_t resident = 0;
  for (unsigned char flags : in)
    resident += flags & 1;
  return resident;
}

TEST(ReleasePages, PagesOutAMappedFileUnlessKept) {
  // Two 4 MiB halves of a file, mapped and read: releasePages pages out
  // the first; under KeepSourcePages it leaves the second in memory (the
  // rewrite validator's first side keeps a layer's pages for the second).
  const size_t half = size_t{4} << 20, page = ::sysconf(_SC_PAGESIZE);
  std::string path = ::testing::TempDir() + "/release_pages_test.bin";
  {
    std::vector<uint8_t> bytes(2 * half, 7);
    FILE *f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fflush(f), 0);
    ASSERT_EQ(::fsync(::fileno(f)), 0);
    std::fclose(f);
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void *map = ::mmap(nullptr, 2 * half, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  std::remove(path.c_str());
  ASSERT_NE(map, MAP_FAILED);
  const auto *data = static_cast<const volatile uint8_t *>(map);
  unsigned sum = 0;
  for (size_t at = 0; at < 2 * half; at += page)
    sum += data[at];
  EXPECT_EQ(sum, 7 * (2 * half / page));
  const auto *first = static_cast<const uint8_t *>(map);
  const auto *second = first + half;
  ASSERT_EQ(residentPages(second, half), half / page);
  {
    detail::KeepSourcePages keep;
    detail::releasePages(second, half);
  }
  EXPECT_EQ(residentPages(second, half), half / page);
  detail::releasePages(first, half);
  const size_t left = residentPages(first, half);
  ::munmap(map, 2 * half);
  if (left == half / page)
    GTEST_SKIP() << "this kernel or file system pages nothing out "
                    "(MADV_PAGEOUT): nothing to keep";
  EXPECT_LT(left, half / page);
}

/// The kB of `map`'s pages that this process has mapped (smaps' Rss of the
/// mapping that starts at `map`), or -1 if /proc cannot tell.
long mappedKiB(const void *map) {
  std::ifstream smaps("/proc/self/smaps");
  char start[32];
  std::snprintf(start, sizeof(start), "%lx-",
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(map)));
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.rfind(start, 0) == 0)
      inside = true;
    else if (inside && line.rfind("Rss:", 0) == 0)
      return std::stol(line.substr(4));
  }
  return -1;
}

TEST(ReleasePages, DropsADeclaredFileMappingAndLeavesItCached) {
  // A file mapped, read and declared a FileMapping: releasePages takes its
  // pages out of the process (Rss), leaves them in the page cache (mincore
  // tells the cache's residency for a file) and its bytes unchanged.
  const size_t bytes = size_t{8} << 20, page = ::sysconf(_SC_PAGESIZE);
  std::string path = ::testing::TempDir() + "/release_mapping_test.bin";
  {
    std::vector<uint8_t> values(bytes, 5);
    FILE *f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(values.data(), 1, values.size(), f), values.size());
    std::fclose(f);
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void *map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  std::remove(path.c_str());
  ASSERT_NE(map, MAP_FAILED);
  const auto *data = static_cast<const volatile uint8_t *>(map);
  auto sum = [&] {
    unsigned total = 0;
    for (size_t at = 0; at < bytes; at += page)
      total += data[at];
    return total;
  };
  EXPECT_EQ(sum(), 5 * (bytes / page));
  {
    FileMapping declared(map, bytes);
    const auto *begin = static_cast<const uint8_t *>(map);
    EXPECT_TRUE(FileMapping::contains(begin + page, begin + bytes));
    EXPECT_FALSE(FileMapping::contains(begin + page, begin + bytes + 1));
    long before = mappedKiB(map);
    if (before < 0) {
      ::munmap(map, bytes);
      GTEST_SKIP() << "no /proc/self/smaps";
    }
    EXPECT_EQ(static_cast<size_t>(before), bytes >> 10);
    detail::releasePages(map, bytes);
    EXPECT_EQ(mappedKiB(map), 0);
    EXPECT_EQ(residentPages(map, bytes), bytes / page);
  }
  EXPECT_FALSE(FileMapping::contains(static_cast<const uint8_t *>(map),
                                     static_cast<const uint8_t *>(map) + 1));
  EXPECT_EQ(sum(), 5 * (bytes / page));
  ::munmap(map, bytes);
}

TEST(ReleasePages, KeepsTheBytesOfAnonymousMemory) {
  // Memory that no FileMapping declares is paged out, never dropped:
  // dropping anonymous pages would zero them.
  std::vector<uint8_t> values(size_t{4} << 20, 9);
  detail::releasePages(values.data(), values.size());
  EXPECT_TRUE(std::all_of(values.begin(), values.end(),
                          [](uint8_t v) { return v == 9; }));
}
#endif

} // namespace
} // namespace moert::testing
