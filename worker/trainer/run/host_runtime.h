// How a rank's process uses its host: glibc's heap thresholds, so that the
// memory a training step frees stays in the heap for the next step, and the
// compute thread counts of LibTorch and of OpenBLAS.
//
// Use: tessera-train calls ConfigureHostAllocator once at start-up; the trainer
// calls ConfigureComputeThreads with the run's thread count before it builds
// the model.
//
// Thread-safety: both change process-wide settings; call them before the
// threads that allocate or compute start, from one thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_HOST_RUNTIME_H_
#define TESSERA_WORKER_TRAINER_RUN_HOST_RUNTIME_H_

namespace tessera::trainer {

// Makes glibc keep freed tensor memory in the heap (allocations below 64 MiB
// are not mmap'ed, and up to 256 MiB of free heap top is kept) instead of
// handing it back to the kernel after every step and faulting in fresh zeroed
// pages on the next: with default settings a CPU step's activations churn
// through mmap/munmap and page faults that cost ~20% of backward for vit-micro.
// Larger blocks are still mapped afresh each time (as is anything a loader
// thread's arena cannot hold, 64 MiB per heap): a float32 batch at 224 px of a
// CPU run. A CUDA rank has no such batches on the host: its loaders fill small
// uint8 batches in pinned memory, which LibTorch's host allocator caches.
// Process-wide; tessera-train calls it once at start-up. Returns whether glibc
// took both settings; false without glibc.
bool ConfigureHostAllocator();

// Sets LibTorch's intra-op thread count and, when the BLAS library is OpenBLAS,
// its thread count too (OpenBLAS otherwise starts one thread per core in every
// rank and oversubscribes the machine).
void ConfigureComputeThreads(int threads);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_HOST_RUNTIME_H_
