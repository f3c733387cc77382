//===- moe-crc-bench.cpp - CRC-32 rates of zlib and libdeflate ------------===//
//
//   moe-crc-bench [MIB [ROUNDS [POOL_MIB]]]
//
// Times the CRC-32 of a buffer of MIB MiB (default 11: one expert input of
// the Mixtral sizes, 1024 x 2816 f32) on one thread, with zlib's
// crc32_z (what checked plans before), libdeflate's libdeflate_crc32 and
// the runtime's detail::crc32 (what checks them now), in turns:
//  * cached: the same buffer again and again (in the last-level cache where
//    it fits);
//  * cold: one pass over each of the copies of the buffer that fill
//    POOL_MIB MiB (default 512), so that every pass reads from memory, as
//    the store's check of an expert just read with O_DIRECT does.
// Each of ROUNDS rounds (default 5) times every implementation once per
// case; the best GB/s of the rounds is printed, with the load average.
// Exits 1 when the implementations disagree.
//
//===----------------------------------------------------------------------===//

#include "format/plan_file.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <libdeflate.h>
#include <random>
#include <vector>
#include <zlib.h>

namespace {

double seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using Crc = uint32_t (*)(const uint8_t *, size_t);

/// Where every CRC goes, so that none is optimised away.
volatile uint32_t sink;

uint32_t zlibCrc(const uint8_t *data, size_t size) {
  return static_cast<uint32_t>(crc32_z(0, data, size));
}
uint32_t deflateCrc(const uint8_t *data, size_t size) {
  return libdeflate_crc32(0, data, size);
}
uint32_t runtimeCrc(const uint8_t *data, size_t size) {
  return moert::detail::crc32(0, data, size);
}

/// GB/s of `crc` over `passes` passes, the i-th over copies[i % count].
double rate(Crc crc, const std::vector<std::vector<uint8_t>> &copies,
            size_t passes) {
  double start = seconds();
  for (size_t i = 0; i < passes; ++i) {
    const std::vector<uint8_t> &copy = copies[i % copies.size()];
    sink = crc(copy.data(), copy.size());
  }
  return double(passes) * double(copies[0].size()) / (seconds() - start) / 1e9;
}

} // namespace

int main(int argc, char **argv) {
  double mib = argc > 1 ? std::atof(argv[1]) : 11.0;
  int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  double poolMib = argc > 3 ? std::atof(argv[3]) : 512.0;
  size_t size = static_cast<size_t>(mib * (1 << 20));
  if (size == 0) {
    std::fprintf(stderr, "usage: %s [MIB [ROUNDS [POOL_MIB]]]\n", argv[0]);
    return 2;
  }
  size_t count =
      std::max<size_t>(2, static_cast<size_t>(poolMib * (1 << 20)) / size);
  std::mt19937_64 rng(1);
  std::vector<std::vector<uint8_t>> copies(count, std::vector<uint8_t>(size));
  for (std::vector<uint8_t> &copy : copies)
    for (size_t i = 0; i < size; i += 8) {
      uint64_t word = rng();
      for (size_t k = 0; k < 8 && i + k < size; ++k)
        copy[i + k] = static_cast<uint8_t>(word >> (8 * k));
    }

  struct Impl {
    const char *name;
    Crc crc;
    double cached = 0, cold = 0;
  };
  Impl impls[] = {{"zlib crc32_z", zlibCrc},
                  {"libdeflate_crc32", deflateCrc},
                  {"moert detail::crc32", runtimeCrc}};
  for (const std::vector<uint8_t> &copy : copies)
    for (const Impl &impl : impls)
      if (impl.crc(copy.data(), size) != zlibCrc(copy.data(), size)) {
        std::fprintf(stderr, "%s disagrees with zlib\n", impl.name);
        return 1;
      }

  // About 1 GB of cached passes per round; one pass over each cold copy.
  size_t cachedPasses = std::max<size_t>(4, size_t(1e9) / size);
  std::vector<std::vector<uint8_t>> one(copies.begin(), copies.begin() + 1);
  for (int r = 0; r < rounds; ++r)
    for (Impl &impl : impls) {
      impl.cached = std::max(impl.cached, rate(impl.crc, one, cachedPasses));
      impl.cold = std::max(impl.cold, rate(impl.crc, copies, count));
    }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("CRC-32 of %.2f MiB, one thread, best of %d rounds; cold: %zu "
              "copies (%.0f MiB); load average %.2f %.2f %.2f\n",
              double(size) / (1 << 20), rounds, count,
              double(count * size) / (1 << 20), load[0], load[1], load[2]);
  std::printf("| implementation | cached GB/s | cold GB/s |\n|---|---|---|\n");
  for (const Impl &impl : impls)
    std::printf("| %s | %.2f | %.2f |\n", impl.name, impl.cached, impl.cold);
  return 0;
}
