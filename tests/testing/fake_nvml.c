/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for tests: it answers
 * the few NVML calls Tessera makes (common/gpu_monitor.h) for two GPUs,
 * index 0 ("GPU-fake-0") and 1 ("GPU-fake-1"), with fixed readings:
 * GPU i is (40 + 10 i)% busy, uses (1 + i) GiB of 16 GiB, is at 50 + i
 * degrees and draws 100.5 + i W. */
#include <string.h>

typedef struct {
  unsigned int gpu;
  unsigned int memory;
} Utilization;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} Memory;

static int devices[2] = {0, 1};

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index > 1) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = &devices[index];
  return 0;
}
int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (strcmp(uuid, "GPU-fake-0") == 0) return nvmlDeviceGetHandleByIndex_v2(0, device);
  if (strcmp(uuid, "GPU-fake-1") == 0) return nvmlDeviceGetHandleByIndex_v2(1, device);
  return 6; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  u->gpu = 40 + 10 * *(int*)device;
  u->memory = 5;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  m->total = 16ULL << 30;
  m->used = (1ULL + *(int*)device) << 30;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* t) {
  (void)sensor;
  *t = 50 + *(int*)device;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  *milliwatts = 100500 + 1000 * *(int*)device;
  return 0;
}
