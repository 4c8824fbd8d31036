// Fuzzes the image data layer's readers of untrusted bytes
// (worker/trainer/data/): the tar reader of the shard datasets (TarReader over
// libarchive) and the JPEG (libjpeg-turbo) and PNG (libspng) decoders, whole
// and region decodes. The system's libarchive, libjpeg and libspng are not
// instrumented: the fuzzer steers by our code's coverage, and finds their
// faults as crashes or as broken invariants below.
//
// Input: byte 0 picks the mode, the rest is the file:
//   0  tar archive: TarReader::FromBuffer, every member read (data or skipped,
//      by the member's parity)
//   1  image: DecodeImage (whole)
//   2  image region: bytes 1-6 are the crop (x, y, width, height, each one
//      byte, in pixels) and the output width and height; the image follows
//   3  image through the training transform: byte 1 is the output size
//      (1-64), the image follows
//
// Besides crashes and sanitizer reports, these invariants abort the run:
//   - errors are DataLoss (or InvalidArgument: an image over the limits);
//   - tar: a member's data has its stated size, its name is non-empty and
//     within the limit, a failed reader keeps failing with the same status;
//   - decodes: the pixels are width x height x 3, inside the source, and the
//     reported crop lies inside the decoded pixels.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_check.h"
#include "worker/trainer/data/image_decoder.h"
#include "worker/trainer/data/tar_reader.h"
#include "worker/trainer/data/transforms.h"

namespace tessera::fuzz {
namespace {

namespace td = ::tessera::trainer::data;

// Small limits keep a lying header from allocating much in the fuzzer.
td::DecodeLimits Limits() {
  td::DecodeLimits limits;
  limits.max_pixels = int64_t{1} << 20;
  limits.max_side = 4096;
  return limits;
}

void CheckOnlyBadData(const absl::Status& status, absl::string_view what) {
  Check(status.ok() || absl::IsDataLoss(status) || absl::IsInvalidArgument(status), what,
        status.ToString());
}

void FuzzTar(const std::string& bytes) {
  td::TarReaderOptions options;
  options.max_member_bytes = 1 << 20;
  options.max_name_bytes = 1024;
  auto reader = td::TarReader::FromBuffer(bytes, options);
  for (int i = 0; i < 10000; ++i) {
    const bool read_data = i % 2 == 0;
    auto member = reader->Next(read_data);
    if (!member.ok()) {
      Check(absl::IsDataLoss(member.status()), "tar: unexpected code",
            member.status().ToString());
      Check(reader->Next().status() == member.status(), "tar: error is not sticky");
      return;
    }
    if (!member->has_value()) return;
    const td::TarMember& m = **member;
    Check(
        !m.name.empty() && static_cast<int64_t>(m.name.size()) <= options.max_name_bytes,
        "tar: bad member name", m.name);
    Check(m.size >= 0 && m.size <= options.max_member_bytes, "tar: bad member size");
    Check(read_data ? static_cast<int64_t>(m.data.size()) == m.size : m.data.empty(),
          "tar: data size differs from the header", absl::StrCat(m.size));
  }
}

void CheckRegion(const absl::StatusOr<td::DecodedRegion>& region) {
  CheckOnlyBadData(region.status(), "decode: unexpected code");
  if (!region.ok()) return;
  const td::DecodedRegion& r = *region;
  Check(r.width > 0 && r.height > 0 && r.width <= r.source_width &&
            r.height <= r.source_height,
        "decode: decoded size outside the source");
  Check(r.pixels.size() == static_cast<size_t>(r.width) * r.height * 3,
        "decode: pixel count differs from width x height x 3");
  const double slack = 1e-6;
  Check(r.crop.x >= -slack && r.crop.y >= -slack && r.crop.width > 0 &&
            r.crop.height > 0 && r.crop.x + r.crop.width <= r.width + slack &&
            r.crop.y + r.crop.height <= r.height + slack,
        "decode: crop outside the decoded pixels",
        absl::StrCat(r.crop.x, ",", r.crop.y, " ", r.crop.width, "x", r.crop.height,
                     " in ", r.width, "x", r.height));
}

void FuzzRegion(const uint8_t* data, size_t size) {
  if (size < 7) return;
  td::RegionRequest request;
  const td::CropBox crop{double(data[1]), double(data[2]), double(data[3]) + 1,
                         double(data[4]) + 1};
  request.choose_crop = [crop](int, int) { return crop; };
  request.out_width = data[5];
  request.out_height = data[6];
  const std::string image(reinterpret_cast<const char*>(data + 7), size - 7);
  CheckRegion(td::DecodeImageRegion(image, request, Limits()));
}

void FuzzTransform(const uint8_t* data, size_t size) {
  if (size < 2) return;
  td::TransformOptions options;
  options.size = 1 + data[1] % 64;
  options.seed = 7;
  std::vector<uint8_t> out(size_t{3} * options.size * options.size);
  const std::string image(reinterpret_cast<const char*>(data + 2), size - 2);
  CheckOnlyBadData(td::DecodeTransformed(image, options, 1, 2, out.data()),
                   "transform: unexpected code");
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
      FuzzTar(rest);
      break;
    case 1:
      CheckRegion(tessera::trainer::data::DecodeImage(rest, Limits()));
      break;
    case 2:
      FuzzRegion(data, size);
      break;
    default:
      FuzzTransform(data, size);
      break;
  }
  return 0;
}
