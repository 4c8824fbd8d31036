// The libjpeg error manager of the JPEG decoder and encoder. libjpeg reports a
// fatal error through error_exit, which must not return: this one formats the
// message and longjmps to the guarded call that is running. Each guarded
// function sets the jump point itself, first thing, and holds only trivially
// destructible locals, so the jump skips no destructor:
//
//   struct Decompressor { jpeg_decompress_struct cinfo{}; JpegErrorManager err; };
//   Decompressor d;
//   d.cinfo.err = d.err.Install();
//   ...
//   bool GuardedReadHeader(Decompressor& d) {
//     if (setjmp(d.err.jump)) return false;  // d.err.message says why
//     jpeg_read_header(&d.cinfo, TRUE);
//     return true;
//   }
//
// Warnings that mean the pixels are not the file's (a truncated file, a bad
// Huffman code: libjpeg would go on with grey or garbage blocks) are fatal
// too, as PIL treats truncated files; no message is printed.
//
// One manager per libjpeg object; used by the thread that uses that object.
#ifndef TESSERA_WORKER_TRAINER_DATA_JPEG_ERROR_H_
#define TESSERA_WORKER_TRAINER_DATA_JPEG_ERROR_H_

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <csetjmp>

namespace tessera::trainer::data {

struct JpegErrorManager {
  // Sets `pub` up (libjpeg's defaults with the handlers above) and returns it,
  // for the libjpeg object's `err`.
  jpeg_error_mgr* Install();

  jpeg_error_mgr pub{};  // first member: libjpeg casts cinfo->err to it
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};  // why the last guarded call failed
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_JPEG_ERROR_H_
