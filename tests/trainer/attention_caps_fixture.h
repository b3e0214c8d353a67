// Made-up CUDA devices for the attention rule's tests, written out by hand so that they run without
// one: a Hopper card with every kernel, an Ampere card, and a Hopper build without cuDNN attention.
#pragma once

#include "attention_select.h"

namespace loom::test {

struct MadeUpDevices {
  AttentionCaps hopper, ampere, no_cudnn;
  MadeUpDevices() {
    hopper.cuda = hopper.hopper = hopper.flash = hopper.cudnn = true;
    ampere = hopper;
    ampere.hopper = false;
    no_cudnn = hopper;
    no_cudnn.cudnn = false;
    no_cudnn.why_no_cudnn = "this build has no cuDNN attention";
  }
};

}  // namespace loom::test
