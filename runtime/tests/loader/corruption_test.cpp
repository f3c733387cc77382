//===- corruption_test.cpp - Damaged and hostile plan files ---------------===//
//
// Every damaged plan must give a clear error and never crash: truncation at
// every offset, a bit flip in every byte (caught by the header, section or
// padding checks), header and section-table fields rewritten with valid
// checksums, and program bytes flipped with the checksums recomputed (so that
// the FlatBuffer verifier and the semantic checks see them).
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include "ep_plans.h"
#include "plan_bytes.h"

#include "absl/strings/str_cat.h"

namespace moert::testing {
namespace {

using detail::FileHeader;
using detail::SectionEntry;
using fb::OpKind;

/// A small plan with every region present: header, table, program, weights.
std::vector<uint8_t> samplePlan() {
  PlanWriter writer;
  int t = writer.addSymbol("T", 1, 4);
  ScheduleBuilder &s = writer.schedule();
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(i) - 5.5f;
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t), 3});
  int32_t wt = s.addWeight("w", DType::F32, {3, 4}, w.data(), w.size() * 4);
  int32_t h = s.addTensor("h", DType::F32, {PlanDim::symbol(t), 4});
  fb::AxisAttrsT axis;
  axis.axis = -1;
  int32_t y = s.addTensor("y", DType::F32, {PlanDim::symbol(t), 4});
  s.addInput(x);
  s.addOutput(y);
  s.addStep(OpKind::MatMul, "proj", {x, wt}, {h});
  s.addStep(OpKind::Softmax, "softmax", {h}, {y}, attrs(axis));
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

absl::Status loadBytes(const std::vector<uint8_t> &bytes,
                       const LoadOptions &options = {}) {
  return Plan::loadFromMemory(bytes.data(), bytes.size(), options).status();
}

TEST(Corruption, TheSamplePlanLoads) {
  std::vector<uint8_t> bytes = samplePlan();
  ASSERT_GT(bytes.size(), 4096u);
  EXPECT_TRUE(loadBytes(bytes).ok()) << loadBytes(bytes);
}

TEST(Corruption, TruncationAtEveryOffsetIsAnError) {
  std::vector<uint8_t> bytes = samplePlan();
  for (size_t size = 0; size < bytes.size(); ++size) {
    absl::Status status = Plan::loadFromMemory(bytes.data(), size).status();
    ASSERT_FALSE(status.ok()) << "truncated to " << size;
    ASSERT_TRUE(status.message().find("truncated") != std::string::npos ||
                size == 0)
        << status;
  }
}

TEST(Corruption, EveryFlippedByteIsDetected) {
  std::vector<uint8_t> bytes = samplePlan();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> damaged = bytes;
    damaged[i] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_FALSE(loadBytes(damaged).ok()) << "flip at byte " << i;
  }
}

TEST(Corruption, RegionsReportTheirOwnChecks) {
  std::vector<uint8_t> bytes = samplePlan();
  FileHeader header = detail::decodeHeader(bytes.data());
  SectionEntry program = detail::decodeSection(bytes.data() + kFileHeaderSize);
  SectionEntry weights =
      detail::decodeSection(bytes.data() + kFileHeaderSize + kSectionEntrySize);
  auto flipped = [&](size_t at) {
    std::vector<uint8_t> damaged = bytes;
    damaged[at] ^= 0x10;
    return loadBytes(damaged);
  };
  EXPECT_THAT(flipped(0), StatusHas("not a moec plan (bad magic bytes)"));
  EXPECT_THAT(flipped(40), StatusHas("header checksum mismatch"));
  EXPECT_THAT(flipped(kFileHeaderSize + 26),
              StatusHas("the header or section table is corrupt"));
  EXPECT_THAT(flipped(program.offset + program.size / 2),
              StatusHas("section 0: program checksum mismatch"));
  EXPECT_THAT(flipped(weights.offset + 5),
              StatusHas("section 1: weights checksum mismatch"));
  EXPECT_THAT(flipped(program.offset + program.size + 1),
              StatusHas("padding before section 1 is not zero"));
  EXPECT_EQ(header.sectionCount, 2u);
  // Weight checksums can be skipped (e.g. for a trusted, huge plan); the
  // other checks still run.
  std::vector<uint8_t> damaged = bytes;
  damaged[weights.offset + 5] ^= 0x10;
  LoadOptions fast;
  fast.verifyWeightChecksums = false;
  EXPECT_TRUE(loadBytes(damaged, fast).ok());
}

TEST(Corruption, HeaderFieldsAreChecked) {
  std::vector<uint8_t> bytes = samplePlan();
  auto edited = [&](auto edit) { return loadBytes(rewrite(bytes, edit)); };
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.versionMajor = 2; }),
              StatusHas(absl::StrCat("plan format version 2.3 is not "
                                     "supported; this runtime reads version "
                                     "1.0 to 1.",
                                     kFormatVersionMinor)));
  EXPECT_THAT(edited([](FileHeader &h, auto &) {
                h.versionMinor = kFormatVersionMinor + 1;
              }),
              StatusHas(absl::StrCat("version 1.", kFormatVersionMinor + 1,
                                     " is not supported")));
  // Plans of an older minor version stay readable.
  for (uint16_t minor : {0, 1, 2})
    EXPECT_TRUE(loadBytes(rewrite(bytes, [minor](FileHeader &h, auto &) {
                  h.versionMinor = minor;
                })).ok());
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.fileSize += 1; }),
              StatusHas("header records a file size of"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.backend = 9; }),
              StatusHas("unknown target backend 9"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.deviceCount = 0; }),
              StatusHas("device count 0"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.deviceCount = 2; }),
              StatusHas("program has 1 schedules but the header declares 2"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.sectionCount = 0; }),
              StatusHas("section count 0"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.sectionCount = 4000; }),
              StatusHas("past the end of the file"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.flags = 1; }),
              StatusHas("flags and reserved bytes must be zero"));
  EXPECT_THAT(edited([](FileHeader &h, auto &) { h.headerSize = 32; }),
              StatusHas("must both be 64"));
}

TEST(Corruption, SectionTableEntriesAreChecked) {
  std::vector<uint8_t> bytes = samplePlan();
  auto edited = [&](auto edit) { return loadBytes(rewrite(bytes, edit)); };
  EXPECT_THAT(edited([](auto &, auto &s) { s[1].kind = 7; }),
              StatusHas("section 1: unknown section kind 7"));
  EXPECT_THAT(edited([](auto &, auto &s) { s[1].size = ~uint64_t{0} - 2; }),
              StatusHas("section 1: bytes ["));
  EXPECT_THAT(edited([](auto &, auto &s) { s[1].offset -= 64; }),
              StatusHas("is not a multiple of 4096"));
  EXPECT_THAT(edited([](auto &, auto &s) { s[0].offset = 32; }),
              StatusHas("not inside the file after the section table"));
  EXPECT_THAT(edited([](auto &, auto &s) {
                s[1].kind = static_cast<uint32_t>(SectionKind::Program);
              }),
              StatusHas("section 1"));
  EXPECT_THAT(edited([](auto &, auto &s) {
                s[0].kind = static_cast<uint32_t>(SectionKind::Weights);
                s[0].offset = 4096 * ((s[0].offset + 4095) / 4096);
              }),
              StatusHas("section 0"));
  EXPECT_THAT(edited([](auto &, auto &s) { s[1].reserved = 3; }),
              StatusHas("flags and reserved fields must be zero"));
}

TEST(Corruption, ProgramDamageBehindValidChecksumsNeverCrashes) {
  std::vector<uint8_t> bytes = samplePlan();
  SectionEntry program = detail::decodeSection(bytes.data() + kFileHeaderSize);
  int rejected = 0;
  for (size_t i = 0; i < program.size; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> damaged = flipProgram(bytes, i, mask);
      auto plan = Plan::loadFromMemory(damaged.data(), damaged.size());
      if (!plan.ok()) {
        ++rejected;
        EXPECT_FALSE(plan.status().message().empty());
        continue;
      }
      // Whatever loads must also run (or fail) cleanly.
      auto session = Session::create(**plan, {1});
      if (!session.ok())
        continue;
      for (const TensorDesc &desc : (*plan)->inputs()) {
        std::vector<int64_t> shape;
        int64_t count = 1;
        for (const DimDesc &dim : desc.dims) {
          shape.push_back(dim.bound);
          count *= dim.bound;
        }
        std::vector<uint8_t> data(count * dtypeSize(desc.dtype));
        (void)(*session)->setInput(desc.name, desc.dtype, shape, data.data(),
                                   data.size());
      }
      (void)(*session)->run();
    }
  }
  // Most damage must be caught at load time.
  EXPECT_GT(rejected, static_cast<int>(program.size));
}

TEST(Corruption, ExpertParallelProgramDamageNeverCrashes) {
  // Two schedules with collective steps, start/wait pairs and shared and
  // per-device weights: the multi-device checks see every damaged byte too.
  Placement placement{{0, 2, 4}, {0, 1, 2, 3}};
  absl::StatusOr<std::vector<uint8_t>> bytes =
      writeMoeLayerPlan(&placement, /*overlap=*/true);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(Plan::loadFromMemory(bytes->data(), bytes->size()).ok());
  SectionEntry program = detail::decodeSection(bytes->data() + kFileHeaderSize);
  int rejected = 0;
  for (size_t i = 0; i < program.size; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> damaged = flipProgram(*bytes, i, mask);
      auto plan = Plan::loadFromMemory(damaged.data(), damaged.size());
      if (!plan.ok()) {
        ++rejected;
        EXPECT_FALSE(plan.status().message().empty());
      }
    }
  }
  EXPECT_GT(rejected, static_cast<int>(program.size));
}

TEST(Corruption, ProgramIdentifierAndVerifier) {
  std::vector<uint8_t> bytes = samplePlan();
  // The file identifier lives in bytes 4..8 of the FlatBuffer.
  EXPECT_THAT(loadBytes(flipProgram(bytes, 5, 0x20)),
              StatusHas("lacks the FlatBuffer identifier 'MOEP'"));
  // The root offset pointing outside the buffer.
  EXPECT_THAT(loadBytes(flipProgram(bytes, 3, 0x40)),
              StatusHas("program FlatBuffer fails verification"));
}

} // namespace
} // namespace moert::testing
