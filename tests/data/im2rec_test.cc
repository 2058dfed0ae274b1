// `tally im2rec`, `tally rec` and `tally make-data`, run as a user runs them.
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "data/image_codec.h"
#include "data/recordio.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {
namespace fs = std::filesystem;

struct CommandResult {
  int rc;
  std::string out;  // stdout and stderr together
};

class Im2recTest : public ::testing::Test {
 protected:

  CommandResult Tally(const std::string& args) {
    const std::string log = dir_ + "/log.txt";
    int status = std::system(("cd '" + dir_ + "' && '" TALLY_BINARY "' " + args + " > log.txt 2>&1").c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
  }

  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }

  // Reads every record of NAME.rec through NAME.idx.
  std::vector<std::string> Records(const std::string& name) {
    std::unique_ptr<RecordReader> r;
    Status s = RecordReader::Open(dir_ + "/" + name + ".rec", dir_ + "/" + name + ".idx", &r);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::string> out;
    if (!s.ok()) return out;
    for (size_t i = 0; i < r->num_indexed(); ++i) {
      out.emplace_back();
      EXPECT_TRUE(r->ReadIndexed(i, &out.back()).ok());
    }
    return out;
  }

  ScopedTempDir tmp_{"im2rec_test"};
  const std::string dir_ = tmp_.path();
};

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(Im2recTest, ListPackVerify) {
  CommandResult r = Tally("make-data synthetic-jpeg --out imgs --classes 3 --per-class 3 --seed 5");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string first = Read("imgs/class_000/img_00000.jpg");
  ImageInfo info;
  ASSERT_TRUE(ReadImageInfo(reinterpret_cast<const uint8_t*>(first.data()), first.size(), &info).ok());
  EXPECT_GT(info.width * info.height, 300 * 300);
  // Deterministic for a seed.
  ASSERT_EQ(Tally("make-data synthetic-jpeg --out again --classes 3 --per-class 3 --seed 5 --num-thread 2").rc, 0);
  EXPECT_TRUE(Read("again/class_002/img_00001.jpg") == Read("imgs/class_002/img_00001.jpg"));
  EXPECT_FALSE(Read("imgs/class_000/img_00001.jpg") == first);

  Write("imgs/class_001/broken.jpg", first.substr(0, first.size() / 3));
  Write("imgs/class_002/notes.txt", "not listed");
  r = Tally("im2rec data imgs --list --recursive --no-shuffle");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "class_002 2");
  std::vector<ListEntry> list;
  ASSERT_TRUE(ReadListFile(dir_ + "/data.lst", &list).ok());
  ASSERT_EQ(list.size(), 10u);
  EXPECT_EQ(list[3].path, "class_001/broken.jpg");
  EXPECT_EQ(list[3].labels, std::vector<float>{1});

  r = Tally("im2rec data imgs --resize 64 --num-thread 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "class_001/broken.jpg");
  EXPECT_HAS(r.out, "packed 9 of 10");
  std::vector<std::string> recs = Records("data");
  ASSERT_EQ(recs.size(), 9u);
  for (const std::string& rec : recs) {
    ImageRecordHeader h;
    std::string_view image;
    ASSERT_TRUE(UnpackImageRecord(rec, &h, &image).ok());
    EXPECT_NE(h.id, 3u);  // the broken file is left out
    EXPECT_EQ(h.label, static_cast<float>(list[h.id].labels[0]));
    Image img;
    ASSERT_TRUE(DecodeImage(reinterpret_cast<const uint8_t*>(image.data()), image.size(), {}, &img).ok());
    EXPECT_EQ(std::min(img.width, img.height), 64);
  }

  r = Tally("rec data.rec --verify");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "9 records, 9 good, 0 bad");
  r = Tally("rec data.rec --show-records 2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "9 records");

  // A corrupt copy: record 2's magic broken, record 5's image no longer a JPEG.
  std::unique_ptr<RecordReader> reader;
  ASSERT_TRUE(RecordReader::Open(dir_ + "/data.rec", dir_ + "/data.idx", &reader).ok());
  const uint64_t off2 = reader->index()[2].offset, off5 = reader->index()[5].offset;
  std::string bytes = Read("data.rec");
  bytes[off2] = 'X';
  bytes[off5 + 8 + 24] = 0;  // the JPEG's SOI marker
  Write("bad.rec", bytes);
  fs::copy_file(dir_ + "/data.idx", dir_ + "/bad.idx");
  r = Tally("rec bad.rec --verify");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_HAS(r.out, "bad record 2 at byte offset " + std::to_string(off2));
  EXPECT_HAS(r.out, "bad magic");
  EXPECT_HAS(r.out, "bad record 5 at byte offset " + std::to_string(off5));
  EXPECT_HAS(r.out, "9 records, 7 good, 2 bad");
}

TEST_F(Im2recTest, PackLabelPassThroughAndPng) {
  ASSERT_EQ(Tally("make-data synthetic-jpeg --out imgs --classes 2 --per-class 1").rc, 0);
  Write("multi.lst", "4\t1.000000\t7.500000\tclass_000/img_00000.jpg\n9\t0\t2\tclass_001/img_00000.jpg\n");
  CommandResult r = Tally("im2rec multi.lst imgs --pack-label --pass-through");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::vector<std::string> recs = Records("multi");
  ASSERT_EQ(recs.size(), 2u);
  ImageRecordHeader h;
  std::string_view image;
  ASSERT_TRUE(UnpackImageRecord(recs[0], &h, &image).ok());
  EXPECT_EQ(h.flag, 2u);
  EXPECT_EQ(h.labels, (std::vector<float>{1, 7.5f}));
  EXPECT_EQ(h.id, 4u);
  EXPECT_TRUE(image == Read("imgs/class_000/img_00000.jpg"));
  EXPECT_EQ(Read("multi.idx").substr(0, 4), "4\t0\n");

  r = Tally("im2rec multi.lst imgs --encoding .png --center-crop --resize 32");
  ASSERT_EQ(r.rc, 0) << r.out;
  recs = Records("multi");
  ASSERT_TRUE(UnpackImageRecord(recs[1], &h, &image).ok());
  EXPECT_EQ(h.flag, 0u);
  EXPECT_EQ(h.label, 0.0f);
  EXPECT_EQ(h.id, 9u);
  ImageInfo info;
  ASSERT_TRUE(ReadImageInfo(reinterpret_cast<const uint8_t*>(image.data()), image.size(), &info).ok());
  EXPECT_EQ(info.format, ImageFormat::kPng);
  EXPECT_EQ(info.width, 32);
  EXPECT_EQ(info.height, 32);
}

TEST_F(Im2recTest, FlagErrors) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"im2rec data imgs --list --resize 10", "--resize applies to pack mode"},
      {"im2rec data imgs --recursive", "--recursive applies to --list only"},
      {"im2rec data imgs --pass-through --quality 80", "--quality contradicts --pass-through"},
      {"im2rec data imgs --encoding .gif", "--encoding"},
      {"im2rec data imgs --list --train-ratio 0.8 --test-ratio 0.5", "exceeds 1"},
      {"im2rec data imgs --no-such-flag", "--no-such-flag"},
      {"im2rec data", "expected PREFIX ROOT"},
      {"rec", "expected one FILE.rec"},
      {"make-data fashion-mnist --out x --classes 3", "--classes does not apply"},
      {"make-data mnist --out x", "fashion-mnist or synthetic-jpeg"},
  };
  for (const Case& c : cases) {
    CommandResult r = Tally(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_HAS(r.out, c.message);
  }
  CommandResult r = Tally("rec missing.rec");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.out, "missing.rec");
}

TEST_F(Im2recTest, FashionMnistFromDebian) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (tools/install_deps.sh)";
  }
  CommandResult r = Tally("make-data fashion-mnist --out fm --limit 300");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "wrote 300 of 60000 images");
  EXPECT_HAS(r.out, "wrote 300 of 10000 images");
  for (const char* split : {"fm/train", "fm/test"}) {
    std::vector<std::string> recs = Records(split);
    ASSERT_EQ(recs.size(), 300u);
    std::map<float, int> counts;
    for (const std::string& rec : recs) {
      ImageRecordHeader h;
      std::string_view image;
      ASSERT_TRUE(UnpackImageRecord(rec, &h, &image).ok());
      ++counts[h.label];
      Image img;
      ASSERT_TRUE(DecodeImage(reinterpret_cast<const uint8_t*>(image.data()), image.size(), {}, &img).ok());
      ASSERT_EQ(img.width, 28);
      ASSERT_EQ(img.height, 28);
    }
    EXPECT_EQ(counts.size(), 10u) << split;  // every class among the first 300
    EXPECT_EQ(counts.begin()->first, 0.0f);
    EXPECT_EQ(counts.rbegin()->first, 9.0f);
  }
  // The first training image of Fashion-MNIST is an ankle boot (class 9).
  ImageRecordHeader h;
  std::string_view image;
  ASSERT_TRUE(UnpackImageRecord(Records("fm/train")[0], &h, &image).ok());
  EXPECT_EQ(h.label, 9.0f);
}

}  // namespace
}  // namespace tally
