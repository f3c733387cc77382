//===- format.cpp - Names and sizes shared by the writer and the runtime --===//

#include "format/format.h"
#include "format/version.h"
#include "moert/moert.h"

namespace moert {

const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Cpu:
    return "cpu";
  case Backend::Cuda:
    return "cuda";
  }
  return "unknown";
}

bool parseByteSize(const char *text, uint64_t &bytes) {
  uint64_t value = 0;
  const char *p = text;
  if (*p < '0' || *p > '9')
    return false;
  for (; *p >= '0' && *p <= '9'; ++p)
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, uint64_t(*p - '0'), &value))
      return false;
  int shift = 0;
  switch (*p) {
  case 'K':
  case 'k':
    shift = 10;
    break;
  case 'M':
  case 'm':
    shift = 20;
    break;
  case 'G':
  case 'g':
    shift = 30;
    break;
  case 'T':
  case 't':
    shift = 40;
    break;
  default:
    break;
  }
  if (shift) {
    ++p;
    if (*p == 'i')
      ++p;
    if (*p == 'B')
      ++p;
  } else if (*p == 'B') {
    ++p;
  }
  if (*p != '\0' || value == 0 || value > (uint64_t{1} << (63 - shift)))
    return false;
  bytes = value << shift;
  return true;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "bool";
  case DType::I8:
    return "i8";
  }
  return "invalid";
}

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I64:
    return 8;
  case DType::Bool:
  case DType::I8:
    return 1;
  }
  return 0;
}

std::string getVersionLine(std::string_view tool) {
  return std::string(tool) + " " + getVersion() + " (git " + getGitCommit() +
         "), reads plan format " + std::to_string(kFormatVersionMajor) +
         ".0 to " + std::to_string(kFormatVersionMajor) + "." +
         std::to_string(kFormatVersionMinor);
}

} // namespace moert
