#include "worker/trainer/data/shard_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer::data {
namespace {

// "dir/KEY.ext.more" -> key "dir/KEY", extension "ext.more" (lower case).
std::pair<std::string, std::string> SplitKey(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), absl::AsciiStrToLower(name.substr(dot + 1))};
}

bool IsImageExtension(const std::string& ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

}  // namespace

ShardStream::ShardStream(ShardStreamOptions options)
    : options_(std::move(options)),
      rng_(options_.seed, options_.epoch, kShuffleBufferStream - options_.rank) {}

ShardStream::~ShardStream() = default;

bool ShardStream::NextMember(Member& out) {
  if (lookahead_ != nullptr) {
    out = std::move(*lookahead_);
    lookahead_.reset();
    return true;
  }
  for (;;) {
    if (reader_ == nullptr) {
      if (next_shard_ >= options_.shards.size()) return false;
      const std::string path =
          absl::StrCat(options_.root, "/", options_.shards[next_shard_].file);
      ++next_shard_;
      absl::StatusOr<std::unique_ptr<TarReader>> reader =
          TarReader::OpenFile(path, options_.tar);
      if (!reader.ok()) {
        if (first_error_.ok()) first_error_ = reader.status();
        continue;
      }
      reader_ = *std::move(reader);
    }
    absl::StatusOr<std::optional<TarMember>> member = reader_->Next();
    if (!member.ok() && first_error_.ok()) {
      first_error_ = absl::DataLossError(absl::StrCat(
          options_.shards[next_shard_ - 1].file, ": ", member.status().message()));
    }
    if (!member.ok() || !member->has_value()) {
      reader_.reset();
      continue;
    }
    out.shard = next_shard_ - 1;
    out.member = std::move(**member);
    return true;
  }
}

bool ShardStream::NextInOrder(absl::StatusOr<StreamSample>& out) {
  Member first;
  if (!NextMember(first)) return false;
  const std::string key = SplitKey(first.member.name).first;
  std::vector<TarMember> members;
  members.push_back(std::move(first.member));
  Member next;
  while (NextMember(next)) {
    if (next.shard != first.shard || SplitKey(next.member.name).first != key) {
      lookahead_ = std::make_unique<Member>(std::move(next));
      break;
    }
    members.push_back(std::move(next.member));
  }
  out = Assemble(first.shard, key, members);
  return true;
}

absl::StatusOr<StreamSample> ShardStream::Assemble(size_t shard, const std::string& key,
                                                   std::vector<TarMember>& members) {
  if (shard != sample_shard_) {
    sample_shard_ = shard;
    sample_in_shard_ = 0;
  }
  StreamSample out;
  out.id = options_.shards[shard].first_id + sample_in_shard_++;
  out.sample.name = absl::StrCat(options_.shards[shard].file, ":", key);
  bool has_image = false;
  bool has_label = false;
  for (TarMember& m : members) {
    const std::string ext = SplitKey(m.name).second;
    if (IsImageExtension(ext) && !has_image) {
      out.sample.bytes = std::move(m.data);
      has_image = true;
    } else if (ext == "cls") {
      has_label = absl::SimpleAtoi(absl::StripAsciiWhitespace(m.data), &out.sample.label);
      if (!has_label) {
        return absl::DataLossError(
            absl::StrCat(out.sample.name, ": .cls is not a number"));
      }
    }
  }
  if (!has_image || !has_label) {
    return absl::DataLossError(absl::StrCat(out.sample.name, ": sample has no ",
                                            has_image ? ".cls" : ".jpg/.jpeg/.png",
                                            " member"));
  }
  if (out.sample.label < 0 || out.sample.label >= options_.num_classes) {
    return absl::DataLossError(absl::StrCat(out.sample.name, ": class ", out.sample.label,
                                            " is not in [0, ", options_.num_classes,
                                            ")"));
  }
  return out;
}

absl::StatusOr<StreamSample> ShardStream::Take() {
  const size_t capacity = std::max<size_t>(options_.shuffle_buffer, 1);
  while (buffer_.size() < capacity) {
    absl::StatusOr<StreamSample> sample;
    if (!NextInOrder(sample)) break;
    buffer_.push_back(std::move(sample));
  }
  if (buffer_.empty()) {
    return absl::DataLossError(absl::StrCat(
        "the rank's shards ended before its ", options_.skip + options_.count, " samples",
        first_error_.ok() ? "" : absl::StrCat(": ", first_error_.message())));
  }
  if (capacity == 1) {
    absl::StatusOr<StreamSample> front = std::move(buffer_.front());
    buffer_.pop_front();
    return front;
  }
  const auto j =
      static_cast<size_t>(rng_.UniformInt(0, static_cast<int64_t>(buffer_.size()) - 1));
  absl::StatusOr<StreamSample> taken = std::move(buffer_[j]);
  if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
  buffer_.pop_back();
  return taken;
}

absl::StatusOr<StreamSample> ShardStream::Read(int64_t /*k*/) {
  while (skipped_ < options_.skip) {
    (void)Take();
    ++skipped_;
  }
  if (yielded_ >= options_.count)
    return absl::OutOfRangeError("shard stream is exhausted");
  ++yielded_;
  return Take();
}

}  // namespace tessera::trainer::data
