//===- fuzz_plan.cpp - libFuzzer target: plan bytes to one CPU run --------===//
//
// The runtime alone (no LLVM): load the bytes with the verifying loader and,
// when they are a single-device CPU plan of a modest arena, create a session,
// set every input to generated values (as moe-run does when given none) and
// run it once, reading every output. A plan the loader accepts must run or
// fail with a status; anything else (a crash, a sanitizer report, a hang)
// is a bug of the loader's checks or of a kernel.
//
// The custom mutator edits the bytes and then, nine times in ten, rewrites
// the file size and the CRC-32s of the header and of every section that lies
// inside the file, so that mutants get past the checksums to the FlatBuffer
// verifier and the loader's semantic checks.
//
//===----------------------------------------------------------------------===//

#include "format/format.h"
#include "format/plan_file.h"
#include "moert/moert.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

/// Plans whose arena is larger are loaded but not run: a 1 KiB mutant may
/// legitimately declare gigabytes of activations.
constexpr uint64_t kMaxArena = 64 << 20;
/// Symbolic sizes (the token count) of the generated inputs, within the
/// symbol's range: small runs, but more than one token.
constexpr int64_t kTokens = 3;

/// The size a generated input takes for `dim`.
int64_t generatedDim(const moert::Plan &plan, const moert::DimDesc &dim) {
  if (dim.kind == moert::DimDesc::Kind::Static)
    return dim.bound;
  int64_t lo = 0, hi = dim.bound;
  for (const moert::SymbolDesc &symbol : plan.symbols())
    if (dim.kind == moert::DimDesc::Kind::Symbolic &&
        symbol.name == dim.symbol) {
      lo = symbol.min;
      hi = std::min(hi, symbol.max);
    }
  return std::clamp(kTokens, lo, std::max(lo, hi));
}

/// Sets input `desc` to seeded values: uniform in [-1, 1) for floats, in the
/// plan's value range for integers, 0/1 for bools. False if it cannot (an
/// unsupported dtype, a size the runtime rejects).
bool setInput(const moert::Plan &plan, moert::Session &session,
              const moert::TensorDesc &desc, std::mt19937_64 &rng) {
  std::vector<int64_t> shape;
  uint64_t count = 1;
  for (const moert::DimDesc &dim : desc.dims) {
    int64_t size = generatedDim(plan, dim);
    if (size < 0 || (size && count > (kMaxArena >> 2) / uint64_t(size)))
      return false;
    shape.push_back(size);
    count *= uint64_t(size);
  }
  size_t elementSize = moert::dtypeSize(desc.dtype);
  if (!elementSize)
    return false;
  std::vector<uint8_t> bytes(count * elementSize);
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t *p = bytes.data() + i * elementSize;
    switch (desc.dtype) {
    case moert::DType::F32: {
      float v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      std::memcpy(p, &v, sizeof v);
      break;
    }
    case moert::DType::I64:
    case moert::DType::I32: {
      int64_t lo = desc.hasValueRange ? desc.valueLo : 0;
      int64_t hi = desc.hasValueRange ? desc.valueHi : 2;
      int64_t v = hi > lo ? lo + int64_t(rng() % uint64_t(hi - lo)) : lo;
      if (desc.dtype == moert::DType::I64) {
        std::memcpy(p, &v, sizeof v);
      } else {
        int32_t v32 = int32_t(v);
        std::memcpy(p, &v32, sizeof v32);
      }
      break;
    }
    case moert::DType::Bool:
      *p = uint8_t(rng() & 1);
      break;
    default: // f16/bf16: any bit pattern of small magnitude
      p[0] = uint8_t(rng());
      p[1] = uint8_t(0x3c & rng());
      break;
    }
  }
  return session
      .setInput(desc.name, desc.dtype, shape, bytes.data(), bytes.size())
      .ok();
}

/// Makes `data` self-consistent again after a byte-level edit: the header's
/// file size and checksum, and the checksum of every section within the
/// file.
void fixChecksums(uint8_t *data, size_t size) {
  using namespace moert;
  if (size < kFileHeaderSize)
    return;
  detail::FileHeader header = detail::decodeHeader(data);
  header.fileSize = size;
  uint64_t tableOffset = header.sectionTableOffset;
  uint64_t count = std::min<uint64_t>(header.sectionCount, kMaxSections);
  uint64_t tableSize = count * kSectionEntrySize;
  if (tableOffset > size || tableSize > size - tableOffset)
    return;
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t *raw = data + tableOffset + i * kSectionEntrySize;
    detail::SectionEntry entry = detail::decodeSection(raw);
    if (entry.offset <= size && entry.size <= size - entry.offset) {
      entry.checksum = detail::crc32(0, data + entry.offset, entry.size);
      detail::encodeSection(entry, raw);
    }
  }
  detail::encodeHeader(header, data);
  header.checksum = detail::headerChecksum(data, data + tableOffset, tableSize);
  detail::encodeHeader(header, data);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  absl::StatusOr<std::unique_ptr<moert::Plan>> loaded =
      moert::Plan::loadFromMemory(data, size);
  if (!loaded.ok())
    return 0;
  const moert::Plan &plan = **loaded;
  // A multi-device plan needs a device group; a CUDA plan a GPU.
  if (plan.numDevices() != 1 || plan.target().backend != moert::Backend::Cpu ||
      plan.arenaSize(0) > kMaxArena)
    return 0;
  moert::SessionOptions options;
  options.threads = 1;
  options.collectStats = false;
  absl::StatusOr<std::unique_ptr<moert::Session>> session =
      moert::Session::create(plan, options);
  if (!session.ok())
    return 0;
  std::mt19937_64 rng(size);
  for (const moert::TensorDesc &input : plan.inputs(0))
    if (!setInput(plan, **session, input, rng))
      return 0;
  if (!(*session)->run().ok())
    return 0;
  // Reads every output byte, so that ASan checks the views the session
  // hands out.
  volatile uint8_t sink = 0;
  for (const moert::TensorDesc &output : plan.outputs(0)) {
    absl::StatusOr<moert::TensorData> value = (*session)->output(output.name);
    if (!value.ok())
      continue;
    const auto *bytes = static_cast<const uint8_t *>(value->data);
    for (size_t i = 0; i < value->bytes; ++i)
      sink ^= bytes[i];
  }
  (void)sink;
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  size = LLVMFuzzerMutate(data, size, maxSize);
  if (seed % 10)
    fixChecksums(data, size);
  return size;
}
