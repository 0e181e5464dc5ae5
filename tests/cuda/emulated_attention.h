// launch_attention's launches (kernels/cuda/attention_launches.h) on the
// launch emulator: the emulated device (emulated_device.cpp) and the kernel
// tests (test_cuda_kernels_emulated.cpp) both run it.
#pragma once

#include "kernels/cuda/attention_launches.h"
#include "kernels/cuda/emulate.h"

namespace lctx::cuda {

inline void emulate_attention(const AttnArgs &a) {
    for_each_attention_launch(a, [&](const LaunchDims &d, auto kernel) {
        emulate_launch(d, [&](HostCtx &c) { decltype(kernel)::template run<HostCtx>(c, a); });
    });
}

} // namespace lctx::cuda
