// `tally im2rec`, `tally rec` and `tally make-data`, run as a user runs them.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "data/image_codec.h"
#include "data/recordio.h"
#include "tests/temp_dir.h"
#include "tools/python_random.h"

namespace tally {
namespace {
namespace fs = std::filesystem;

struct CommandResult {
  int rc;
  std::string out;  // stdout and stderr together
};

class Im2recTest : public ::testing::Test {
 protected:

  // Runs a shell command in the test's folder.
  CommandResult Run(const std::string& command) {
    int status = std::system(("cd '" + dir_ + "' && " + command + " > log.txt 2>&1").c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Read("log.txt")};
  }
  CommandResult Tally(const std::string& args) { return Run("'" TALLY_BINARY "' " + args); }
  // Runs a Python program with python3 (stdlib only) and ARGS.
  CommandResult Python(const std::string& program, const std::string& args = "") {
    Write("program.py", program);
    return Run("python3 program.py " + args);
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
      {"im2rec data imgs --color 2", "--color 2: expected 1 (colour), 0 (greyscale) or -1"},
      {"im2rec data imgs --list --color 0", "--color applies to pack mode"},
      {"im2rec data imgs --chunks 2", "--chunks applies to --list only"},
      {"im2rec data imgs --list --chunks 0", "--chunks must be at least 1"},
      {"im2rec data imgs --pass-through --color 0", "--color contradicts --pass-through"},
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

// Whitespace-separated unsigned integers of one line of text each.
std::vector<std::vector<uint64_t>> Numbers(const std::string& text) {
  std::vector<std::vector<uint64_t>> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    lines.emplace_back();
    for (std::string w; words >> w;) lines.back().push_back(std::stoull(w));
  }
  return lines;
}

TEST_F(Im2recTest, PythonRandomMatchesPython3) {
  const uint64_t seeds[] = {100, 0, 1, 4294967295u, 4294967301u, (uint64_t{1} << 63) + 7, ~uint64_t{0}};
  const uint64_t bounds[] = {1, 2, 3, 5, 1000, uint64_t{1} << 31, (uint64_t{1} << 32) + 1, (uint64_t{1} << 40) + 3,
                             ~uint64_t{0}};
  // 64 + 700 draws of each seed: past the first regeneration of the 624-word state.
  CommandResult r = Python(R"(import random
for seed in (100, 0, 1, 4294967295, 4294967301, 2**63 + 7, 2**64 - 1):
    random.seed(seed)
    print(*[random.getrandbits(k) for k in list(range(1, 65)) + [32] * 700])
random.seed(100)
print(*[random._inst._randbelow(n) for n in (1, 2, 3, 5, 1000, 2**31, 2**32 + 1, 2**40 + 3, 2**64 - 1)])
random.seed(100)
x = list(range(1000))
random.shuffle(x)
print(*x)
)");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::vector<std::vector<uint64_t>> python = Numbers(r.out);
  ASSERT_EQ(python.size(), 9u) << r.out;
  for (size_t s = 0; s < 7; ++s) {
    PythonRandom rng(seeds[s]);
    std::vector<uint64_t> ours;
    for (int k = 1; k <= 64; ++k) ours.push_back(rng.GetRandBits(k));
    for (int i = 0; i < 700; ++i) ours.push_back(rng.GetRandBits(32));
    EXPECT_EQ(ours, python[s]) << "seed " << seeds[s];
  }
  PythonRandom below(100);
  std::vector<uint64_t> ours;
  for (uint64_t n : bounds) ours.push_back(below.RandBelow(n));
  EXPECT_EQ(ours, python[7]);
  std::vector<uint64_t> shuffled(1000);
  for (size_t i = 0; i < shuffled.size(); ++i) shuffled[i] = i;
  PythonRandom(100).Shuffle(&shuffled);
  EXPECT_EQ(shuffled, python[8]);
}

// MXNet 1.9's im2rec.py list mode (list_image, make_list, write_list), restated in plain
// Python: ROOT PREFIX RECURSIVE SHUFFLE TRAIN_RATIO TEST_RATIO CHUNKS.
const char kMakeList[] = R"(import os, random, sys
root, prefix = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
recursive, shuffle = sys.argv[3] == '1', sys.argv[4] == '1'
train_ratio, test_ratio, chunks = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
exts = ['.jpeg', '.jpg', '.png']
items = []
def take(folder, name, label_of):
    full = os.path.join(folder, name)
    if os.path.isfile(full) and os.path.splitext(name)[1].lower() in exts:
        items.append((len(items), os.path.relpath(full, root), label_of(folder)))
if recursive:
    labels = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        files.sort()
        for name in files:
            take(folder, name, lambda f: labels.setdefault(f, len(labels)))
    for folder, label in sorted(labels.items(), key=lambda kv: kv[1]):
        print(os.path.relpath(folder, root), label)
else:
    for name in sorted(os.listdir(root)):
        take(root, name, lambda f: 0)
if shuffle:
    random.seed(100)
    random.shuffle(items)
def write(path, part):
    with open(path, 'w') as f:
        for index, rel, label in part:
            f.write('%d\t%f\t%s\n' % (index, label, rel))
size = (len(items) + chunks - 1) // chunks
for i in range(chunks):
    chunk = items[i * size:(i + 1) * size]
    stem = prefix + ('_%d' % i if chunks > 1 else '')
    sep, sep_test = int(size * train_ratio), int(size * test_ratio)
    if train_ratio == 1.0:
        write(stem + '.lst', chunk)
        continue
    if test_ratio:
        write(stem + '_test.lst', chunk[:sep_test])
    if train_ratio + test_ratio < 1.0:
        write(stem + '_val.lst', chunk[sep_test + sep:])
    write(stem + '_train.lst', chunk[sep_test:sep_test + sep])
)";

TEST_F(Im2recTest, ListsMatchMxnetMakeList) {
  // 37 images: one in ROOT, classes cat (12), dog (13) with dog/puppies (5), zebra (6); an
  // empty folder, a text file, an upper-case extension, a space, names sorting by case.
  for (const char* d : {"imgs/cat", "imgs/dog/puppies", "imgs/empty", "imgs/zebra"}) {
    fs::create_directories(dir_ + "/" + d);
  }
  Write("imgs/top.jpg", "");
  Write("imgs/notes.txt", "");
  const std::pair<const char*, int> classes[] = {{"cat", 12}, {"dog", 13}, {"dog/puppies", 5}, {"zebra", 6}};
  for (const auto& [name, count] : classes) {
    for (int i = 0; i < count; ++i) {
      const char* ext[] = {".jpg", ".png", ".JPG", ".jpeg"};
      Write("imgs/" + std::string(name) + "/" + (i % 3 ? "b" : "B") + std::to_string(i) + (i == 4 ? " x" : "") +
                ext[i % 4],
            "");
    }
  }
  struct Case {
    const char* flags;
    const char* python_args;  // RECURSIVE SHUFFLE TRAIN TEST CHUNKS
    size_t files;
  } cases[] = {
      {"--recursive --train-ratio 0.8 --test-ratio 0.1", "1 1 0.8 0.1 1", 3},
      {"--recursive --train-ratio 0.8 --test-ratio 0.1 --chunks 3", "1 1 0.8 0.1 3", 9},
      {"--recursive --chunks 3", "1 1 1.0 0 3", 3},
      {"--recursive --train-ratio 0.7 --chunks 4 --no-shuffle", "1 0 0.7 0 4", 8},
      {"--recursive", "1 1 1.0 0 1", 1},
      {"", "0 1 1.0 0 1", 1},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    const std::string py = "py" + std::to_string(c), ours = "ours" + std::to_string(c);
    fs::create_directories(dir_ + "/" + py);
    fs::create_directories(dir_ + "/" + ours);
    CommandResult expected = Python(kMakeList, "imgs " + py + "/data " + cases[c].python_args);
    ASSERT_EQ(expected.rc, 0) << expected.out;
    CommandResult r = Tally("im2rec " + ours + "/data imgs/ --list " + cases[c].flags);
    ASSERT_EQ(r.rc, 0) << cases[c].flags << "\n" << r.out;
    std::istringstream class_lines(expected.out);
    for (std::string line; std::getline(class_lines, line);) EXPECT_HAS(r.out, line + "\n");
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ + "/" + py)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names.size(), cases[c].files) << cases[c].flags;
    for (const std::string& name : names) {
      EXPECT_EQ(Read(ours + "/" + name), Read(py + "/" + name)) << cases[c].flags << ": " << name;
    }
    EXPECT_EQ(static_cast<size_t>(std::distance(fs::directory_iterator(dir_ + "/" + ours), {})), names.size());
  }
  // Not vacuous: 37 images in 5 classes, shuffled; chunks of 13 give 1 test, 10 train and
  // 2 val images, but the last chunk holds 11, so its val list is empty.
  auto lines = [&](const std::string& name) {
    const std::string text = Read(name);
    return std::count(text.begin(), text.end(), '\n');
  };
  EXPECT_EQ(lines("ours4/data.lst"), 37);
  std::vector<ListEntry> shuffled;
  ASSERT_TRUE(ReadListFile(dir_ + "/ours4/data.lst", &shuffled).ok());
  EXPECT_FALSE(std::is_sorted(shuffled.begin(), shuffled.end(),
                              [](const ListEntry& a, const ListEntry& b) { return a.index < b.index; }));
  EXPECT_HAS(Read("ours4/data.lst"), "\t4.000000\tzebra/");
  EXPECT_EQ(lines("ours1/data_0_test.lst"), 1);
  EXPECT_EQ(lines("ours1/data_0_train.lst"), 10);
  EXPECT_EQ(lines("ours1/data_0_val.lst"), 2);
  EXPECT_EQ(lines("ours1/data_2_train.lst"), 10);
  EXPECT_EQ(lines("ours1/data_2_val.lst"), 0);
}

// A colour image with detail in both directions, so that resampling and grey conversions show.
Image Pattern(int width, int height) {
  Image img;
  img.Resize(height, width);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = img.row(y) + 3 * x;
      p[0] = static_cast<uint8_t>(x * 255 / width);
      p[1] = static_cast<uint8_t>(y * 255 / height);
      p[2] = static_cast<uint8_t>((x * 7 + y * 13) % 256);
    }
  }
  return img;
}

std::string Encoded(const Image& img, bool png) {
  std::string out;
  EXPECT_TRUE((png ? EncodePng(img, &out) : EncodeJpeg(img, 95, &out)).ok());
  return out;
}

TEST_F(Im2recTest, ResizeRoundsAsMxnet) {
  // The short edge to R, the long one to long * R // short of the full image. A JPEG decoded
  // at a DCT scale first used to round from the scaled size: 74, 95, 86, 134, 190, 132 here.
  struct Case {
    int width, height, resize;
    bool png, crop;
    int want_w, want_h;
  } cases[] = {
      {500, 333, 50, false, false, 75, 50},   {333, 500, 64, false, false, 64, 96},
      {401, 299, 64, false, false, 85, 64},   {250, 187, 100, false, false, 133, 100},
      {640, 427, 128, false, false, 191, 128}, {700, 525, 100, false, false, 133, 100},
      {401, 299, 100, true, false, 134, 100}, {40, 30, 64, false, false, 85, 64},
      {300, 300, 64, false, false, 64, 64},   {500, 333, 50, false, true, 50, 50},
  };
  fs::create_directories(dir_ + "/imgs");
  std::string list;
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    const std::string name = "img" + std::to_string(i) + (c.png ? ".png" : ".jpg");
    Write("imgs/" + name, Encoded(Pattern(c.width, c.height), c.png));
    Write("one.lst", std::to_string(i) + "\t0.000000\t" + name + "\n");
    CommandResult r = Tally("im2rec one.lst imgs --resize " + std::to_string(c.resize) +
                            (c.crop ? " --center-crop" : ""));
    ASSERT_EQ(r.rc, 0) << r.out;
    std::vector<std::string> recs = Records("one");
    ASSERT_EQ(recs.size(), 1u);
    ImageRecordHeader h;
    std::string_view image;
    ASSERT_TRUE(UnpackImageRecord(recs[0], &h, &image).ok());
    ImageInfo info;
    ASSERT_TRUE(ReadImageInfo(reinterpret_cast<const uint8_t*>(image.data()), image.size(), &info).ok());
    EXPECT_EQ(info.width, c.want_w) << c.width << "x" << c.height << " --resize " << c.resize;
    EXPECT_EQ(info.height, c.want_h) << c.width << "x" << c.height << " --resize " << c.resize;
  }
}

// PNGs with alpha, a tRNS chunk or 16-bit samples, written by Python's zlib.
const char kOddPngs[] = R"(import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
def png(path, bit_depth, color_type, channels, extra=b''):
    row = bytes(range(8 * channels * bit_depth // 8))
    pixels = zlib.compress(b''.join(b'\0' + row for y in range(6)))
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 8, 6, bit_depth, color_type, 0, 0, 0))
                + extra + chunk(b'IDAT', pixels) + chunk(b'IEND', b''))
png('imgs/rgba.png', 8, 6, 4)
png('imgs/trns.png', 8, 2, 3, chunk(b'tRNS', struct.pack('>HHH', 1, 2, 3)))
png('imgs/grey16.png', 16, 0, 1)
)";

TEST_F(Im2recTest, Color) {
  fs::create_directories(dir_ + "/imgs");
  const Image colour = Pattern(96, 64);
  Write("imgs/colour.jpg", Encoded(colour, false));
  Write("imgs/colour.png", Encoded(colour, true));
  std::string grey_png;
  ASSERT_TRUE(EncodeGrayPng(colour, &grey_png).ok());  // channel 0 as a one-channel PNG
  Write("imgs/grey.png", grey_png);
  ASSERT_EQ(Python(kOddPngs).rc, 0);
  Write("all.lst",
        "0\t0\tcolour.jpg\n1\t0\tcolour.png\n2\t0\tgrey.png\n3\t0\trgba.png\n4\t0\ttrns.png\n5\t0\tgrey16.png\n");
  auto unpack = [&](const std::string& rec, Image* img) {
    ImageRecordHeader h;
    std::string_view bytes;
    EXPECT_TRUE(UnpackImageRecord(rec, &h, &bytes).ok());
    ImageInfo info;
    EXPECT_TRUE(ReadImageInfo(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &info).ok());
    EXPECT_TRUE(DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {}, img).ok());
    return info.channels;
  };
  // --color 0 --encoding .png: one-channel PNGs holding cv2's grey (exact for a PNG source,
  // libpng's weights; a JPEG's own luma, near 0.299 R + 0.587 G + 0.114 B).
  CommandResult r = Tally("im2rec all.lst imgs --color 0 --encoding .png");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::vector<std::string> recs = Records("all");
  ASSERT_EQ(recs.size(), 6u);
  Image jpeg_colour;  // what the JPEG holds, in colour
  const std::string jpeg = Read("imgs/colour.jpg");
  ASSERT_TRUE(DecodeImage(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), {}, &jpeg_colour).ok());
  for (int i = 0; i < 3; ++i) {
    Image img;
    EXPECT_EQ(unpack(recs[i], &img), 1) << i;
    ASSERT_EQ(img.width, 96);
    double error = 0, worst = 0;
    for (int p = 0; p < 96 * 64; ++p) {
      const uint8_t* want = &(i == 0 ? jpeg_colour : colour).pixels[3 * p];
      const uint8_t got = img.pixels[3 * p];
      ASSERT_TRUE(got == img.pixels[3 * p + 1] && got == img.pixels[3 * p + 2]);
      if (i == 0) {  // luma against grey from the decoded colour: rounding and clamping apart
        const double d = std::abs(got - (0.299 * want[0] + 0.587 * want[1] + 0.114 * want[2]));
        error += d / (96 * 64);
        worst = std::max(worst, d);
      } else {
        ASSERT_EQ(got, i == 2 ? want[0] : (want[0] * 9797 + want[1] * 19234 + want[2] * 3737) >> 15) << i << " " << p;
      }
    }
    EXPECT_LT(error, 0.5) << i;  // 0.19 seen; clamping makes the worst pixel differ most (7.3)
    EXPECT_LT(worst, 12) << i;
  }
  // --color 0 --encoding .jpg: one-channel JPEGs.
  ASSERT_EQ(Tally("im2rec all.lst imgs --color 0 --resize 32").rc, 0);
  recs = Records("all");
  Image img;
  EXPECT_EQ(unpack(recs[0], &img), 1);
  EXPECT_EQ(img.height, 32);
  // --color -1: grey stays grey, colour stays colour; alpha and 16-bit are refused by name.
  r = Tally("im2rec all.lst imgs --color -1");
  ASSERT_EQ(r.rc, 0) << r.out;
  recs = Records("all");
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(unpack(recs[0], &img), 3);
  EXPECT_EQ(unpack(recs[2], &img), 1);
  EXPECT_HAS(r.out, "rgba.png: --color -1 would keep its alpha channel");
  EXPECT_HAS(r.out, "trns.png: --color -1 would keep its alpha channel");
  EXPECT_HAS(r.out, "grey16.png: --color -1 would keep its 16-bit samples");
  EXPECT_HAS(r.out, "packed 3 of 6");
  // --color 1 (the default) packs all six in colour.
  r = Tally("im2rec all.lst imgs");
  ASSERT_EQ(r.rc, 0) << r.out;
  recs = Records("all");
  ASSERT_EQ(recs.size(), 6u);
  for (const std::string& rec : recs) EXPECT_EQ(unpack(rec, &img), 3);
}

}  // namespace
}  // namespace tally
