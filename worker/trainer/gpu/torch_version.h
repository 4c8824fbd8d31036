// TESSERA_TORCH_AT_LEAST(major, minor): whether the LibTorch being compiled
// against is at least that version, for the code paths that differ between
// Debian's LibTorch 1.13 and LibTorch 2.x. A macro, so that it works in #if.
//
// Thread-safety: compile time only.
#ifndef TESSERA_WORKER_TRAINER_GPU_TORCH_VERSION_H_
#define TESSERA_WORKER_TRAINER_GPU_TORCH_VERSION_H_

#include <torch/version.h>

#define TESSERA_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#endif  // TESSERA_WORKER_TRAINER_GPU_TORCH_VERSION_H_
