// Precompiled for every trainer translation unit (see CMakeLists.txt): LibTorch's headers.
#pragma once
#include <torch/torch.h>
