//===- npy_test.cpp - .npy reading and writing ----------------------------===//

#include "moert/npy.h"

#include "test_util.h"

#include <cstdio>

namespace moert::testing {
namespace {

std::vector<uint8_t> withHeader(const std::string &header,
                                const std::vector<uint8_t> &data,
                                uint8_t major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  size_t length = header.size();
  out.push_back(static_cast<uint8_t>(length & 0xff));
  out.push_back(static_cast<uint8_t>(length >> 8));
  if (major > 1) {
    out.push_back(0);
    out.push_back(0);
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

absl::Status parseStatus(const std::vector<uint8_t> &bytes) {
  return npy::parse(bytes.data(), bytes.size(), "t.npy").status();
}

TEST(Npy, RoundTripsEveryDtypeAndAlignsData) {
  std::vector<int64_t> i = {1, -2, 3, -4, 5, -6};
  std::vector<uint8_t> bytes =
      npy::serialize(DType::I64, {2, 3}, i.data(), i.size() * 8);
  EXPECT_EQ((bytes.size() - 48) % 64, 0u);
  auto array = npy::parse(bytes.data(), bytes.size(), "x");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, DType::I64);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(array->data.data(), i.data(), 48), 0);
  for (DType dtype :
       {DType::F32, DType::F16, DType::I32, DType::Bool, DType::I64}) {
    std::vector<uint8_t> zeros(3 * dtypeSize(dtype));
    std::vector<uint8_t> encoded =
        npy::serialize(dtype, {3}, zeros.data(), zeros.size());
    auto decoded = npy::parse(encoded.data(), encoded.size(), "x");
    ASSERT_TRUE(decoded.ok()) << dtypeName(dtype);
    EXPECT_EQ(decoded->dtype, dtype);
    EXPECT_EQ(decoded->shape, (std::vector<int64_t>{3}));
  }
  float scalar = 2.5f;
  std::vector<uint8_t> s = npy::serialize(DType::F32, {}, &scalar, 4);
  auto decoded = npy::parse(s.data(), s.size(), "x");
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->shape.empty());
}

TEST(Npy, ReadsHeadersAsNumpyWritesThem) {
  std::vector<uint8_t> data(8, 0);
  EXPECT_TRUE(parseStatus(withHeader("{'descr': '<f4', 'fortran_order': False, "
                                     "'shape': (2,), }          \n",
                                     data))
                  .ok());
  EXPECT_TRUE(parseStatus(withHeader("{\"shape\": (1, 2), \"descr\": \"<i4\", "
                                     "\"fortran_order\": False}\n",
                                     data, 2))
                  .ok());
}

TEST(Npy, RejectsMalformedFilesClearly) {
  std::vector<uint8_t> data(8, 0);
  auto header = [&](const std::string &dict) {
    return parseStatus(withHeader(dict + "\n", data));
  };
  EXPECT_THAT(parseStatus({1, 2, 3}), StatusHas("t.npy: not a valid .npy "
                                                "file: bad magic"));
  EXPECT_THAT(header("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}"),
              StatusHas("dtype '<f8' is not supported"));
  EXPECT_THAT(header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}"),
              StatusHas("dtype '>f4' is not supported"));
  EXPECT_THAT(header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}"),
              StatusHas("Fortran-order arrays are not supported"));
  EXPECT_THAT(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}"),
              StatusHas("needs 12 data bytes but the file has 8"));
  EXPECT_THAT(header("{'descr': '<f4', 'shape': (2,)}"),
              StatusHas("lacks descr, fortran_order or shape"));
  EXPECT_THAT(
      header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}"),
      StatusHas("not a non-negative integer"));
  EXPECT_THAT(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                     "'extra': 1}"),
              StatusHas("unexpected or repeated key 'extra'"));
  EXPECT_THAT(
      header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x"),
      StatusHas("trailing characters"));
  EXPECT_THAT(header("{'descr': '<f4', 'fortran_order': False, 'shape': "
                     "(99999999999999999999,)}"),
              StatusHas("shape value overflows"));
  std::vector<uint8_t> bad = withHeader(
      "{'descr': '|b1', 'fortran_order': False, 'shape': (2,)}\n", {0, 7});
  EXPECT_THAT(parseStatus(bad), StatusHas("bool data holds the byte 7"));
  std::vector<uint8_t> truncated = withHeader("{'descr'", {});
  truncated[8] = 200;
  EXPECT_THAT(parseStatus(truncated), StatusHas("runs past the end"));
  std::vector<uint8_t> version = withHeader("{}", {});
  version[6] = 9;
  EXPECT_THAT(parseStatus(version),
              StatusHas("unsupported format version 9.0"));
}

TEST(Npy, FilesRoundTripThroughDisk) {
  std::string path = ::testing::TempDir() + "/npy_test.npy";
  int32_t values[3] = {7, 8, 9};
  ASSERT_TRUE(npy::write(path, DType::I32, {3}, values, 12).ok());
  auto array = npy::read(path);
  std::remove(path.c_str());
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, DType::I32);
  EXPECT_THAT(npy::read("/nonexistent.npy").status(), StatusHas("cannot open"));
}

} // namespace
} // namespace moert::testing
