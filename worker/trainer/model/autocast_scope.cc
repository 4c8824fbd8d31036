#include "worker/trainer/model/autocast_scope.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace tessera::trainer {

// LibTorch 2.4 made autocast's state per device type; before, CUDA's had
// functions of its own.
AutocastScope::AutocastScope(bool enabled, at::ScalarType dtype) : enabled_(enabled) {
  if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  previous_ = at::autocast::is_enabled();
  at::autocast::set_enabled(true);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCUDA, previous_);
#else
  at::autocast::set_enabled(previous_);
#endif
}

}  // namespace tessera::trainer
