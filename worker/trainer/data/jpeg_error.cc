#include "worker/trainer/data/jpeg_error.h"

// clang-format off
#include <jerror.h>
// clang-format on

#include <type_traits>

namespace tessera::trainer::data {
namespace {

// libjpeg hands back `pub`; the manager is found from it by a cast.
static_assert(std::is_standard_layout_v<JpegErrorManager>);

[[noreturn]] void FailJpeg(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

bool IsCorruptDataWarning(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
      return true;
    default:
      return false;
  }
}

void EmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && IsCorruptDataWarning(cinfo->err->msg_code)) FailJpeg(cinfo);
}

void OutputMessage(j_common_ptr /*cinfo*/) {}

}  // namespace

jpeg_error_mgr* JpegErrorManager::Install() {
  jpeg_std_error(&pub);
  pub.error_exit = FailJpeg;
  pub.emit_message = EmitMessage;
  pub.output_message = OutputMessage;
  message[0] = '\0';
  return &pub;
}

}  // namespace tessera::trainer::data
