// Writes the fuzzers' seed corpora, made by code rather than kept as binary files:
//   make_seeds DIR   ->  DIR/message/*, DIR/recordio/*, DIR/image/*, DIR/secure/*, and the
//                        file formats' DIR/ndarray/*, DIR/safetensors/*, DIR/checkpoint/*
// Each seed is one input in its harness's layout (layouts.h, docs/fuzzing.md): small valid
// message sequences of a dist_sync or dist_async job, including ones the server must refuse,
// RecordIO files with their .idx, and JPEG and PNG images of every colour type the decoders
// handle. Deterministic: the same files on every run (file_seeds.cc: but for checkpoint ids).
#include <png.h>
#include <turbojpeg.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "data/image_codec.h"
#include "data/recordio.h"
#include "net/secure_session.h"
#include "net/zmtp.h"
#include "tests/fuzz/file_seeds.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/layouts.h"

namespace tally {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

// ---- Messages ---------------------------------------------------------------------------

Tensor Values(int n, float first, DType dtype) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int i = 0; i < n; ++i) t.data<float>()[i] = first + 0.25f * i;
  return t.To(dtype);
}

// Builds the message sequence of one seed; node ids as in a job of `shape`.
class Script {
 public:
  explicit Script(JobShape shape) : shape_(shape), bytes_(JobByte(shape)) {}

  int Worker(int rank) const { return 1 + shape_.num_servers + rank; }

  Message Request(wire::Command c, int sender, int64_t step) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(sender);
    m.meta.set_receiver_id(1);
    m.meta.set_request_id(++request_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(shape_.num_workers);
    return m;
  }
  static void Slice(Message* m, uint64_t key, uint64_t offset, int length, DType dtype, float first) {
    wire::KeySlice* s = m->meta.add_slices();
    s->set_key(key);
    s->set_offset(offset);
    s->set_length(static_cast<uint64_t>(length));
    m->meta.set_dtype(ToWire(dtype));
    if (m->meta.command() != wire::PULL) m->data.push_back(Values(length, first, dtype));
  }
  void SetOptimizer(const std::string& type, float momentum, bool async) {
    Message m = Request(wire::SET_OPTIMIZER, Worker(0), 0);
    wire::OptimizerConfig* o = m.meta.mutable_optimizer();
    o->set_type(type);
    o->set_lr(0.1f);
    o->set_momentum(momentum);
    o->set_wd(1e-4f);
    o->set_rescale_grad(1.0f);
    o->set_clip_gradient(-1.0f);
    o->set_multi_precision(true);
    m.meta.set_async(async);
    Add(m);
  }
  // Two keys: key 0 of 4 values and key 7 of 3, as the server's slices.
  void Init(bool async, DType dtype = DType::kF32) {
    Message m = Request(wire::INIT, Worker(0), -1);
    m.meta.set_async(async);
    Slice(&m, 0, 0, 4, dtype, 1.0f);
    Slice(&m, 7, 0, 3, dtype, -2.0f);
    Add(m);
  }
  void Push(wire::Command c, int rank, int64_t step, DType dtype, DType pull_dtype = DType::kF32) {
    Message m = Request(c, Worker(rank), step);
    Slice(&m, 0, 0, 4, dtype, 0.5f * (rank + 1));
    Slice(&m, 7, 0, 3, dtype, -0.5f * (rank + 1));
    m.meta.set_pull_dtype(ToWire(pull_dtype));
    Add(m);
  }
  void Pull(int rank, int64_t step, DType pull_dtype, bool optimizer_state = false) {
    Message m = Request(wire::PULL, Worker(rank), step);
    Slice(&m, 0, 0, 4, DType::kF32, 0);
    Slice(&m, 7, 0, 3, DType::kF32, 0);
    m.meta.set_pull_dtype(ToWire(pull_dtype));
    m.meta.set_optimizer_state(optimizer_state);
    Add(m);
  }
  void SetLr(float lr, int64_t step) {
    Message m = Request(wire::SET_LR, Worker(0), step);
    m.meta.set_lr(lr);
    Add(m);
  }
  void Add(const Message& m, int misalign = 0) { AppendMessage(MessageFrames(m), misalign, &bytes_); }
  void AddFrames(const std::vector<std::string>& frames) { AppendMessage(frames, 0, &bytes_); }

  const std::string& bytes() const { return bytes_; }

 private:
  JobShape shape_;
  std::string bytes_;
  uint64_t request_id_ = 0;
};

void WriteMessageSeeds(const fs::path& dir) {
  {  // dist_sync, two workers, SGD with momentum: every step applied, pulls waiting for them
    Script s({1, 2, true});
    s.SetOptimizer("sgd", 0.9f, false);
    s.Init(false);
    s.Pull(0, -1, DType::kF32);
    s.Pull(1, 0, DType::kF16);  // waits for step 0
    s.Push(wire::PUSH, 0, 0, DType::kF32);
    s.Push(wire::PUSH, 1, 0, DType::kF16);
    s.SetLr(0.05f, 1);
    s.Push(wire::PUSHPULL, 1, 1, DType::kBF16, DType::kBF16);
    s.Push(wire::PUSHPULL, 0, 1, DType::kF16, DType::kF32);
    s.Pull(0, 1, DType::kF32, /*optimizer_state=*/true);
    WriteSeed(dir, "sync_sgd", s.bytes());
  }
  {  // dist_async, NAG, four workers and two servers, frames misaligned as ZeroMQ may leave them
    Script s({2, 4, false});
    s.SetOptimizer("nag", 0.9f, true);
    s.Init(true, DType::kF16);
    for (int rank = 0; rank < 4; ++rank) s.Push(wire::PUSH, rank, 0, DType::kF32);
    s.Pull(3, 0, DType::kBF16);
    Message m = s.Request(wire::PUSH, s.Worker(2), 1);
    Script::Slice(&m, 7, 0, 3, DType::kF16, 1.0f);
    m.meta.set_stop(true);
    s.Add(m, 3);
    WriteSeed(dir, "async_nag", s.bytes());
  }
  {  // no optimizer: one worker's push becomes the values; a stop request
    Script s({1, 1, false});
    s.Init(false);
    Message m = s.Request(wire::PUSH, s.Worker(0), 0);
    Script::Slice(&m, 0, 0, 4, DType::kF32, 3.0f);
    m.meta.set_stop(true);
    s.Add(m, 1);
    s.Pull(0, 0, DType::kF32);
    WriteSeed(dir, "no_optimizer", s.bytes());
  }
  {  // a resumed job: momentum restored, read back before any push
    Script s({1, 2, false});
    s.SetOptimizer("sgd", 0.9f, false);
    s.Init(false);
    Message m = s.Request(wire::INIT, s.Worker(0), -1);
    m.meta.set_optimizer_state(true);
    Script::Slice(&m, 0, 0, 4, DType::kF32, 0.125f);
    Script::Slice(&m, 7, 0, 3, DType::kF32, -0.125f);
    s.Add(m);
    s.Pull(1, -1, DType::kF32, /*optimizer_state=*/true);
    WriteSeed(dir, "resume_state", s.bytes());
  }
  {  // requests the server must refuse, each answered with an error
    Script s({1, 2, false});
    s.Pull(0, 0, DType::kF32);                 // before INIT
    s.Push(wire::PUSH, 0, 0, DType::kF32);     // unknown keys
    s.Init(false);
    s.Init(false);                             // twice
    s.Push(wire::PUSH, 0, -3, DType::kF32);    // negative step
    s.Push(wire::PUSH, 1, 0, DType::kF32);
    s.Push(wire::PUSH, 1, 0, DType::kF32);     // the same worker twice
    Message huge = s.Request(wire::PULL, s.Worker(0), 0);
    wire::KeySlice* k = huge.meta.add_slices();
    k->set_key(0);
    k->set_offset(uint64_t{1} << 62);          // an offset nobody holds
    k->set_length(4);
    s.Add(huge);
    s.SetOptimizer("adam", 0.9f, false);       // unknown optimizer
    s.SetLr(-1.0f, 0);                         // negative learning rate
    Message from_server = s.Request(wire::PUSH, 1, 0);
    Script::Slice(&from_server, 0, 0, 4, DType::kF32, 0);
    s.Add(from_server);                        // a sender that is not a worker
    Message answer = s.Request(wire::RESPONSE, s.Worker(1), 0);
    s.Add(answer);                             // a server takes no answers
    Message membership = s.Request(wire::REGISTER, s.Worker(0), 0);
    s.Add(membership);                         // not a data command
    std::vector<std::string> frames = MessageFrames(huge);
    frames.push_back("odd");                   // a frame the Meta does not name
    s.AddFrames(frames);
    s.AddFrames({"not a protobuf \xff\xff\xff"});
    WriteSeed(dir, "refused", s.bytes());
  }
}

// ---- RecordIO ---------------------------------------------------------------------------

std::string ImageRecord(uint64_t id, float label, const std::vector<float>& labels, const std::string& image) {
  ImageRecordHeader h;
  h.id = id;
  h.label = label;
  h.labels = labels;
  return PackImageRecord(h, image);
}

// A .rec of `payloads` and its .idx text.
void Pack(const std::vector<std::string>& payloads, std::string* rec, std::string* idx) {
  for (size_t i = 0; i < payloads.size(); ++i) {
    *idx += std::to_string(i) + "\t" + std::to_string(rec->size()) + "\n";
    AppendRecord(payloads[i], rec);
  }
}

void WriteRecordSeeds(const fs::path& dir) {
  std::string magic_inside = "abcd";
  for (uint32_t v = recordio::kMagic, i = 0; i < 4; ++i, v >>= 8) magic_inside.push_back(static_cast<char>(v));
  magic_inside += "efgh";
  const std::vector<std::string> payloads = {
      ImageRecord(0, 3.0f, {}, "\xff\xd8\xff\xe0 jpeg bytes"),
      ImageRecord(1, 0.0f, {1.0f, 0.5f, 2.0f}, "png?"),
      magic_inside,  // split into parts where the magic word sits
      "",
      ImageRecord(4, 1.0f, {}, std::string(37, 'x')),
  };
  std::string rec, idx;
  Pack(payloads, &rec, &idx);
  WriteSeed(dir, "indexed", RecordInput(kRecordUseIndex, idx, rec));
  WriteSeed(dir, "sequential", RecordInput(0, "", rec));

  // A corrupt record in the middle: the scan must find the next one.
  std::string broken = rec;
  broken[4 * 10] ^= 0x5a;
  WriteSeed(dir, "scan", RecordInput(kRecordScanAfterError | kRecordUseIndex, idx, broken));

  // An offset that wraps around 2^64 when the 8 bytes of a part header are added to it.
  WriteSeed(dir, "index_wraps", RecordInput(kRecordUseIndex, "0\t0\n1\t18446744073709551612\n", rec));

  // The same text read as a .lst.
  WriteSeed(dir, "list", RecordInput(0, "0\t1.000000\timages/a b.jpg\n1\t2.000000\t0.500000\tc.png\r\n\n", rec));
}

// ---- Images -----------------------------------------------------------------------------

Image Gradient(int h, int w) {
  Image img;
  img.Resize(h, w);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.row(y) + 3 * x;
      p[0] = static_cast<uint8_t>(x * 255 / w);
      p[1] = static_cast<uint8_t>(y * 255 / h);
      p[2] = static_cast<uint8_t>((x + y) * 7);
    }
  }
  return img;
}

// Through libjpeg-turbo directly, for what EncodeJpeg does not write: grey, 4:4:4,
// progressive, CMYK.
std::string Jpeg(const Image& img, int pixel_format, int subsamp, int flags) {
  std::vector<uint8_t> pixels = img.pixels;
  if (pixel_format == TJPF_CMYK) {
    pixels.clear();
    for (size_t i = 0; i < img.pixels.size(); i += 3) {
      pixels.insert(pixels.end(), {img.pixels[i], img.pixels[i + 1], img.pixels[i + 2], 200});
    }
  }
  tjhandle tj = tjInitCompress();
  CHECK(tj);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  CHECK_EQ(tjCompress2(tj, pixels.data(), img.width, 0, img.height, pixel_format, &out, &size, subsamp, 75, flags), 0)
      << tjGetErrorStr2(tj);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return jpeg;
}

// Through libpng's simplified API, for the colour types EncodePng does not write.
std::string Png(const Image& img, png_uint_32 format) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = img.width;
  png.height = img.height;
  png.format = format;
  png.colormap_entries = 0;
  const int channels = PNG_IMAGE_SAMPLE_CHANNELS(format);
  const int component = PNG_IMAGE_SAMPLE_COMPONENT_SIZE(format);
  std::vector<uint8_t> pixels(static_cast<size_t>(img.width) * img.height * channels * component);
  for (size_t i = 0; i < static_cast<size_t>(img.width) * img.height; ++i) {
    for (int c = 0; c < channels; ++c) {
      const uint8_t v = c < 3 ? img.pixels[3 * i + c] : static_cast<uint8_t>(i * 13);
      for (int b = 0; b < component; ++b) pixels[(i * channels + c) * component + b] = v;
    }
  }
  png_alloc_size_t size = 0;
  CHECK(png_image_write_get_memory_size(png, size, 0, pixels.data(), 0, nullptr)) << png.message;
  std::string out(size, '\0');
  CHECK(png_image_write_to_memory(&png, out.data(), &size, 0, pixels.data(), 0, nullptr)) << png.message;
  out.resize(size);
  return out;
}

// A JPEG that warns as its scan starts (spectral selection ending at 62, not 63, in a
// sequential JPEG) and fails right after (a Huffman table with three codes of length 1).
// libjpeg-turbo reports that failure as a warning, and DecodeImage once took the image as
// good, with none of its pixels written.
std::string JpegWarningThenError(const std::string& jpeg) {
  std::string out = jpeg;
  const size_t dht = out.find("\xff\xc4");
  CHECK_NE(dht, std::string::npos);
  char* bits = &out[dht + 5];  // after FF C4, the length, the class and id: codes per length
  CHECK_GE(bits[2], 3) << "no table with 3 codes of length 3 to move";
  bits[0] = static_cast<char>(bits[0] + 3);
  bits[2] = static_cast<char>(bits[2] - 3);
  const size_t sos = out.find("\xff\xda");
  CHECK_NE(sos, std::string::npos);
  const size_t components = static_cast<uint8_t>(out[sos + 4]);
  out[sos + 5 + 2 * components + 1] = 62;  // FF DA, length, Ns, Ns x (Cs, Td|Ta), Ss, Se
  return out;
}

// A JPEG whose scan data stops halfway, before its end-of-image marker: libjpeg warns
// ("premature end of data segment") and fills the rest. The handle that decoded it once
// failed the next image (found by the image fuzzer, which decodes every input twice).
std::string JpegCutScan(const std::string& jpeg) {
  const size_t sos = jpeg.find("\xff\xda");
  CHECK_NE(sos, std::string::npos);
  const size_t data = sos + 2 + (static_cast<uint8_t>(jpeg[sos + 2]) << 8 | static_cast<uint8_t>(jpeg[sos + 3]));
  const size_t eoi = jpeg.size() - 2;
  return jpeg.substr(0, data + (eoi - data) / 2) + "\xff\xd9";
}

// An abbreviated JPEG: the DHT segment of DC table 1 removed, which its chroma scans use.
// libjpeg decodes it with the standard table, or, on a handle that decoded another image,
// with that image's table: DecodeImage once gave it different pixels after other images.
std::string JpegWithoutDcTable1(const std::string& jpeg) {
  std::string out = jpeg.substr(0, 2);
  size_t i = 2;
  while (i + 4 <= jpeg.size()) {
    const uint8_t marker = static_cast<uint8_t>(jpeg[i + 1]);
    if (marker == 0xda) break;
    const size_t length = static_cast<uint8_t>(jpeg[i + 2]) << 8 | static_cast<uint8_t>(jpeg[i + 3]);
    if (!(marker == 0xc4 && jpeg[i + 4] == 0x01)) out += jpeg.substr(i, 2 + length);
    i += 2 + length;
  }
  CHECK_LE(i + 4, jpeg.size()) << "no SOS marker";
  return out + jpeg.substr(i);
}

void WriteImageSeeds(const fs::path& dir) {
  const Image small = Gradient(12, 16), odd = Gradient(7, 5), wide = Gradient(24, 40);
  std::string bytes;
  CHECK(EncodeJpeg(small, 90, &bytes).ok());
  WriteSeed(dir, "jpeg_420", ImageInput(0, bytes));
  CHECK(EncodeJpeg(wide, 50, &bytes).ok());
  WriteSeed(dir, "jpeg_scaled", ImageInput(2, bytes));  // min 16x16: decoded at a smaller scale
  WriteSeed(dir, "jpeg_scaled_pow2", ImageInput(8 | 1, bytes));
  WriteSeed(dir, "jpeg_warning_then_error", ImageInput(0, JpegWarningThenError(bytes)));
  WriteSeed(dir, "jpeg_cut_scan", ImageInput(8 | 1, JpegCutScan(bytes)));
  WriteSeed(dir, "jpeg_no_dc_table_1", ImageInput(0, JpegWithoutDcTable1(bytes)));
  WriteSeed(dir, "jpeg_grey", ImageInput(0, Jpeg(odd, TJPF_RGB, TJSAMP_GRAY, 0)));
  WriteSeed(dir, "jpeg_444_progressive", ImageInput(0, Jpeg(small, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE)));
  WriteSeed(dir, "jpeg_cmyk", ImageInput(0, Jpeg(odd, TJPF_CMYK, TJSAMP_444, 0)));
  CHECK(EncodePng(odd, &bytes).ok());
  WriteSeed(dir, "png_rgb", ImageInput(0, bytes));
  WriteSeed(dir, "png_grey", ImageInput(0, Png(odd, PNG_FORMAT_GRAY)));
  WriteSeed(dir, "png_grey_alpha", ImageInput(0, Png(odd, PNG_FORMAT_GA)));
  WriteSeed(dir, "png_rgba", ImageInput(0, Png(small, PNG_FORMAT_RGBA)));
  WriteSeed(dir, "png_16bit", ImageInput(0, Png(odd, PNG_FORMAT_LINEAR_RGB)));
}

// ---- Secure frames ------------------------------------------------------------------------

// One message of the secure harness's input: its connection, frame count and frames.
void PutSecureMessage(int conn, const std::vector<std::string>& frames, std::string* out) {
  PutByte(static_cast<uint8_t>(conn), out);
  PutByte(static_cast<uint8_t>(frames.size() - 1), out);
  for (const std::string& f : frames) {
    PutLe16(static_cast<uint16_t>(f.size()), out);
    out->append(f);
  }
}

void WriteSecureSeeds(const fs::path& dir) {
  JobAuth server_auth, worker_auth;
  server_auth.secret = worker_auth.secret = std::string(32, '\x5a');
  server_auth.job = worker_auth.job = JobNames{1, 2};
  server_auth.self = "server 0";
  worker_auth.self = "worker 1";
  Responder responder(&server_auth);
  ClientSession client(&worker_auth, "server 0");
  const std::string hello = client.Hello();
  std::string why;
  const std::string welcome = responder.OnHello(1, hello.data(), hello.size(), 5, &why);
  CHECK(client.OnReply(welcome.data(), welcome.size()).ok());
  // A sealed PUSH-sized message: a Meta and one data frame of 16 values.
  std::vector<Tensor> data{Values(16, 1, DType::kF32)};
  const std::string meta(40, 'm');
  std::vector<size_t> sizes;
  CHECK(client.SealedSizes(meta, data, &sizes).ok());
  std::vector<std::string> sealed;
  for (size_t n : sizes) sealed.emplace_back(n, '\0');
  std::vector<uint8_t*> outs;
  for (std::string& f : sealed) outs.push_back(reinterpret_cast<uint8_t*>(f.data()));
  client.Seal(meta, data, outs);

  std::string in;
  PutSecureMessage(1, {hello}, &in);
  WriteSeed(dir, "hello", in);
  in.clear();
  PutSecureMessage(1, {hello}, &in);
  PutSecureMessage(1, {client.confirm()}, &in);
  PutSecureMessage(1, sealed, &in);
  PutSecureMessage(0, sealed, &in);
  WriteSeed(dir, "handshake_then_sealed", in);
  in.clear();
  PutSecureMessage(2, {welcome}, &in);
  PutSecureMessage(2, {EncodeRefuse(RefuseReason::kNoSession)}, &in);
  WriteSeed(dir, "welcome_and_refuse", in);
  // ZMTP frames as a stranger's DEALER sends them after its greeting: the HELLO, then a
  // frame with MORE set, a long one, and a PING command.
  std::string zmtp;
  ZmtpPutFrame(hello.data(), hello.size(), /*more=*/false, &zmtp);
  ZmtpPutFrame("x", 1, /*more=*/true, &zmtp);
  ZmtpPutFrame(sealed[1].data(), sealed[1].size(), /*more=*/false, &zmtp);
  zmtp += std::string("\x04\x05\x04PING", 7);
  in.clear();
  PutSecureMessage(3, {zmtp}, &in);
  WriteSeed(dir, "zmtp_frames", in);
}

}  // namespace
}  // namespace fuzz
}  // namespace tally

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  tally::fuzz::WriteMessageSeeds(dir / "message");
  tally::fuzz::WriteRecordSeeds(dir / "recordio");
  tally::fuzz::WriteImageSeeds(dir / "image");
  tally::fuzz::WriteSecureSeeds(dir / "secure");
  tally::fuzz::WriteFileSeeds(dir);
  return 0;
}
