#include "data/recordio.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"
namespace tally {
namespace {

std::string Hex(const std::string& bytes) {
  std::string out;
  char b[3];
  for (unsigned char c : bytes) {
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

std::string Bytes(std::initializer_list<int> v) {
  std::string s;
  for (int x : v) s.push_back(static_cast<char>(x));
  return s;
}

const std::string kMagicBytes = Bytes({0x0a, 0x23, 0xd7, 0xce});

class RecordIoTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WriteFile(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  std::string ReadFile(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Writes `payloads` to a.rec/a.idx, then reads them back sequentially and through the index.
  void RoundTrip(const std::vector<std::string>& payloads) {
    std::unique_ptr<RecordWriter> w;
    ASSERT_TRUE(RecordWriter::Open(Path("a.rec"), &w).ok());
    for (size_t i = 0; i < payloads.size(); ++i) ASSERT_TRUE(w->Write(payloads[i], 100 + i).ok());
    ASSERT_TRUE(w->Close(Path("a.idx")).ok());
    std::string file = ReadFile("a.rec");
    // Outside part headers, the magic word never appears aligned.
    for (size_t i = 0; i + 4 <= file.size(); i += 4) {
      if (file.compare(i, 4, kMagicBytes) == 0) {
        ASSERT_LE(i + 8, file.size());
      }
    }
    ASSERT_EQ(file.size() % 4, 0u);

    std::unique_ptr<RecordReader> r;
    Status s = RecordReader::Open(Path("a.rec"), Path("a.idx"), &r);
    ASSERT_TRUE(s.ok()) << s;
    std::string got;
    bool eof = false;
    for (const std::string& p : payloads) {
      s = r->ReadNext(&got, &eof);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_FALSE(eof);
      EXPECT_EQ(Hex(got), Hex(p));
    }
    ASSERT_TRUE(r->ReadNext(&got, &eof).ok());
    EXPECT_TRUE(eof);
    ASSERT_EQ(r->num_indexed(), payloads.size());
    for (size_t i = payloads.size(); i-- > 0;) {
      ASSERT_TRUE(r->ReadIndexed(i, &got).ok());
      EXPECT_EQ(got, payloads[i]);
      EXPECT_EQ(r->index()[i].key, 100 + i);
    }

    // Without the .idx, a scan of the part headers finds the same records, keyed by position.
    std::unique_ptr<RecordReader> bare;
    ASSERT_TRUE(RecordReader::Open(Path("a.rec"), "", &bare).ok());
    s = bare->IndexByScanning();
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(bare->num_indexed(), payloads.size());
    for (size_t i = 0; i < payloads.size(); ++i) {
      EXPECT_EQ(bare->index()[i].offset, r->index()[i].offset) << "record " << i;
      EXPECT_EQ(bare->index()[i].key, i);
      ASSERT_TRUE(bare->ReadIndexed(i, &got).ok());
      EXPECT_EQ(got, payloads[i]);
    }
  }

  ScopedTempDir tmp_{"recordio_test"};
  const std::string dir_ = tmp_.path();
};

TEST(RecordIoFormat, TestVectorFromTheIssue) {
  ImageRecordHeader h;
  h.label = 3.0f;
  h.id = 7;
  std::string out;
  AppendRecord(PackImageRecord(h, Bytes({0xff, 0xd8, 0xff, 0xe0, 0x00})), &out);
  EXPECT_EQ(Hex(out),
            "0a23d7ce1d000000000000000000404007000000000000000000000000000000"
            "ffd8ffe000000000");
}

TEST(RecordIoFormat, MagicInsidePayloadSplitsParts) {
  // Aligned magic at 4: parts [0,4) cflag 1, [8,12) cflag 3; unaligned magic is left whole.
  std::string payload = "abcd" + kMagicBytes + "efgh";
  std::string out;
  AppendRecord(payload, &out);
  EXPECT_EQ(Hex(out), Hex(kMagicBytes + Bytes({4, 0, 0, 0x20}) + "abcd" + kMagicBytes + Bytes({4, 0, 0, 0x60}) +
                          "efgh"));
  out.clear();
  AppendRecord("ab" + kMagicBytes, &out);
  EXPECT_EQ(out.size(), 8u + 8u);
  EXPECT_EQ(Bytes({6, 0, 0, 0}), out.substr(4, 4));
}

TEST_F(RecordIoTest, RoundTrips) {
  std::vector<std::string> payloads = {
      "",                                              // empty
      "x",                                             // padded by 3
      kMagicBytes,                                     // magic alone: first part empty, last part empty
      "abcd" + kMagicBytes + "efgh" + kMagicBytes,     // two aligned: first, middle, last (empty)
      kMagicBytes + kMagicBytes + kMagicBytes + "zz",  // consecutive aligned
      "a" + kMagicBytes + "bcdefg",                    // unaligned: one part
      "ab" + kMagicBytes + kMagicBytes.substr(0, 2),   // unaligned and a partial magic at the end
  };
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  for (size_t i = 0; i + 4 <= big.size(); i += 4096) big.replace(i, 4, kMagicBytes);
  big.replace(1001, 4, kMagicBytes);
  payloads.push_back(big);
  RoundTrip(payloads);
}

TEST(RecordIoFormat, ImageHeaderMultiLabel) {
  ImageRecordHeader h;
  h.id = 0x0102030405060708ull;
  h.id2 = 9;
  h.labels = {1.5f, -2.0f, 7.0f};
  h.label = 42;  // ignored: multi-label headers store 0
  std::string rec = PackImageRecord(h, "IMG");
  ASSERT_EQ(rec.size(), 24u + 12u + 3u);
  ImageRecordHeader back;
  std::string_view image;
  ASSERT_TRUE(UnpackImageRecord(rec, &back, &image).ok());
  EXPECT_EQ(back.flag, 3u);
  EXPECT_EQ(back.label, 0.0f);
  EXPECT_EQ(back.id, h.id);
  EXPECT_EQ(back.id2, 9u);
  EXPECT_EQ(back.labels, h.labels);
  EXPECT_EQ(back.AllLabels(), h.labels);
  EXPECT_EQ(image, "IMG");

  ImageRecordHeader single;
  single.label = 5;
  ASSERT_TRUE(UnpackImageRecord(PackImageRecord(single, ""), &back, &image).ok());
  EXPECT_EQ(back.AllLabels(), std::vector<float>{5.0f});
  EXPECT_TRUE(image.empty());
}

TEST(RecordIoFormat, ImageHeaderCorrupt) {
  ImageRecordHeader h;
  std::string_view image;
  EXPECT_FALSE(UnpackImageRecord("short", &h, &image).ok());
  std::string rec = PackImageRecord(ImageRecordHeader{}, "abcd");
  rec[0] = 2;  // two labels declared, one float of room
  EXPECT_FALSE(UnpackImageRecord(rec, &h, &image).ok());
  rec[3] = static_cast<char>(0xff);  // absurd label count
  EXPECT_FALSE(UnpackImageRecord(rec, &h, &image).ok());
}

TEST_F(RecordIoTest, MultiLabelRoundTripThroughFile) {
  ImageRecordHeader h;
  h.labels = {0, 1, 2, 3};
  h.id = 11;
  RoundTrip({PackImageRecord(h, kMagicBytes + "jpeg")});
}

// Three good records; returns the file and the offsets.
std::string ThreeRecords(std::vector<size_t>* offsets) {
  std::string file;
  for (const std::string& p : {std::string("first"), std::string(40, 'b'), "abcd" + kMagicBytes + "efgh"}) {
    offsets->push_back(file.size());
    AppendRecord(p, &file);
  }
  return file;
}

Status ReadAll(const std::string& path, int* good) {
  std::unique_ptr<RecordReader> r;
  TALLY_RETURN_IF_ERROR(RecordReader::Open(path, "", &r));
  std::string rec;
  bool eof = false;
  *good = 0;
  while (true) {
    TALLY_RETURN_IF_ERROR(r->ReadNext(&rec, &eof));
    if (eof) return Status::Ok();
    ++*good;
  }
}

void ExpectError(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s << " lacks " << p;
}

TEST_F(RecordIoTest, CorruptInputs) {
  std::vector<size_t> off;
  const std::string good = ThreeRecords(&off);
  int n = 0;
  WriteFile("good.rec", good);
  ASSERT_TRUE(ReadAll(Path("good.rec"), &n).ok());
  EXPECT_EQ(n, 3);

  // Truncated inside the last record's payload, and inside a part header.
  WriteFile("trunc.rec", good.substr(0, good.size() - 6));
  ExpectError(ReadAll(Path("trunc.rec"), &n), {"trunc.rec", "record 2", "offset " + std::to_string(off[2]), "truncated"});
  EXPECT_EQ(n, 2);
  WriteFile("trunc2.rec", good.substr(0, off[1] + 5));
  ExpectError(ReadAll(Path("trunc2.rec"), &n), {"record 1", "offset " + std::to_string(off[1]), "truncated"});

  std::string bad = good;
  bad[off[1]] ^= 0x55;
  WriteFile("magic.rec", bad);
  ExpectError(ReadAll(Path("magic.rec"), &n), {"magic.rec", "record 1", "offset " + std::to_string(off[1]), "bad magic"});

  // Absurd declared length: the largest 29-bit length in a small file.
  bad = good;
  bad.replace(off[1] + 4, 4, Bytes({0xff, 0xff, 0xff, 0x1f}));
  WriteFile("huge.rec", bad);
  ExpectError(ReadAll(Path("huge.rec"), &n), {"record 1", "536870911"});

  // A continuation part where a record should start, and a new record inside a multi-part one.
  bad = good;
  bad[off[1] + 7] = 0x40;  // cflag 2
  WriteFile("cflag.rec", bad);
  ExpectError(ReadAll(Path("cflag.rec"), &n), {"record 1", "cflag 2"});
  bad = good;
  bad[off[2] + 8 + 4 + 7] = 0x00;  // second part of record 2 claims cflag 0
  WriteFile("cflag2.rec", bad);
  ExpectError(ReadAll(Path("cflag2.rec"), &n), {"record 2", "part 1", "cflag 0"});

  // Trailing garbage shorter than a header, and random bytes.
  WriteFile("tail.rec", good + "xy");
  ExpectError(ReadAll(Path("tail.rec"), &n), {"record 3", "truncated"});
  std::string noise(4096, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteFile("noise.rec", noise);
  EXPECT_FALSE(ReadAll(Path("noise.rec"), &n).ok());

  // Every truncation of a good file is survived.
  for (size_t len = 0; len < good.size(); ++len) {
    WriteFile("cut.rec", good.substr(0, len));
    Status s = ReadAll(Path("cut.rec"), &n);
    EXPECT_EQ(s.ok(), len == off[1] || len == off[2] || len == 0) << len << " " << s;
  }

  // Offsets that are not a record start.
  std::unique_ptr<RecordReader> r;
  ASSERT_TRUE(RecordReader::Open(Path("good.rec"), "", &r).ok());
  std::string rec;
  ExpectError(r->ReadAt(2, &rec), {"offset 2", "multiple of 4"});
  ExpectError(r->ReadAt(off[2] + 8, &rec, nullptr, 2), {"record 2", "bad magic"});
  EXPECT_FALSE(RecordReader::Open(Path("missing.rec"), "", &r).ok());
}

TEST_F(RecordIoTest, ScanningABareRecNamesWhereItBreaks) {
  std::unique_ptr<RecordWriter> w;
  ASSERT_TRUE(RecordWriter::Open(Path("bare.rec"), &w).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(std::string(10 + i, 'a'), i).ok());
  ASSERT_TRUE(w->Close("").ok());
  std::string file = ReadFile("bare.rec");
  // Cut inside the third record's payload: the first two are whole.
  std::ofstream(Path("cut.rec"), std::ios::binary) << file.substr(0, file.size() - 8);
  std::unique_ptr<RecordReader> r;
  ASSERT_TRUE(RecordReader::Open(Path("cut.rec"), "", &r).ok());
  ExpectError(r->IndexByScanning(), {"cut.rec", "record 2", "truncated"});
  // Garbage where the second record should start.
  file.replace(20, 4, "junk");
  std::ofstream(Path("junk.rec"), std::ios::binary) << file;
  ASSERT_TRUE(RecordReader::Open(Path("junk.rec"), "", &r).ok());
  ExpectError(r->IndexByScanning(), {"junk.rec", "record 1", "bad magic"});
}

TEST_F(RecordIoTest, CorruptIndex) {
  std::vector<size_t> off;
  WriteFile("a.rec", ThreeRecords(&off));
  std::unique_ptr<RecordReader> r;
  WriteFile("a.idx", "0\t0\n1\t" + std::to_string(off[1]) + "\n2\n");
  ExpectError(RecordReader::Open(Path("a.rec"), Path("a.idx"), &r), {"a.idx:3", "record 2", "'2'"});
  WriteFile("a.idx", "0\t0\n1\tx12\n");
  ExpectError(RecordReader::Open(Path("a.rec"), Path("a.idx"), &r), {"a.idx:2"});
  WriteFile("a.idx", "0\t0\n1\t999999\n");
  ExpectError(RecordReader::Open(Path("a.rec"), Path("a.idx"), &r), {"a.idx", "record 1", "999999"});
  WriteFile("a.idx", "0\t0\n1\t6\n");
  ExpectError(RecordReader::Open(Path("a.rec"), Path("a.idx"), &r), {"record 1", "offset 6"});
  // Space-separated and CRLF lines are read too; an index pointing mid-record fails on read.
  WriteFile("a.idx", "5 0\r\n6 4\r\n");
  ASSERT_TRUE(RecordReader::Open(Path("a.rec"), Path("a.idx"), &r).ok());
  std::string rec;
  ASSERT_TRUE(r->ReadIndexed(0, &rec).ok());
  EXPECT_EQ(rec, "first");
  ExpectError(r->ReadIndexed(1, &rec), {"record 1", "offset 4", "bad magic"});
}

TEST_F(RecordIoTest, ConcurrentReadsThroughOneReader) {
  std::vector<std::string> payloads;
  std::unique_ptr<RecordWriter> w;
  ASSERT_TRUE(RecordWriter::Open(Path("c.rec"), &w).ok());
  for (int i = 0; i < 200; ++i) {
    payloads.push_back(std::string(static_cast<size_t>(i * 37 % 500), static_cast<char>('a' + i % 26)));
    ASSERT_TRUE(w->Write(payloads.back(), i).ok());
  }
  ASSERT_TRUE(w->Close(Path("c.idx")).ok());
  std::unique_ptr<RecordReader> r;
  ASSERT_TRUE(RecordReader::Open(Path("c.rec"), Path("c.idx"), &r).ok());
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string rec;
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = t; i < payloads.size(); i += 3) {
          if (!r->ReadIndexed(i, &rec).ok() || rec != payloads[i]) ++bad[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST_F(RecordIoTest, ListFiles) {
  std::vector<ListEntry> entries = {{0, {3}, "cat/a b.jpg"}, {17, {1, 2.5f}, "dog/x.jpg"}};
  ASSERT_TRUE(WriteListFile(Path("l.lst"), entries).ok());
  EXPECT_EQ(ReadFile("l.lst"), "0\t3.000000\tcat/a b.jpg\n17\t1.000000\t2.500000\tdog/x.jpg\n");
  std::vector<ListEntry> back;
  ASSERT_TRUE(ReadListFile(Path("l.lst"), &back).ok());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].index, 17u);
  EXPECT_EQ(back[1].labels, (std::vector<float>{1, 2.5f}));
  EXPECT_EQ(back[0].path, "cat/a b.jpg");
  WriteFile("bad.lst", "0\t1\ta.jpg\n1\tcat.jpg\n");
  ExpectError(ReadListFile(Path("bad.lst"), &back), {"bad.lst:2"});
  WriteFile("bad.lst", "0\tone\ta.jpg\n");
  ExpectError(ReadListFile(Path("bad.lst"), &back), {"bad.lst:1"});
}

}  // namespace
}  // namespace tally
