// Helpers for tests that compare Tessera against torchvision run by Debian's
// /usr/bin/python3 (torch 1.13, torchvision 0.14 on bookworm; trixie's in the
// LibTorch 2.6 lane): whether it is there, the Python functions that write and
// read safetensors files (with the safetensors package where Python has it,
// else by a few lines from the documented format), a torchvision model trained
// on a generated image folder with its own accuracy (the evaluation tests, in
// process and through tessctl eval), and running a script whose output is
// shown when it fails.
#ifndef TESSERA_TESTS_WORKER_TRAINER_TORCHVISION_REFERENCE_H_
#define TESSERA_TESTS_WORKER_TRAINER_TORCHVISION_REFERENCE_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera::trainer::torchvision_reference {

inline constexpr char kPython[] = "/usr/bin/python3";

// Python defining save(path, {name: tensor}, metadata={str: str}) and
// load(path) -> {name: tensor} (float32), and `writer`, which names what
// writes the files. Put it first in a script.
inline constexpr char kSafetensorsPython[] = R"(import json, struct
import torch
try:
    import safetensors
    import safetensors.torch as st
    writer = "safetensors " + safetensors.__version__
except ImportError:
    st, writer = None, "the documented format, written here"

def save(path, tensors, metadata=None):
    metadata = dict({"format": "pt"}, **(metadata or {}))
    if st is not None:
        st.save_file({k: v.detach().to(torch.float32).contiguous()
                      for k, v in tensors.items()}, path, metadata=metadata)
        return
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)

def load(path):
    if st is not None:
        return st.load_file(path)
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, base, out = json.loads(raw[8:8 + n]), 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info)
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[base + begin:base + end]),
                                     dtype=torch.float32).reshape(info["shape"])
    return out

)";

// A Python script (after kSafetensorsPython; arguments: the output folder
// OUT, and optionally the tint, 55 by default, that sets each class's colour
// channel apart: smaller is harder): torchvision's VisionTransformer
// (vit-micro's shape at 32 px: patch 4, 4 layers, 4 heads, width 64), trained
// a few steps on a generated image folder of 32 px PNGs
// (OUT/data/{train,val}/{ant,bee,cat}, random noise plus the tint), saved as
// OUT/model.safetensors; its top-1, loss and per-class accuracy on val/
// (ToTensor + ImageNet normalisation: the images are already at the model's
// size, so no resize or crop) go to OUT/reference.json, with ("bicubic_crop")
// the top-1 and loss of the evaluation transform with a bicubic resize
// (Resize(36, BICUBIC) + CenterCrop(32) on uint8 tensors: crop 0.875).
inline constexpr char kImageFolderScript[] = R"(import os, sys
import numpy as np
import torch.nn.functional as F
import torchvision
from PIL import Image
from torchvision import datasets, transforms
from torchvision.models.vision_transformer import VisionTransformer
out = sys.argv[1]
tint = int(sys.argv[2]) if len(sys.argv) > 2 else 55
rng = np.random.default_rng(0)
classes = ["ant", "bee", "cat"]
for split, count in (("train", 16), ("val", 20)):
    for c, name in enumerate(classes):
        folder = os.path.join(out, "data", split, name)
        os.makedirs(folder, exist_ok=True)
        for i in range(count):
            a = rng.integers(0, 200, (32, 32, 3), dtype=np.uint8)
            a[..., c] += tint
            Image.fromarray(a).save(os.path.join(folder, "%03d.png" % i))
torch.manual_seed(0)
model = VisionTransformer(image_size=32, patch_size=4, num_layers=4, num_heads=4,
                          hidden_dim=64, mlp_dim=128, num_classes=3)
tf = transforms.Compose([transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406],
                                              [0.229, 0.224, 0.225])])
train = torch.utils.data.DataLoader(datasets.ImageFolder(out + "/data/train", tf),
                                    batch_size=16, shuffle=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()
for _ in range(4):
    for x, y in train:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
model.eval()
save(out + "/model.safetensors", model.state_dict())
val = torch.utils.data.DataLoader(datasets.ImageFolder(out + "/data/val", tf),
                                  batch_size=16)
correct, loss, n, hits = 0, 0.0, 0, [0, 0, 0]
with torch.no_grad():
    for x, y in val:
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        right = logits.argmax(1) == y
        correct += right.sum().item()
        for label, ok in zip(y.tolist(), right.tolist()):
            hits[label] += ok
        n += len(y)
# The evaluation transform with a bicubic resize, on uint8 tensors as
# torchvision resizes them (no antialiasing): Resize(32 / 0.875) + CenterCrop.
bicubic = transforms.Compose([
    transforms.PILToTensor(),
    transforms.Resize(36, interpolation=transforms.InterpolationMode.BICUBIC),
    transforms.CenterCrop(32), transforms.ConvertImageDtype(torch.float),
    transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
resized = torch.utils.data.DataLoader(datasets.ImageFolder(out + "/data/val", bicubic),
                                      batch_size=16)
bicubic_correct, bicubic_loss = 0, 0.0
with torch.no_grad():
    for x, y in resized:
        logits = model(x)
        bicubic_loss += F.cross_entropy(logits, y, reduction="sum").item()
        bicubic_correct += (logits.argmax(1) == y).sum().item()
with open(out + "/reference.json", "w") as f:
    json.dump({"top1": correct / n, "loss": loss / n, "samples": n,
               "class_accuracy": [h / 20 for h in hits],
               "bicubic_crop": {"top1": bicubic_correct / n, "loss": bicubic_loss / n}},
              f)
print("torchvision %s: top1 %.4f loss %.4f" % (torchvision.__version__, correct / n,
                                               loss / n))
)";

// Whether /usr/bin/python3 has torch and torchvision (found, not imported: an
// import costs seconds; a broken install fails the script with its error).
inline bool HaveTorchvision() {
  static const bool have =
      ::access(kPython, X_OK) == 0 &&
      std::system(absl::StrCat(kPython,
                               " -c 'import importlib.util as u, sys; sys.exit(0 if "
                               "u.find_spec(\"torch\") and u.find_spec(\"torchvision\") "
                               "else 1)' >/dev/null 2>&1")
                      .c_str()) == 0;
  return have;
}

// Writes `script` to dir/name (once) and runs it with `args`; its output goes
// to dir/python.log, shown on failure.
inline ::testing::AssertionResult RunPythonScript(const std::string& dir,
                                                  const std::string& name,
                                                  const std::string& script,
                                                  const std::string& args) {
  const std::string path = dir + "/" + name;
  if (!std::filesystem::exists(path)) std::ofstream(path) << script;
  const std::string log = dir + "/python.log";
  const int rc = std::system(
      absl::StrCat(kPython, " ", path, " ", args, " >", log, " 2>&1").c_str());
  if (rc == 0) return ::testing::AssertionSuccess();
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  return ::testing::AssertionFailure()
         << "python " << path << " " << args << " failed (" << rc << "):\n"
         << text;
}

}  // namespace tessera::trainer::torchvision_reference

#endif  // TESSERA_TESTS_WORKER_TRAINER_TORCHVISION_REFERENCE_H_
