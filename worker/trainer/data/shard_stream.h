// Streams one rank's samples from its tar shards (WebDataset layout): each
// shard is read front to back once, members are grouped into samples by key
// (the member name up to the first '.' of its last path component, as the
// webdataset package does), and a sample is its image (KEY.jpg, KEY.jpeg or
// KEY.png, told apart by content when decoded) and its class (KEY.cls: ASCII
// decimal class index); other members (KEY.json, ...) are ignored. Samples then
// pass through a bounded shuffle buffer: the buffer fills to `shuffle_buffer`
// samples and each Read takes a random one of them, so memory stays at that
// many encoded images (about 256 x 110 KB for ImageNet JPEGs) whatever the
// shard sizes. The buffer's generator is keyed by (seed, epoch, rank): the
// stream is a pure function of its options.
//
// Bad input: a sample without an image or a .cls, or with a label outside the
// classes, is DataLoss naming SHARD:KEY; a damaged tar ends that shard (its
// first error is kept), and when the shards end before `count` samples, every
// missing sample is DataLoss with that reason. The stream always yields
// exactly `count` results, so the rank's batch count does not change.
//
// Sequential (see sample_stream.h): one caller at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_SHARD_STREAM_H_
#define TESSERA_WORKER_TRAINER_DATA_SHARD_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/trainer/data/sample_rng.h"
#include "worker/trainer/data/sample_stream.h"
#include "worker/trainer/data/tar_reader.h"

namespace tessera::trainer::data {

struct ShardStreamOptions {
  std::string root;  // the dataset root
  struct Shard {
    std::string file;      // relative to root
    int64_t first_id = 0;  // id of its first sample (ids key augmentation)
  };
  std::vector<Shard> shards;  // in reading order
  int64_t skip = 0;           // leading samples of the stream to pass over
  int64_t count = 0;          // samples to yield after those
  int num_classes = 0;
  size_t shuffle_buffer = 256;  // 0 or 1: no shuffle (shard order)
  uint64_t seed = 0;
  int64_t epoch = 0;
  int rank = 0;
  TarReaderOptions tar;
};

class ShardStream : public SampleStream {
 public:
  explicit ShardStream(ShardStreamOptions options);
  ~ShardStream() override;

  int64_t size() const override { return options_.count; }
  bool sequential() const override { return true; }
  absl::StatusOr<StreamSample> Read(int64_t k) override;

 private:
  struct Member {
    size_t shard = 0;  // index into options_.shards
    TarMember member;
  };

  // The next sample of the shards in order (before the shuffle buffer); false
  // when every shard is read. A malformed sample is returned as its error.
  bool NextInOrder(absl::StatusOr<StreamSample>& out);
  // The next member of the shards in order; false after the last shard.
  bool NextMember(Member& out);
  absl::StatusOr<StreamSample> Assemble(size_t shard, const std::string& key,
                                        std::vector<TarMember>& members);
  // Fills the shuffle buffer and takes one sample from it.
  absl::StatusOr<StreamSample> Take();

  const ShardStreamOptions options_;
  SampleRng rng_;
  size_t next_shard_ = 0;        // the next shard to open
  size_t sample_shard_ = 0;      // the shard of the last assembled sample
  int64_t sample_in_shard_ = 0;  // samples assembled from it so far
  std::unique_ptr<TarReader> reader_;
  std::unique_ptr<Member> lookahead_;
  std::deque<absl::StatusOr<StreamSample>> buffer_;
  absl::Status first_error_;
  int64_t skipped_ = 0;
  int64_t yielded_ = 0;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SHARD_STREAM_H_
