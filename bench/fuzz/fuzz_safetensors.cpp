// libFuzzer harness for the safetensors reader: the input is written to a file (the reader maps
// files) and opened; it must be refused with a tessel::Error or every tensor it lists must convert.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tessel/ckpt/safetensors.h"
#include "tessel/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tessel_fuzz_safetensors_" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    tessel::SafetensorsReader reader(path);
    for (const tessel::SafetensorsTensor& t : reader.tensors()) {
      if (!tessel::safetensors_dtype_is_float(t.dtype) || t.numel() > (int64_t{1} << 24)) continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      try {
        reader.read(t.name, out.data());
      } catch (const tessel::Error&) {
      }
    }
  } catch (const tessel::Error&) {
  }
  return 0;
}
