//===- file_io_test.cpp - Opening, reading and writing files safely -------===//

#include "format/file_io.h"

#include "test_util.h"

#include <cstdio>
#include <sys/stat.h>
#include <unistd.h>

namespace moert::testing {
namespace {

TEST(FileIo, ReadsARegularFileWhole) {
  std::string path = ::testing::TempDir() + "/file_io_test.bin";
  const char text[] = "twelve bytes";
  ASSERT_TRUE(writeFile(path, text, 12).ok());
  absl::StatusOr<InputFile> file = InputFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 12u);
  absl::StatusOr<std::vector<uint8_t>> bytes = file->readAll();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(std::string(bytes->begin(), bytes->end()), "twelve bytes");
  EXPECT_THAT(file->readAll(11).status(), StatusHas("at most 11"));
  std::remove(path.c_str());
}

// Opening a FIFO without a writer must not block: the test would hang.
TEST(FileIo, RefusesSpecialFilesWithoutBlocking) {
  std::string fifo = ::testing::TempDir() + "/file_io_test.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(InputFile::open(fifo).status(),
              StatusHas("not a regular file (a FIFO)"));
  std::remove(fifo.c_str());
  EXPECT_THAT(InputFile::open(::testing::TempDir()).status(),
              StatusHas("not a regular file (a directory)"));
  EXPECT_THAT(InputFile::open("/dev/zero").status(),
              StatusHas("not a regular file (a character device)"));
  EXPECT_THAT(InputFile::open("/nonexistent/file").status(),
              StatusHas("cannot open: No such file or directory"));
}

TEST(FileIo, WriteErrorsNameTheFile) {
  char byte = 0;
  EXPECT_THAT(writeFile("/dev/full", &byte, 1),
              StatusHas("/dev/full: cannot write: No space left on device"));
  EXPECT_THAT(writeFile("/nonexistent/out.bin", &byte, 1),
              StatusHas("/nonexistent/out.bin: cannot create"));
}

TEST(FileIo, KnowsThePhysicalMemory) {
  EXPECT_GT(physicalMemoryBytes(), uint64_t{1} << 20);
}

} // namespace
} // namespace moert::testing
