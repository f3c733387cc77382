//===- Tensors.cpp - ONNX tensors to elements attributes ------------------===//

#include "compiler/onnx/Tensors.h"

#include "compiler/onnx/Model.h"
#include "format/file_io.h"
#include "format/float16.h"

#include <cstring>

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Alignment.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace moec::onnx_import;
using onnx::TensorProto;

// Raw and typed tensor data are little-endian; the blobs reference them as is.
static_assert(llvm::endianness::native == llvm::endianness::little,
              "moec reads ONNX tensor data in place: little-endian hosts only");

namespace {
/// What moec knows of one ONNX data type.
struct DataTypeInfo {
  llvm::StringLiteral name;
  /// Bytes per element; 0 when moec does not support the type.
  unsigned size;
};
} // namespace

/// ONNX TensorProto.DataType values, in order (onnx.proto, IR version 11,
/// and FLOAT8E8M0 of IR 12: MXFP4's block scales, which QMoE reads).
static constexpr DataTypeInfo kDataTypes[] = {
    {"UNDEFINED", 0},      {"FLOAT", 4},      {"UINT8", 1},
    {"INT8", 1},           {"UINT16", 2},     {"INT16", 2},
    {"INT32", 4},          {"INT64", 8},      {"STRING", 0},
    {"BOOL", 1},           {"FLOAT16", 2},    {"DOUBLE", 8},
    {"UINT32", 4},         {"UINT64", 8},     {"COMPLEX64", 0},
    {"COMPLEX128", 0},     {"BFLOAT16", 2},   {"FLOAT8E4M3FN", 0},
    {"FLOAT8E4M3FNUZ", 0}, {"FLOAT8E5M2", 0}, {"FLOAT8E5M2FNUZ", 0},
    {"UINT4", 0},          {"INT4", 0},       {"FLOAT4E2M1", 0},
    {"FLOAT8E8M0", 1}};

/// TensorProto.DataType FLOAT8E8M0 (onnx 1.18; newer than the onnx.proto
/// moec builds with).
static constexpr int32_t kFloat8E8M0 = 24;

static const DataTypeInfo *lookupDataType(int32_t dataType) {
  if (dataType < 0 || dataType >= int32_t(std::size(kDataTypes)))
    return nullptr;
  return &kDataTypes[dataType];
}

std::string moec::onnx_import::getDataTypeName(int32_t dataType) {
  if (const DataTypeInfo *info = lookupDataType(dataType))
    return info->name.str();
  return "data type " + std::to_string(dataType);
}

int64_t moec::onnx_import::getDataTypeSize(int32_t dataType) {
  const DataTypeInfo *info = lookupDataType(dataType);
  return info ? info->size : 0;
}

Type moec::onnx_import::convertDataType(MLIRContext *context, int32_t dataType,
                                        bool widenFloat16) {
  Builder b(context);
  switch (dataType) {
  case TensorProto::FLOAT:
    return b.getF32Type();
  case TensorProto::FLOAT16:
    return widenFloat16 ? b.getF32Type() : b.getF16Type();
  case TensorProto::BFLOAT16:
    return b.getBF16Type();
  case TensorProto::DOUBLE:
    return b.getF64Type();
  case TensorProto::BOOL:
    return b.getI1Type();
  case TensorProto::INT8:
    return b.getI8Type();
  case TensorProto::INT16:
    return b.getI16Type();
  case TensorProto::INT32:
    return b.getI32Type();
  case TensorProto::INT64:
    return b.getI64Type();
  case TensorProto::UINT8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case TensorProto::UINT16:
    return b.getIntegerType(16, /*isSigned=*/false);
  case TensorProto::UINT32:
    return b.getIntegerType(32, /*isSigned=*/false);
  case TensorProto::UINT64:
    return b.getIntegerType(64, /*isSigned=*/false);
  case kFloat8E8M0:
    return b.getType<Float8E8M0FNUType>();
  default:
    return Type();
  }
}

std::optional<int64_t>
moec::onnx_import::getStaticByteSize(ArrayRef<int64_t> shape,
                                     int64_t elementSize) {
  int64_t size = elementSize;
  for (int64_t dim : shape)
    if (!ShapedType::isDynamic(dim) && llvm::MulOverflow(size, dim, size))
      return std::nullopt;
  return size;
}

/// Formats dims as "[2, 3]" for messages.
static std::string formatDims(const TensorProto &tensor) {
  std::string text = "[";
  llvm::interleave(
      tensor.dims(), [&](int64_t dim) { text += std::to_string(dim); },
      [&] { text += ", "; });
  return text + "]";
}

//===----------------------------------------------------------------------===//
// Layout: where a tensor's data is and how big it is
//===----------------------------------------------------------------------===//

/// Where a tensor's bytes live; checked against its declared shape.
struct TensorReader::Layout {
  enum class Source { Raw, Typed, External };

  RankedTensorType type;
  int32_t dataType = 0;
  int64_t numElements = 0;
  int64_t byteSize = 0;
  Source source = Source::Typed;
  /// External data: the resolved file and the data's offset in it.
  std::string file;
  int64_t offset = 0;
};

TensorReader::TensorReader(const OnnxModel &model) : model(model) {}
TensorReader::~TensorReader() = default;

/// Returns how many values the typed field that `dataType` uses holds, and
/// that field's name; the typed fields of the other types must be empty.
static std::pair<int64_t, StringRef> getTypedFieldSize(const TensorProto &t,
                                                       int32_t dataType) {
  switch (dataType) {
  case TensorProto::FLOAT:
    return {t.float_data_size(), "float_data"};
  case TensorProto::DOUBLE:
    return {t.double_data_size(), "double_data"};
  case TensorProto::INT64:
    return {t.int64_data_size(), "int64_data"};
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    return {t.uint64_data_size(), "uint64_data"};
  default:
    // Every narrower type (and FLOAT16/BFLOAT16 as bit patterns) is stored
    // one value per int32.
    return {t.int32_data_size(), "int32_data"};
  }
}

static int64_t getTotalTypedValues(const TensorProto &t) {
  return int64_t(t.float_data_size()) + t.double_data_size() +
         t.int64_data_size() + t.uint64_data_size() + t.int32_data_size() +
         t.string_data_size();
}

/// Parses a non-negative decimal external_data value.
static std::optional<int64_t> parseSize(StringRef text) {
  uint64_t value;
  if (text.empty() || text.getAsInteger(10, value) ||
      value > uint64_t(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return int64_t(value);
}

FailureOr<TensorReader::Layout>
TensorReader::getLayout(const TensorProto &tensor, Location loc) {
  Layout layout;
  layout.dataType = tensor.data_type();
  Type elementType =
      convertDataType(loc->getContext(), layout.dataType, widenFloat16);
  if (!elementType)
    return emitError(loc) << "unsupported element type "
                          << getDataTypeName(layout.dataType);
  if (tensor.has_segment())
    return emitError(loc) << "segmented tensors are not supported";

  SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  for (auto [i, dim] : llvm::enumerate(dims))
    if (dim < 0)
      return emitError(loc) << "dims[" << i << "] is negative (" << dim << ")";
  int64_t elementSize = getDataTypeSize(layout.dataType);
  std::optional<int64_t> numElements = getStaticByteSize(dims, 1);
  std::optional<int64_t> byteSize = getStaticByteSize(dims, elementSize);
  if (!numElements || !byteSize)
    return emitError(loc) << "size of dims " << formatDims(tensor) << " of "
                          << getDataTypeName(layout.dataType)
                          << " overflows 64 bits";
  layout.byteSize = *byteSize;
  layout.numElements = *numElements;
  layout.type = RankedTensorType::get(dims, elementType);

  if (tensor.data_location() == TensorProto::EXTERNAL) {
    if (tensor.has_raw_data() || getTotalTypedValues(tensor))
      return emitError(loc) << "has both external and inline data";
    std::optional<StringRef> location;
    std::optional<int64_t> offset, length;
    for (const auto &entry : tensor.external_data()) {
      StringRef key = entry.key(), value = entry.value();
      if (key == "checksum")
        continue;
      if (key != "location" && key != "offset" && key != "length")
        return emitError(loc)
               << "external_data has unknown key '" << key << "'";
      if ((key == "location" && location) || (key == "offset" && offset) ||
          (key == "length" && length))
        return emitError(loc) << "external_data has key '" << key << "' twice";
      if (key == "location") {
        location = value;
        continue;
      }
      std::optional<int64_t> size = parseSize(value);
      if (!size)
        return emitError(loc) << "external_data '" << key << "' is '" << value
                              << "', not a non-negative integer";
      (key == "offset" ? offset : length) = size;
    }
    if (!location)
      return emitError(loc) << "external_data has no 'location'";
    FailureOr<std::string> file = resolveExternalFile(*location, loc);
    if (failed(file))
      return failure();
    if (length && *length != layout.byteSize)
      return emitError(loc)
             << "external_data 'length' is " << *length << " bytes but dims "
             << formatDims(tensor) << " of " << getDataTypeName(layout.dataType)
             << " need " << layout.byteSize;
    uint64_t fileSize;
    if (std::error_code ec = llvm::sys::fs::file_size(*file, fileSize))
      return emitError(loc) << "cannot read external data file '" << *location
                            << "': " << ec.message();
    layout.offset = offset.value_or(0);
    int64_t end;
    if (llvm::AddOverflow(layout.offset, layout.byteSize, end) ||
        uint64_t(end) > fileSize)
      return emitError(loc)
             << "external data at offset " << layout.offset << " with length "
             << layout.byteSize << " runs past the end of '" << *location
             << "' (" << fileSize << " bytes)";
    layout.source = Layout::Source::External;
    layout.file = std::move(*file);
    return layout;
  }

  if (tensor.has_raw_data()) {
    if (getTotalTypedValues(tensor))
      return emitError(loc) << "has both raw_data and typed data fields";
    if (int64_t(tensor.raw_data().size()) != layout.byteSize)
      return emitError(loc)
             << "raw_data holds " << tensor.raw_data().size()
             << " bytes but dims " << formatDims(tensor) << " of "
             << getDataTypeName(layout.dataType) << " need " << layout.byteSize;
    layout.source = Layout::Source::Raw;
    return layout;
  }

  auto [count, field] = getTypedFieldSize(tensor, layout.dataType);
  if (getTotalTypedValues(tensor) != count)
    return emitError(loc) << "holds " << getDataTypeName(layout.dataType)
                          << " data in a typed field other than " << field;
  if (count != layout.numElements)
    return emitError(loc) << field << " holds " << count << " values but dims "
                          << formatDims(tensor) << " need "
                          << layout.numElements;
  layout.source = Layout::Source::Typed;
  return layout;
}

FailureOr<std::string> TensorReader::resolveExternalFile(StringRef location,
                                                         Location loc) {
  namespace path = llvm::sys::path;
  // External data is named relative to the model; anything that could reach
  // outside the model's directory is refused (a model is untrusted input).
  if (location.empty())
    return emitError(loc) << "external_data 'location' is empty";
  if (model.directory.empty())
    return emitError(loc) << "external data location '" << location
                          << "' cannot be resolved: the model was not read "
                             "from a file";
  if (path::is_absolute(location, path::Style::posix))
    return emitError(loc) << "external data location '" << location
                          << "' is an absolute path; it must be relative to "
                             "the model's directory";
  if (llvm::is_contained(
          llvm::make_range(path::begin(location, path::Style::posix),
                           path::end(location)),
          ".."))
    return emitError(loc) << "external data location '" << location
                          << "' contains '..'; it must stay inside the "
                             "model's directory";
  SmallString<256> joined(model.directory);
  path::append(joined, path::Style::posix, location);
  SmallString<256> real;
  if (std::error_code ec = llvm::sys::fs::real_path(joined, real)) {
    if (ec == std::errc::no_such_file_or_directory)
      return emitError(loc)
             << "external data file '" << location
             << "' does not exist (looked for '" << joined << "')";
    return emitError(loc) << "cannot open external data file '" << location
                          << "': " << ec.message();
  }
  // Symlinks are followed by real_path, so this also catches a link inside
  // the directory that points outside it.
  if (!StringRef(real).starts_with(model.directory + "/"))
    return emitError(loc) << "external data file '" << location
                          << "' resolves to '" << real
                          << "', outside the model's directory";
  if (!llvm::sys::fs::is_regular_file(real))
    return emitError(loc) << "external data file '" << location
                          << "' is not a regular file";
  return std::string(real);
}

LogicalResult TensorReader::validate(const TensorProto &tensor, Location loc) {
  return success(succeeded(getLayout(tensor, loc)));
}

FailureOr<std::shared_ptr<llvm::MemoryBuffer>>
TensorReader::mapFile(StringRef path, Location loc) {
  auto it = mappedFiles.find(path);
  if (it != mappedFiles.end())
    return it->second;
  // Mapped read-only and never copied: pages are read on demand, so a weight
  // that is never touched costs no memory.
  // Opened without blocking and checked to be a regular file again: the
  // file may have been replaced since its location was resolved.
  absl::StatusOr<moert::InputFile> file = moert::InputFile::open(path.str());
  if (!file.ok())
    return emitError(loc) << "cannot map external data file '" << path
                          << "': " << std::string(file.status().message());
  auto buffer = llvm::MemoryBuffer::getOpenFile(
      file->fd(), path, file->size(), /*RequiresNullTerminator=*/false,
      /*IsVolatile=*/false);
  if (!buffer)
    return emitError(loc) << "cannot map external data file '" << path
                          << "': " << buffer.getError().message();
  // A mapped file (not a small one read into memory) is declared as such,
  // so that the plan writer, once it has written a weight, leaves its
  // pages to the page cache instead of paging them out.
  std::unique_ptr<llvm::MemoryBuffer> owned = std::move(*buffer);
  std::shared_ptr<moert::FileMapping> mapping;
  if (owned->getBufferKind() == llvm::MemoryBuffer::MemoryBuffer_MMap)
    mapping = std::make_shared<moert::FileMapping>(owned->getBufferStart(),
                                                   owned->getBufferSize());
  std::shared_ptr<llvm::MemoryBuffer> shared(
      owned.release(), [mapping](llvm::MemoryBuffer *file) mutable {
        mapping.reset();
        delete file;
      });
  mappedFiles[path] = shared;
  return shared;
}

//===----------------------------------------------------------------------===//
// Conversion
//===----------------------------------------------------------------------===//

/// Returns the typed-field values of `tensor` as the little-endian bytes of
/// its element type, or std::nullopt where the field's own storage already is
/// exactly that (then `inPlace` points at it).
static std::optional<std::vector<char>>
convertTypedValues(const TensorProto &tensor, int32_t dataType,
                   int64_t byteSize, ArrayRef<char> &inPlace) {
  auto view = [&](const auto &field) {
    inPlace = ArrayRef<char>(reinterpret_cast<const char *>(field.data()),
                             field.size() * sizeof(*field.data()));
    return std::nullopt;
  };
  switch (dataType) {
  case TensorProto::FLOAT:
    return view(tensor.float_data());
  case TensorProto::DOUBLE:
    return view(tensor.double_data());
  case TensorProto::INT64:
    return view(tensor.int64_data());
  case TensorProto::INT32:
    return view(tensor.int32_data());
  case TensorProto::UINT64:
    return view(tensor.uint64_data());
  default:
    break;
  }
  // Narrower types are widened in the proto: each value keeps its low bytes.
  std::vector<char> bytes(byteSize);
  if (dataType == TensorProto::UINT32) {
    for (auto [i, value] : llvm::enumerate(tensor.uint64_data()))
      llvm::support::endian::write32le(&bytes[i * 4], uint32_t(value));
    return bytes;
  }
  int64_t elementSize = getDataTypeSize(dataType);
  for (auto [i, value] : llvm::enumerate(tensor.int32_data())) {
    if (elementSize == 1)
      bytes[i] = char(dataType == TensorProto::BOOL ? value != 0 : value);
    else
      llvm::support::endian::write16le(&bytes[i * 2], uint16_t(value));
  }
  return bytes;
}

FailureOr<ElementsAttr> TensorReader::read(const TensorProto &tensor,
                                           Location loc,
                                           StringRef resourceName) {
  FailureOr<Layout> layout = getLayout(tensor, loc);
  if (failed(layout))
    return failure();

  // Locate the bytes and what keeps them alive.
  ArrayRef<char> bytes;
  std::shared_ptr<const void> owner = model.proto;
  std::optional<std::vector<char>> converted;
  switch (layout->source) {
  case Layout::Source::Raw:
    bytes = ArrayRef<char>(tensor.raw_data().data(), tensor.raw_data().size());
    break;
  case Layout::Source::Typed:
    converted =
        convertTypedValues(tensor, layout->dataType, layout->byteSize, bytes);
    if (converted)
      bytes = *converted;
    break;
  case Layout::Source::External: {
    FailureOr<std::shared_ptr<llvm::MemoryBuffer>> file =
        mapFile(layout->file, loc);
    if (failed(file))
      return failure();
    // The layout was checked against the file's size when it was resolved;
    // a file that shrank since must not be read past its end.
    if (uint64_t(layout->offset) + uint64_t(layout->byteSize) >
        (*file)->getBufferSize())
      return emitError(loc)
             << "external data file '" << layout->file << "' shrank to "
             << (*file)->getBufferSize() << " bytes while the model was read";
    bytes = ArrayRef<char>((*file)->getBufferStart() + layout->offset,
                           layout->byteSize);
    owner = *file;
    break;
  }
  }

  // Widened float16: the f32 of every value, in memory of its own (twice
  // the file's bytes).
  if (widenFloat16 && layout->dataType == TensorProto::FLOAT16) {
    // External data may sit at any offset: the halves are copied aligned.
    std::vector<uint16_t> halves(layout->numElements);
    std::memcpy(halves.data(), bytes.data(), halves.size() * 2);
    std::vector<char> widened(halves.size() * sizeof(float));
    moert::detail::widenFloats(moert::DType::F16, halves.data(),
                               layout->numElements,
                               reinterpret_cast<float *>(widened.data()));
    converted = std::move(widened);
    bytes = *converted;
    widenedFloat16 = true;
  }

  // Booleans are one byte each in ONNX but bit-packed in dense elements.
  if (layout->dataType == TensorProto::BOOL) {
    SmallVector<bool> values(
        llvm::map_range(bytes, [](char c) { return c != 0; }));
    return cast<ElementsAttr>(DenseElementsAttr::get(layout->type, values));
  }

  if (layout->numElements <= kMaxDenseElements)
    return cast<ElementsAttr>(
        DenseElementsAttr::getFromRawBuffer(layout->type, bytes));

  // A weight: reference the bytes where they are. Only values that had to be
  // converted (narrow types widened in typed fields) and external data at an
  // offset that breaks the element type's alignment, which the blob claims,
  // are copied.
  size_t alignment = bytes.size() / layout->numElements;
  AsmResourceBlob blob;
  if (converted || !llvm::isAddrAligned(llvm::Align(alignment), bytes.data())) {
    blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(bytes, alignment);
  } else {
    blob = UnmanagedAsmResourceBlob::allocateWithAlign(
        bytes, alignment, [owner = std::move(owner)](void *, size_t, size_t) {
          // Releasing the share of the protobuf or the mapping is all there
          // is to do.
        });
  }
  return cast<ElementsAttr>(DenseResourceElementsAttr::get(
      layout->type, resourceName, std::move(blob)));
}
