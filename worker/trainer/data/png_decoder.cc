#include "worker/trainer/data/png_decoder.h"

#include <spng.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer::data {
namespace {

struct CtxDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using Ctx = std::unique_ptr<spng_ctx, CtxDeleter>;

// Chunk and cache limits for ancillary data (text, ICC profiles): far above
// what a photo carries, far below what a lying length field could ask for.
constexpr size_t kMaxChunkBytes = size_t{16} << 20;
constexpr size_t kMaxChunkCache = size_t{64} << 20;

absl::Status PngError(absl::string_view stage, int error) {
  return absl::DataLossError(
      absl::StrCat("corrupt PNG (", stage, "): ", spng_strerror(error)));
}

// Copies columns [cols.begin, cols.end) of an RGB row into `out`.
void CopyColumns(const uint8_t* row, PixelSpan cols, uint8_t* out) {
  std::memcpy(out, row + size_t{3} * cols.begin, size_t{3} * (cols.end - cols.begin));
}

// Non-interlaced images: rows decoded one by one up to the crop's last.
absl::Status DecodeRows(spng_ctx* ctx, size_t row_bytes, PixelSpan rows, PixelSpan cols,
                        DecodedRegion& out) {
  int err = spng_decode_image(ctx, nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);
  if (err != 0) return PngError("decode start", err);
  std::vector<uint8_t> row(row_bytes);
  const size_t out_stride = size_t{3} * out.width;
  for (int y = 0; y < rows.end; ++y) {
    err = spng_decode_row(ctx, row.data(), row.size());
    if (err != 0 && !(err == SPNG_EOI && y == out.source_height - 1)) {
      return PngError(absl::StrCat("row ", y), err);
    }
    if (y >= rows.begin) {
      CopyColumns(row.data(), cols, out.pixels.data() + (y - rows.begin) * out_stride);
    }
  }
  // Decoded to the last row: read the rest, so the image data's checksums
  // (zlib's Adler-32, the chunk CRCs) are verified.
  if (rows.end == out.source_height) {
    err = spng_decode_chunks(ctx);
    if (err != 0) return PngError("trailer", err);
  }
  return absl::OkStatus();
}

// Interlaced images: decoded whole, then cut.
absl::Status DecodeWhole(spng_ctx* ctx, size_t row_bytes, PixelSpan rows, PixelSpan cols,
                         DecodedRegion& out) {
  std::vector<uint8_t> image(row_bytes * out.source_height);
  const int err = spng_decode_image(ctx, image.data(), image.size(), SPNG_FMT_RGB8, 0);
  if (err != 0) return PngError("decode", err);
  const size_t out_stride = size_t{3} * out.width;
  for (int y = rows.begin; y < rows.end; ++y) {
    CopyColumns(image.data() + y * row_bytes, cols,
                out.pixels.data() + (y - rows.begin) * out_stride);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodePngRegionInto(absl::string_view bytes, const RegionRequest& request,
                                 const DecodeLimits& limits, DecodedRegion& out) {
  Ctx ctx(spng_ctx_new(0));
  if (ctx == nullptr) return absl::ResourceExhaustedError("spng_ctx_new failed");
  spng_set_image_limits(ctx.get(), static_cast<uint32_t>(limits.max_side),
                        static_cast<uint32_t>(limits.max_side));
  spng_set_chunk_limits(ctx.get(), kMaxChunkBytes, kMaxChunkCache);
  int err = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  if (err != 0) return PngError("buffer", err);
  spng_ihdr ihdr{};
  err = spng_get_ihdr(ctx.get(), &ihdr);
  if (err == SPNG_EWIDTH || err == SPNG_EHEIGHT || err == SPNG_EUSER_WIDTH ||
      err == SPNG_EUSER_HEIGHT) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNG size is over the decode limits: ", spng_strerror(err)));
  }
  if (err != 0) return PngError("header", err);
  const int64_t w = ihdr.width;
  const int64_t h = ihdr.height;
  if (w * h > limits.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("PNG of ", w, "x", h,
                                                   " is over the decode limit of ",
                                                   limits.max_pixels, " pixels"));
  }
  size_t image_bytes = 0;
  err = spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &image_bytes);
  if (err != 0) return PngError("size", err);
  out.scale_denom = 1;
  out.source_width = static_cast<int>(w);
  out.source_height = static_cast<int>(h);
  out.source_crop = ResolveCrop(request, out.source_width, out.source_height);
  const CropBox& c = out.source_crop;
  const PixelSpan cols = SpanFor(c.x, c.width, out.source_width, request.margin);
  const PixelSpan rows = SpanFor(c.y, c.height, out.source_height, request.margin);
  out.width = cols.end - cols.begin;
  out.height = rows.end - rows.begin;
  out.pixels.resize(size_t{3} * out.width * out.height);
  out.crop = CropBox{c.x - cols.begin, c.y - rows.begin, c.width, c.height};
  const size_t row_bytes = image_bytes / static_cast<size_t>(h);
  return ihdr.interlace_method == 0 ? DecodeRows(ctx.get(), row_bytes, rows, cols, out)
                                    : DecodeWhole(ctx.get(), row_bytes, rows, cols, out);
}

absl::StatusOr<DecodedRegion> DecodePngRegion(absl::string_view bytes,
                                              const RegionRequest& request,
                                              const DecodeLimits& limits) {
  DecodedRegion out;
  absl::Status status = DecodePngRegionInto(bytes, request, limits, out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace tessera::trainer::data
