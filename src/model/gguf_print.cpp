#include "model/gguf_print.h"

#include <string>

#include "model/gguf_types.h"

namespace lctx {

namespace {

std::string shape_string(const GgufTensorInfo &t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        if (d) s += ", ";
        s += std::to_string(t.ne[d]);
    }
    return s + "]";
}

} // namespace

void print_gguf_summary(const GgufFile &file, FILE *out) {
    std::fprintf(out, "GGUF version %u, %zu bytes, alignment %zu, %s\n", file.version(), file.file_size(),
                 file.alignment(), file.is_mmapped() ? "memory mapped" : "in memory");

    const auto &kvs = file.metadata();
    size_t key_width = 3;
    for (const GgufKV &kv : kvs) key_width = kv.key.size() > key_width ? kv.key.size() : key_width;
    std::fprintf(out, "\nmetadata: %zu keys\n", kvs.size());
    for (const GgufKV &kv : kvs)
        std::fprintf(out, "  %-*s  %-14s  %s\n", static_cast<int>(key_width), kv.key.c_str(),
                     gguf_type_name(kv.value).c_str(), kv.value.to_string(8).c_str());

    const auto &tensors = file.tensors();
    size_t name_width = 4;
    for (const GgufTensorInfo &t : tensors) name_width = t.name.size() > name_width ? t.name.size() : name_width;
    std::fprintf(out, "\ntensors: %zu\n", tensors.size());
    std::fprintf(out, "  %5s  %-*s  %-5s  %-24s  %12s  %12s\n", "#", static_cast<int>(name_width), "name", "type",
                 "shape", "offset", "bytes");
    unsigned long long total_bytes = 0, total_elements = 0;
    for (size_t k = 0; k < tensors.size(); ++k) {
        const GgufTensorInfo &t = tensors[k];
        std::fprintf(out, "  %5zu  %-*s  %-5s  %-24s  %12llu  %12zu\n", k, static_cast<int>(name_width), t.name.c_str(),
                     ggml_type_name(t.type), shape_string(t).c_str(), static_cast<unsigned long long>(t.offset), t.nbytes);
        total_bytes += t.nbytes;
        total_elements += static_cast<unsigned long long>(t.n_elements());
    }
    std::fprintf(out, "\ntotal: %zu tensors, %llu elements, %llu bytes of tensor data (%.2f MiB)\n", tensors.size(),
                 total_elements, total_bytes, static_cast<double>(total_bytes) / (1024.0 * 1024.0));
}

} // namespace lctx
