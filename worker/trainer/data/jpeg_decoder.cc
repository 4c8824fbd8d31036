#include "worker/trainer/data/jpeg_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/jpeg_error.h"

namespace tessera::trainer::data {
namespace {

struct Decompressor {
  Decompressor() { cinfo.err = err.Install(); }
  ~Decompressor() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  jpeg_decompress_struct cinfo{};
  JpegErrorManager err;
  bool created = false;
};

// Each Guarded* function below sets the jump point of a libjpeg error
// (jpeg_error.h) and holds only trivially destructible locals.

bool GuardedReadHeader(Decompressor& d, absl::string_view bytes) {
  if (setjmp(d.err.jump)) return false;
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  jpeg_mem_src(&d.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

bool IsCmyk(const jpeg_decompress_struct& cinfo) {
  return cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
}

bool GuardedScale(Decompressor& d, int denom) {
  if (setjmp(d.err.jump)) return false;
  d.cinfo.scale_num = 1;
  d.cinfo.scale_denom = static_cast<unsigned int>(denom);
  d.cinfo.out_color_space = IsCmyk(d.cinfo) ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&d.cinfo);
  return true;
}

// Starts decompression of columns [*x0, *x0 + *width) (widened in place to iMCU
// boundaries) and skips the rows above `y0`.
bool GuardedStart(Decompressor& d, JDIMENSION* x0, JDIMENSION* width, JDIMENSION y0) {
  if (setjmp(d.err.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  if (*x0 != 0 || *width != d.cinfo.output_width) {
    jpeg_crop_scanline(&d.cinfo, x0, width);
  }
  if (y0 > 0 && jpeg_skip_scanlines(&d.cinfo, y0) != y0) {
    std::snprintf(d.err.message, sizeof(d.err.message), "could not skip to row %u", y0);
    return false;
  }
  return true;
}

// Inverted (Adobe) or plain CMYK to RGB: a pixel's colour is (1 - C)(1 - K) in
// plain CMYK; Adobe files store 255 - value.
void CmykRowToRgb(const unsigned char* cmyk, int width, bool inverted, uint8_t* rgb) {
  for (int x = 0; x < width; ++x) {
    const unsigned k = inverted ? cmyk[3] : 255u - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned v = inverted ? cmyk[c] : 255u - cmyk[c];
      rgb[c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
    cmyk += 4;
    rgb += 3;
  }
}

// Reads `rows` rows into `out` (RGB rows of `stride` bytes). `cmyk_row`, when
// not null, is a row of output_width * 4 bytes to convert from. `finish`: read
// to the end of the image and check its trailer.
bool GuardedReadRows(Decompressor& d, JDIMENSION rows, uint8_t* out, size_t stride,
                     unsigned char* cmyk_row, bool finish) {
  if (setjmp(d.err.jump)) return false;
  constexpr JDIMENSION kMaxRows = 8;
  JSAMPROW pointers[kMaxRows];
  const int width = static_cast<int>(d.cinfo.output_width);
  for (JDIMENSION done = 0; done < rows;) {
    JDIMENSION want = 1;
    if (cmyk_row != nullptr) {
      pointers[0] = cmyk_row;
    } else {
      want = std::min(kMaxRows, rows - done);
      for (JDIMENSION i = 0; i < want; ++i) pointers[i] = out + (done + i) * stride;
    }
    const JDIMENSION got = jpeg_read_scanlines(&d.cinfo, pointers, want);
    if (got == 0) {
      std::snprintf(d.err.message, sizeof(d.err.message), "no data for row %u", done);
      return false;
    }
    if (cmyk_row != nullptr) {
      CmykRowToRgb(cmyk_row, width, d.cinfo.saw_Adobe_marker, out + done * stride);
    }
    done += got;
  }
  if (finish) jpeg_finish_decompress(&d.cinfo);
  return true;
}

absl::Status JpegError(const Decompressor& d, absl::string_view stage) {
  return absl::DataLossError(absl::StrCat("corrupt JPEG (", stage, "): ", d.err.message));
}

// The decode after the header: scale, crop, skip, read.
absl::Status DecodeBody(Decompressor& d, const RegionRequest& request,
                        DecodedRegion& out) {
  out.scale_denom =
      ChooseDctScaleDenom(out.source_crop, request.out_width, request.out_height);
  if (!GuardedScale(d, out.scale_denom)) return JpegError(d, "scale");
  const double sx = static_cast<double>(d.cinfo.output_width) / out.source_width;
  const double sy = static_cast<double>(d.cinfo.output_height) / out.source_height;
  const CropBox& c = out.source_crop;
  const PixelSpan cols = SpanFor(c.x * sx, c.width * sx,
                                 static_cast<int>(d.cinfo.output_width), request.margin);
  const PixelSpan rows = SpanFor(c.y * sy, c.height * sy,
                                 static_cast<int>(d.cinfo.output_height), request.margin);
  const bool whole_height =
      rows.begin == 0 && rows.end == static_cast<int>(d.cinfo.output_height);
  // jpeg_crop_scanline's first and last columns are upsampled with their
  // outer neighbours replicated (not the image's): ask for one more column on
  // each side so the ones the crop reads are exact.
  const int last = static_cast<int>(d.cinfo.output_width);
  auto x0 = static_cast<JDIMENSION>(std::max(0, cols.begin - 1));
  auto width = static_cast<JDIMENSION>(std::min(last, cols.end + 1)) - x0;
  if (!GuardedStart(d, &x0, &width, static_cast<JDIMENSION>(rows.begin))) {
    return JpegError(d, "start");
  }
  out.width = static_cast<int>(d.cinfo.output_width);
  out.height = rows.end - rows.begin;
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  std::string cmyk_row;
  if (d.cinfo.out_color_space == JCS_CMYK) cmyk_row.resize(size_t{4} * out.width);
  if (!GuardedReadRows(
          d, static_cast<JDIMENSION>(out.height), out.pixels.data(),
          size_t{3} * out.width,
          cmyk_row.empty() ? nullptr : reinterpret_cast<unsigned char*>(cmyk_row.data()),
          whole_height)) {
    return JpegError(d, "scanlines");
  }
  out.crop = CropBox{c.x * sx - x0, c.y * sy - rows.begin, c.width * sx, c.height * sy};
  return absl::OkStatus();
}

}  // namespace

int ChooseDctScaleDenom(const CropBox& crop, int out_width, int out_height) {
  if (out_width <= 0 || out_height <= 0) return 1;
  for (int denom : {8, 4, 2}) {
    if (crop.width / denom >= out_width && crop.height / denom >= out_height)
      return denom;
  }
  return 1;
}

absl::Status DecodeJpegRegionInto(absl::string_view bytes, const RegionRequest& request,
                                  const DecodeLimits& limits, DecodedRegion& out) {
  Decompressor d;
  if (!GuardedReadHeader(d, bytes)) return JpegError(d, "header");
  const int64_t w = d.cinfo.image_width;
  const int64_t h = d.cinfo.image_height;
  if (w > limits.max_side || h > limits.max_side || w * h > limits.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG of ", w, "x", h, " is over the decode limits (",
                     limits.max_side, " per side, ", limits.max_pixels, " pixels)"));
  }
  out.source_width = static_cast<int>(w);
  out.source_height = static_cast<int>(h);
  out.source_crop = ResolveCrop(request, out.source_width, out.source_height);
  return DecodeBody(d, request, out);
}

absl::StatusOr<DecodedRegion> DecodeJpegRegion(absl::string_view bytes,
                                               const RegionRequest& request,
                                               const DecodeLimits& limits) {
  DecodedRegion out;
  absl::Status status = DecodeJpegRegionInto(bytes, request, limits, out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace tessera::trainer::data
