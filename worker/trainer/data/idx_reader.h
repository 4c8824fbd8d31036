// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed
// (zlib reads both transparently), and the loader of a Fashion-MNIST split from
// its four standard files.
//
// Every file is untrusted: the magic number, the rank, each dimension and the
// payload length are checked, and a malformed file yields a status naming the file
// and the problem (DataLoss for bad content, NotFound for a missing file); nothing
// aborts. Free functions without shared state: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IDX_READER_H_
#define TESSERA_WORKER_TRAINER_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

// An unsigned-byte IDX array: dims[0] is the item count.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

struct IdxReadOptions {
  // Largest payload accepted; a header claiming more is rejected before any
  // allocation.
  int64_t max_payload_bytes = int64_t{1} << 31;
  // Largest single dimension accepted.
  int64_t max_dimension = int64_t{1} << 28;
};

// Reads the IDX file at `path` (gzip or plain), which must hold unsigned bytes
// (type 0x08) in exactly `expected_rank` dimensions, with no trailing bytes.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank,
                                     const IdxReadOptions& options = {});

// Loads the train or test split of Fashion-MNIST (or MNIST: same layout) from
// `dir`, which holds {train,t10k}-{images-idx3,labels-idx1}-ubyte, each either
// plain or with a .gz suffix. Checks that image and label counts agree and that
// labels are below 10. `limit` > 0 keeps only the first `limit` images.
absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, Split split,
                                              int64_t limit,
                                              const IdxReadOptions& options = {});

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_IDX_READER_H_
