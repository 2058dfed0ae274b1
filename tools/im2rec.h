// The image side of `tally im2rec` pack mode: one image file in, the bytes to pack out,
// transformed as MXNet's im2rec.py transforms them. Internal to tools/.
//
// Thread-safe: PrepareImage may run on many threads at once (the pack mode's --num-thread).
#pragma once

#include <string>

#include "data/image_codec.h"
#include "ops/status.h"

namespace tally {

struct PackOptions {
  int resize = 0;            // short edge after resizing; 0 keeps the size
  bool center_crop = false;  // crop the centre square first
  int quality = 95;          // JPEG quality
  std::string encoding = ".jpg";  // ".jpg" or ".png"
  bool pass_through = false;      // pack the file's own bytes (after checking they decode)
};

// Reads `path` and makes the image bytes to pack. Corrupt or unreadable files fail with a
// Status that names the path: im2rec reports them and leaves them out.
Status PrepareImage(const std::string& path, const PackOptions& options, std::string* out);

// Reads a whole file; refuses files above `max_bytes`.
Status ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out);

}  // namespace tally
