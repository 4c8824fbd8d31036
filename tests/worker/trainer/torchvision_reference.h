// Helpers for tests that compare Tessera against torchvision run by Debian's
// /usr/bin/python3 (torch 1.13, torchvision 0.14 on bookworm; trixie's in the
// LibTorch 2.6 lane): whether it is there, the Python functions that write and
// read safetensors files (with the safetensors package where Python has it,
// else by a few lines from the documented format), and running a script whose
// output is shown when it fails.
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

// Python defining save(path, {name: tensor}) and load(path) -> {name: tensor}
// (float32), and `writer`, which names what writes the files. Put it first in
// a script.
inline constexpr char kSafetensorsPython[] = R"(import json, struct
import torch
try:
    import safetensors
    import safetensors.torch as st
    writer = "safetensors " + safetensors.__version__
except ImportError:
    st, writer = None, "the documented format, written here"

def save(path, tensors):
    if st is not None:
        st.save_file({k: v.detach().to(torch.float32).contiguous()
                      for k, v in tensors.items()}, path, metadata={"format": "pt"})
        return
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
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
