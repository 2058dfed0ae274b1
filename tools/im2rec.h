// The image side of `tally im2rec` pack mode: one image file in, the bytes to pack out,
// transformed as MXNet's im2rec.py transforms them. Internal to tools/.
//
// Thread-safe: PrepareImage may run on many threads at once (the pack mode's --num-thread).
#pragma once

#include <string>

#include "data/image_codec.h"
#include "base/status.h"

namespace tally {

struct PackOptions {
  int resize = 0;            // short edge after resizing; 0 keeps the size
  bool center_crop = false;  // crop the centre square first
  int quality = 95;          // JPEG quality
  std::string encoding = ".jpg";  // ".jpg" or ".png"
  bool pass_through = false;      // pack the file's own bytes (after checking they decode)
  // MXNet's --color, cv2.imread's flag: 1 colour (IMREAD_COLOR), 0 grey (IMREAD_GRAYSCALE,
  // stored as one-channel images), -1 as the file stores it (IMREAD_UNCHANGED: grey files
  // stay one channel; files with alpha or 16-bit samples are refused, which Tally's decoder
  // cannot keep).
  int color = 1;
};

// The size im2rec.py gives a decoded image of width x height: the centre square with
// --center-crop, then with --resize the short edge to `resize` and the long one to
// long * resize / short rounded down (Python's //), computed from the full-size image.
void PackedSize(const PackOptions& options, int width, int height, int* out_width, int* out_height);

// Reads `path` and makes the image bytes to pack. Corrupt or unreadable files fail with a
// Status that names the path: im2rec reports them and leaves them out.
Status PrepareImage(const std::string& path, const PackOptions& options, std::string* out);

// Reads a whole file; refuses files above `max_bytes`.
Status ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out);

}  // namespace tally
