#include "worker/trainer/run/host_runtime.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>

namespace tessera::trainer {

bool ConfigureHostAllocator() {
#ifdef __GLIBC__
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  return mmap_set && trim_set;
#else
  return false;
#endif
}

void ConfigureComputeThreads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* set_blas_threads =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }
}

}  // namespace tessera::trainer
