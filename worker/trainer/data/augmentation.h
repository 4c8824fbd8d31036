// Training-time image augmentation on raw 8-bit images: a random crop of the
// image's own size from a copy zero-padded on every side (4 px is the usual CIFAR
// recipe), then a horizontal flip with probability 1/2, as torchvision's
// RandomCrop(size, padding) followed by RandomHorizontalFlip.
//
// Reproducibility: the transform of an image is a pure function of (seed, epoch,
// dataset index), drawn from the data's one seeded generator (sample_rng.h). Nothing else
// feeds it (no generator state, no rank, world size, batch position or worker thread), so
// a run resumed at any epoch and step reproduces the augmentation of an uninterrupted run
// exactly, given only the epoch; and the same sample is augmented alike whichever rank
// draws it. Pure functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_AUGMENTATION_H_
#define TESSERA_WORKER_TRAINER_DATA_AUGMENTATION_H_

#include <cstdint>

namespace tessera::trainer {

struct AugmentationOptions {
  // Pixels of zero padding on each side before the random crop; 0: no crop.
  int crop_padding = 4;
  // Mirror left-right with probability 1/2.
  bool horizontal_flip = true;
};

// One image's draw: the crop window's offset from the unshifted position, in
// [-crop_padding, crop_padding] on each axis, and whether to mirror.
struct ImageTransform {
  int shift_y = 0;
  int shift_x = 0;
  bool flip = false;

  bool operator==(const ImageTransform&) const = default;
};

// The transform of dataset image `index` in `epoch` under `seed`.
ImageTransform DrawImageTransform(const AugmentationOptions& options, uint64_t seed,
                                  int64_t epoch, int64_t index);

// Writes `transform` applied to the CHW image `in` into `out` (same shape, not
// aliasing `in`): out[c][y][x] = in[c][y + shift_y][x0 + shift_x] with
// x0 = width - 1 - x when flipped (x otherwise), and 0 where that falls outside
// the image (the padding).
void ApplyImageTransform(const ImageTransform& transform, int channels, int height,
                         int width, const uint8_t* in, uint8_t* out);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_AUGMENTATION_H_
