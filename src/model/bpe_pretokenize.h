// Pre-tokenizers for byte-level BPE: split text (as code points) into words
// the way llama.cpp's unicode_regex_split does for each tokenizer.ggml.pre.
// Each regex pass refines the pieces of the previous pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lctx {

enum class PreSplit {
    DIGITS,  // "\p{N}": every number code point alone
    GPT2,    // "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
};

// The passes for a tokenizer.ggml.pre name; throws LCTX_ERR_UNSUPPORTED for
// names it does not implement. Sets clean_spaces as llama.cpp does.
std::vector<PreSplit> pre_splits_for(const std::string &pre, bool &clean_spaces);

// Word lengths (in code points) covering cpts.
std::vector<size_t> pre_split(const std::vector<uint32_t> &cpts, const std::vector<PreSplit> &passes);

} // namespace lctx
