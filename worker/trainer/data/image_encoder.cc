#include "worker/trainer/data/image_encoder.h"

#include <spng.h>

#include <csetjmp>
#include <cstdlib>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/jpeg_error.h"

namespace tessera::trainer::data {
namespace {

struct Compressor {
  Compressor() { cinfo.err = err.Install(); }
  ~Compressor() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(buffer);  // allocated by jpeg_mem_dest with malloc
  }
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  jpeg_compress_struct cinfo{};
  JpegErrorManager err;
  bool created = false;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
};

// Holds only trivially destructible locals: a libjpeg error longjmps back here.
bool GuardedCompress(Compressor& c, const uint8_t* pixels, int width, int height,
                     int channels, int quality) {
  if (setjmp(c.err.jump)) return false;
  jpeg_create_compress(&c.cinfo);
  c.created = true;
  jpeg_mem_dest(&c.cinfo, &c.buffer, &c.size);
  c.cinfo.image_width = static_cast<JDIMENSION>(width);
  c.cinfo.image_height = static_cast<JDIMENSION>(height);
  c.cinfo.input_components = channels;
  c.cinfo.in_color_space =
      channels == 1 ? JCS_GRAYSCALE : (channels == 4 ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(&c.cinfo);
  jpeg_set_quality(&c.cinfo, quality, TRUE);
  jpeg_start_compress(&c.cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * channels;
  while (c.cinfo.next_scanline < c.cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels + c.cinfo.next_scanline * stride);
    jpeg_write_scanlines(&c.cinfo, &row, 1);
  }
  jpeg_finish_compress(&c.cinfo);
  return true;
}

absl::Status CheckShape(int width, int height, int channels, bool cmyk_ok) {
  if (width <= 0 || height <= 0 || width > (1 << 16) || height > (1 << 16) ||
      (channels != 1 && channels != 3 && !(cmyk_ok && channels == 4))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode a ", width, "x", height, "x", channels, " image"));
  }
  return absl::OkStatus();
}

struct CtxDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

}  // namespace

absl::StatusOr<std::string> EncodeJpeg(const uint8_t* pixels, int width, int height,
                                       int channels, int quality) {
  if (absl::Status s = CheckShape(width, height, channels, true); !s.ok()) return s;
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG quality ", quality));
  }
  Compressor c;
  if (!GuardedCompress(c, pixels, width, height, channels, quality)) {
    return absl::InternalError(absl::StrCat("JPEG encoder: ", c.err.message));
  }
  return std::string(reinterpret_cast<const char*>(c.buffer), c.size);
}

absl::StatusOr<std::string> EncodePng(const uint8_t* pixels, int width, int height,
                                      int channels) {
  if (absl::Status s = CheckShape(width, height, channels, false); !s.ok()) return s;
  std::unique_ptr<spng_ctx, CtxDeleter> ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  if (ctx == nullptr) return absl::ResourceExhaustedError("spng_ctx_new failed");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(ctx.get(), &ihdr);
  const size_t size = static_cast<size_t>(width) * height * channels;
  int err =
      spng_encode_image(ctx.get(), pixels, size, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (err != 0)
    return absl::InternalError(absl::StrCat("PNG encoder: ", spng_strerror(err)));
  size_t png_size = 0;
  void* png = spng_get_png_buffer(ctx.get(), &png_size, &err);
  if (png == nullptr) {
    return absl::InternalError(absl::StrCat("PNG encoder: ", spng_strerror(err)));
  }
  std::string out(static_cast<const char*>(png), png_size);
  std::free(png);  // the caller owns the buffer spng_get_png_buffer returns
  return out;
}

}  // namespace tessera::trainer::data
