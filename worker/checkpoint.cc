#include "worker/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "models/mxnet_names.h"
#include "models/ndarray_file.h"
#include "base/fault_hooks.h"

namespace tally {
namespace {

constexpr char kParamsFormat[] = "tally-params";
constexpr char kStatesFormat[] = "tally-states";
constexpr char kVersion[] = "1";
// .params files of version 1 were safetensors; version 2 is MXNet's NDArray list.
constexpr char kParamsVersion[] = "2";
// The .params file's metadata travels as this uint8 array of JSON: MXNet's load_checkpoint
// keeps only arg: and aux: arrays, so it passes unseen.
constexpr char kMetadataArray[] = "tally:metadata";

std::string Errno() { return std::strerror(errno); }

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status SyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open to sync: " + Errno());
  int rc = ::fsync(fd);
  std::string why = Errno();
  ::close(fd);
  if (rc != 0) return Status::IoError(path + ": fsync failed: " + why);
  return Status::Ok();
}

Status Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return Status::IoError(to + ": cannot rename " + from + " into place: " + Errno());
  }
  return Status::Ok();
}

// The crash tests kill the writer after stage n of the commit (FaultHooks, documented in
// docs/checkpoint.md); it is never set otherwise.
void CrashPoint(int stage) {
  if (FaultHooksInEffect().checkpoint_kill_at == stage) ::raise(SIGKILL);
}

std::string NewId() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

std::map<std::string, std::string> Metadata(const Checkpoint& c, const char* format, const std::string& id) {
  std::map<std::string, std::string> m = c.info;
  m["format"] = format;
  m["version"] = std::strcmp(format, kParamsFormat) == 0 ? kParamsVersion : kVersion;
  m["checkpoint"] = id;
  m["epoch"] = std::to_string(c.epoch);
  m["batch"] = std::to_string(c.batch);
  m["step"] = std::to_string(c.step);
  return m;
}

// The .params file's arrays: Module names, MXNet's layout, and the metadata.
std::vector<NamedTensor> ParamsArrays(const std::vector<NamedTensor>& params,
                                      const std::map<std::string, std::string>& meta) {
  std::vector<NamedTensor> arrays;
  for (const NamedTensor& p : params) {
    arrays.push_back({MxnetName(p.name, MxnetScheme::kModule), ToMxnetLayout(p.tensor)});
  }
  const std::string json = StringMapToJson(meta);
  Tensor bytes = Tensor::Empty({static_cast<int64_t>(json.size())}, DType::kU8);
  std::memcpy(bytes.raw_data(), json.data(), json.size());
  arrays.push_back({kMetadataArray, bytes});
  return arrays;
}

// Writes path's new contents to path.tmp (as a .params file or a safetensors one) and
// syncs them.
Status WriteSynced(const std::string& path, const std::vector<NamedTensor>& tensors,
                   const std::map<std::string, std::string>& meta, bool params) {
  const std::string tmp = path + ".tmp";
  errno = 0;
  Status s = params ? WriteNDArrayFile(tmp, ParamsArrays(tensors, meta)) : WriteSafetensors(tmp, tensors, meta);
  if (!s.ok()) {
    // The writer names the file but not the reason. errno still holds the failed write's
    // (ENOSPC on a full disk): the clean-up calls after it succeed and leave errno alone.
    const int err = errno;
    if (s.code() != Status::Code::kIoError || err == 0) return s;
    return Status::IoError(s.message() + ": " + std::strerror(err));
  }
  s = SyncPath(tmp, false);
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Reads a .params file (either version) or a .states file, and checks it is the one named.
Status ReadChecked(const std::string& path, const char* format, SafetensorsFile* f) {
  if (std::strcmp(format, kParamsFormat) == 0) {
    bool foreign = false;
    TALLY_RETURN_IF_ERROR(ReadParamsFile(path, &f->tensors, &f->metadata, &foreign));
    if (foreign) {
      return Status::InvalidArgument(path + ": an MXNet checkpoint without Tally's metadata, not one of Tally's "
                                     "(tally train --load-epoch and --pretrained load its weights)");
    }
  } else {
    TALLY_RETURN_IF_ERROR(ReadSafetensors(path, f));
  }
  auto it = f->metadata.find("format");
  if (it == f->metadata.end() || it->second != format) {
    return Status::InvalidArgument(path + ": not a Tally checkpoint file (format is not " + std::string(format) + ")");
  }
  const std::string version = f->metadata["version"];
  if (version != kVersion && !(std::strcmp(format, kParamsFormat) == 0 && version == kParamsVersion)) {
    return Status::InvalidArgument(path + ": checkpoint version '" + version + "', this Tally reads " + kVersion +
                                   (std::strcmp(format, kParamsFormat) == 0 ? std::string(" and ") + kParamsVersion : ""));
  }
  return Status::Ok();
}

// A version 2 .params file's arrays back in Tally's names and layout.
Status FromParamsArrays(const std::string& path, NDArrayFile* file, std::vector<NamedTensor>* params,
                        std::map<std::string, std::string>* metadata) {
  params->clear();
  for (NamedTensor& a : file->arrays) {
    if (a.name == kMetadataArray) continue;
    std::string ours;
    if (!TallyNameOfModuleName(a.name, &ours) || !a.tensor.defined()) {
      return Status::InvalidArgument(path + ": array '" + a.name + "' is not a parameter of a Tally ResNet");
    }
    params->push_back({ours, FromMxnetLayout(a.tensor)});
  }
  const Tensor* meta = file->Find(kMetadataArray);
  const std::string json(static_cast<const char*>(meta->raw_data()), meta->nbytes());
  Status s = StringMapFromJson(json, metadata);
  if (!s.ok()) return Status::InvalidArgument(path + ": its " + kMetadataArray + " array: " + s.message());
  return Status::Ok();
}

// A count of the metadata (epoch, batch, step): a non-negative decimal that fits in 63 bits.
// The file is untrusted: a negative batch or one past the range would index the data split.
Status ParseInt(const std::string& path, const std::map<std::string, std::string>& m, const char* key,
                int64_t* out) {
  auto it = m.find(key);
  if (it == m.end()) return Status::InvalidArgument(path + ": metadata '" + key + "' is missing");
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE) {
    return Status::InvalidArgument(path + ": metadata '" + key + "' is '" + text.substr(0, 40) +
                                   "', not a non-negative integer");
  }
  *out = v;
  return Status::Ok();
}

}  // namespace

std::string CheckpointPath(const std::string& prefix, int64_t number, const char* extension) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%04lld", static_cast<long long>(number));
  return prefix + buf + extension;
}

Status SaveCheckpoint(const std::string& prefix, const Checkpoint& c) {
  const std::string params = CheckpointPath(prefix, c.epoch, ".params");
  const std::string states = CheckpointPath(prefix, c.epoch, ".states");
  const std::string prev = states + ".prev";
  const std::string id = NewId();
  TALLY_RETURN_IF_ERROR(WriteSynced(params, c.params, Metadata(c, kParamsFormat, id), /*params=*/true));
  Status s = WriteSynced(states, c.states, Metadata(c, kStatesFormat, id), /*params=*/false);
  if (!s.ok()) {
    std::remove((params + ".tmp").c_str());
    return s;
  }
  CrashPoint(1);
  // The .states being replaced stays reachable as .prev until the .params matches again.
  if (Exists(states)) {
    const std::string link_tmp = prev + ".tmp";
    std::remove(link_tmp.c_str());
    if (::link(states.c_str(), link_tmp.c_str()) != 0) return Status::IoError(link_tmp + ": cannot link: " + Errno());
    TALLY_RETURN_IF_ERROR(Rename(link_tmp, prev));
    TALLY_RETURN_IF_ERROR(SyncPath(DirOf(states), true));
  }
  CrashPoint(2);
  TALLY_RETURN_IF_ERROR(Rename(states + ".tmp", states));
  TALLY_RETURN_IF_ERROR(SyncPath(DirOf(states), true));
  CrashPoint(3);
  TALLY_RETURN_IF_ERROR(Rename(params + ".tmp", params));
  TALLY_RETURN_IF_ERROR(SyncPath(DirOf(params), true));
  CrashPoint(4);
  std::remove(prev.c_str());
  return Status::Ok();
}

Status ReadParamsFile(const std::string& path, std::vector<NamedTensor>* params,
                      std::map<std::string, std::string>* metadata, bool* foreign) {
  *foreign = false;
  metadata->clear();
  if (!IsNDArrayFile(path)) {  // version 1
    SafetensorsFile f;
    TALLY_RETURN_IF_ERROR(ReadSafetensors(path, &f));
    *params = std::move(f.tensors);
    *metadata = std::move(f.metadata);
    return Status::Ok();
  }
  NDArrayFile file;
  TALLY_RETURN_IF_ERROR(ReadNDArrayFile(path, &file));
  const Tensor* meta = file.Find(kMetadataArray);
  if (meta == nullptr || meta->dtype() != DType::kU8 || meta->ndim() != 1) {
    *foreign = true;
    *params = std::move(file.arrays);
    return Status::Ok();
  }
  return FromParamsArrays(path, &file, params, metadata);
}

Status LoadCheckpoint(const std::string& prefix, int64_t number, Checkpoint* c) {
  const std::string params = CheckpointPath(prefix, number, ".params");
  const std::string states = CheckpointPath(prefix, number, ".states");
  SafetensorsFile p, s;
  TALLY_RETURN_IF_ERROR(ReadChecked(params, kParamsFormat, &p));
  const std::string id = p.metadata["checkpoint"];
  Status read = ReadChecked(states, kStatesFormat, &s);
  if (!read.ok() || s.metadata["checkpoint"] != id) {
    // Killed between the two renames: the .states the .params belongs to is .prev.
    SafetensorsFile older;
    if (Exists(states + ".prev") && ReadChecked(states + ".prev", kStatesFormat, &older).ok() &&
        older.metadata["checkpoint"] == id) {
      s = std::move(older);
    } else if (!read.ok()) {
      return read;
    } else {
      return Status::InvalidArgument(states + " does not belong to " + params + " (checkpoint ids differ)");
    }
  }
  Checkpoint out;
  TALLY_RETURN_IF_ERROR(ParseInt(params, p.metadata, "epoch", &out.epoch));
  TALLY_RETURN_IF_ERROR(ParseInt(params, p.metadata, "batch", &out.batch));
  TALLY_RETURN_IF_ERROR(ParseInt(params, p.metadata, "step", &out.step));
  if (out.epoch != number) {
    return Status::InvalidArgument(params + ": holds epoch " + std::to_string(out.epoch) + ", not " +
                                   std::to_string(number));
  }
  out.params = std::move(p.tensors);
  out.states = std::move(s.tensors);
  out.info = std::move(p.metadata);
  for (const char* k : {"format", "version", "checkpoint", "epoch", "batch", "step"}) out.info.erase(k);
  *c = std::move(out);
  return Status::Ok();
}

Status LatestCheckpoint(const std::string& prefix, int64_t* number) {
  const std::string dir = DirOf(prefix);
  const std::string stem = std::filesystem::path(prefix).filename().string() + "-";
  const std::string ext = ".params";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound("no checkpoint: cannot read directory " + dir + ": " + ec.message());
  std::vector<int64_t> numbers;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= stem.size() + ext.size() || name.compare(0, stem.size(), stem) != 0 ||
        name.compare(name.size() - ext.size(), ext.size(), ext) != 0) {
      continue;
    }
    const std::string digits = name.substr(stem.size(), name.size() - stem.size() - ext.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    numbers.push_back(std::strtoll(digits.c_str(), nullptr, 10));
  }
  std::sort(numbers.rbegin(), numbers.rend());
  for (int64_t n : numbers) {
    Checkpoint c;
    Status s = LoadCheckpoint(prefix, n, &c);
    if (s.ok()) {
      *number = n;
      return Status::Ok();
    }
    std::fprintf(stderr, "tally: skipping checkpoint %s: %s\n", CheckpointPath(prefix, n, "").c_str(),
                 s.message().c_str());
  }
  return Status::NotFound("no loadable checkpoint " + prefix + "-NNNN.params");
}

}  // namespace tally
