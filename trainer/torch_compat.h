// The one place where LibTorch 1.13 (Debian, CPU) and 2.x (the CUDA image) differ for loom.
#pragma once

#include <torch/torch.h>

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#define LOOM_TORCH2 1
#else
#define LOOM_TORCH2 0
#endif
