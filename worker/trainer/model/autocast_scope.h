// Mixed precision for a forward pass: while an AutocastScope lives, CUDA
// autocast runs the eligible ops in `dtype` (bf16 or fp16); a disabled scope
// changes nothing. Scopes nest: each restores the state it found, and the
// outermost one also clears autocast's cast cache.
//
// Use: one scope around the forward pass and the loss, e.g.
//   { AutocastScope mixed(autocast, at::kBFloat16); logits = model->forward(x); }
// Backward and the optimizer run outside it.
//
// Thread-safety: autocast's state is per thread; a scope must end on the thread
// it began on.
#ifndef TESSERA_WORKER_TRAINER_MODEL_AUTOCAST_SCOPE_H_
#define TESSERA_WORKER_TRAINER_MODEL_AUTOCAST_SCOPE_H_

#include <c10/core/ScalarType.h>

namespace tessera::trainer {

class AutocastScope {
 public:
  AutocastScope(bool enabled, at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  const bool enabled_;
  bool previous_ = false;  // whether CUDA autocast was on before the scope
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_AUTOCAST_SCOPE_H_
