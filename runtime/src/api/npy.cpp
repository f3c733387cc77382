//===- npy.cpp - Reading and writing NumPy .npy files ---------------------===//

#include "moert/npy.h"

#include "format/file_io.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstring>

namespace moert::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

struct DescrEntry {
  const char *descr;
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {
    {"<f4", DType::F32}, {"<f2", DType::F16},  {"<i8", DType::I64},
    {"<i4", DType::I32}, {"|b1", DType::Bool},
};

const char *descrOf(DType dtype) {
  for (const DescrEntry &entry : kDescrs)
    if (entry.dtype == dtype)
      return entry.descr;
  return nullptr;
}

/// A recursive-descent parser for the header's Python dict literal:
/// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  /// Fills descr, fortranOrder and shape; returns an error message or "".
  std::string parse(std::string &descr, bool &fortranOrder,
                    std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    if (!consume('{'))
      return "the header is not a dict";
    while (!consume('}')) {
      std::string key;
      if (!parseString(key))
        return "expected a quoted key";
      if (!consume(':'))
        return absl::StrCat("expected ':' after '", key, "'");
      if (key == "descr" && !haveDescr) {
        haveDescr = true;
        if (!parseString(descr))
          return "descr is not a string";
      } else if (key == "fortran_order" && !haveOrder) {
        haveOrder = true;
        if (consumeWord("True"))
          fortranOrder = true;
        else if (consumeWord("False"))
          fortranOrder = false;
        else
          return "fortran_order is not True or False";
      } else if (key == "shape" && !haveShape) {
        haveShape = true;
        std::string problem = parseShape(shape);
        if (!problem.empty())
          return problem;
      } else {
        return absl::StrCat("unexpected or repeated key '", key, "'");
      }
      if (!consume(',')) {
        if (!consume('}'))
          return "expected ',' or '}'";
        break;
      }
    }
    skipSpace();
    if (pos_ != text_.size())
      return "trailing characters after the dict";
    if (!haveDescr || !haveOrder || !haveShape)
      return "the header lacks descr, fortran_order or shape";
    return "";
  }

private:
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool consume(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool consumeWord(std::string_view word) {
    skipSpace();
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }
  bool parseString(std::string &out) {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return false;
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos)
      return false;
    out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  std::string parseShape(std::vector<int64_t> &shape) {
    if (!consume('('))
      return "shape is not a tuple";
    shape.clear();
    while (!consume(')')) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
        return "shape holds a value that is not a non-negative integer";
      int64_t value = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (__builtin_mul_overflow(value, 10, &value) ||
            __builtin_add_overflow(value, text_[pos_] - '0', &value))
          return "shape value overflows";
        ++pos_;
      }
      shape.push_back(value);
      if (shape.size() > 32)
        return "shape has too many dims";
      if (!consume(',')) {
        if (!consume(')'))
          return "expected ',' or ')' in shape";
        break;
      }
    }
    return "";
  }

  std::string_view text_;
  size_t pos_ = 0;
};

} // namespace

absl::StatusOr<Array> parse(const uint8_t *bytes, size_t size,
                            const std::string &source) {
  auto error = [&](const auto &...args) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a valid .npy file: ", args...));
  };
  if (size < kMagicSize + 4 || std::memcmp(bytes, kMagic, kMagicSize) != 0)
    return error("bad magic");
  uint8_t major = bytes[6], minor = bytes[7];
  size_t headerLength, headerStart;
  if (major == 1 && minor == 0) {
    headerLength = bytes[8] | (size_t{bytes[9]} << 8);
    headerStart = 10;
  } else if ((major == 2 || major == 3) && minor == 0 && size >= 12) {
    headerLength = bytes[8] | (size_t{bytes[9]} << 8) |
                   (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    headerStart = 12;
  } else {
    return error("unsupported format version ", int(major), ".", int(minor));
  }
  if (headerLength > size - headerStart)
    return error("the header of ", headerLength, " bytes runs past the end");
  std::string_view header(reinterpret_cast<const char *>(bytes) + headerStart,
                          headerLength);
  std::string descr;
  bool fortranOrder = false;
  Array array;
  std::string problem =
      HeaderParser(header).parse(descr, fortranOrder, array.shape);
  if (!problem.empty())
    return error(problem);
  const DescrEntry *entry = nullptr;
  for (const DescrEntry &candidate : kDescrs)
    if (descr == candidate.descr)
      entry = &candidate;
  if (!entry)
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": dtype '", descr,
                     "' is not supported (use <f4, <f2, <i8, <i4 or |b1)"));
  if (fortranOrder)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": Fortran-order arrays are not supported (save C order)"));
  array.dtype = entry->dtype;
  uint64_t expected = dtypeSize(array.dtype);
  for (int64_t d : array.shape)
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected))
      return error("shape overflows");
  size_t dataStart = headerStart + headerLength;
  if (size - dataStart != expected)
    return error("shape (", absl::StrJoin(array.shape, ", "), ") of ", descr,
                 " needs ", expected, " data bytes but the file has ",
                 size - dataStart);
  array.data.assign(bytes + dataStart, bytes + size);
  if (array.dtype == DType::Bool)
    for (uint8_t value : array.data)
      if (value > 1)
        return error("bool data holds the byte ", int(value));
  return array;
}

absl::StatusOr<Array> read(const std::string &path) {
  auto named = [&](const absl::Status &status) {
    return absl::Status(status.code(),
                        absl::StrCat(path, ": ", status.message()));
  };
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok())
    return named(file.status());
  // The header is checked against the file's size before any data is used,
  // and the file is read only up to its fstat size.
  absl::StatusOr<std::vector<uint8_t>> bytes = file->readAll();
  if (!bytes.ok())
    return named(bytes.status());
  return parse(bytes->data(), bytes->size(), path);
}

std::vector<uint8_t> serialize(DType dtype, const std::vector<int64_t> &shape,
                               const void *data, size_t bytes) {
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1)
    dims += ",";
  std::string header =
      absl::StrCat("{'descr': '", descrOf(dtype),
                   "', 'fortran_order': False, 'shape': (", dims, "), }");
  // Pad with spaces so that the data starts at a multiple of 64.
  size_t total = kMagicSize + 4 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out(kMagic, kMagic + kMagicSize);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(header.size() & 0xff));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  const auto *p = static_cast<const uint8_t *>(data);
  out.insert(out.end(), p, p + bytes);
  return out;
}

absl::Status write(const std::string &path, DType dtype,
                   const std::vector<int64_t> &shape, const void *data,
                   size_t bytes) {
  if (!descrOf(dtype))
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dtype ", dtypeName(dtype), " has no .npy encoding"));
  std::vector<uint8_t> encoded = serialize(dtype, shape, data, bytes);
  return writeFile(path, encoded.data(), encoded.size());
}

} // namespace moert::npy
