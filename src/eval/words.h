// Word lists of the task generator (filler prose, keys, values, words to
// count, people and places of the QA documents). The lists are disjoint where
// it matters: needle values never occur in the filler prose.
#pragma once

#include <string>
#include <vector>

namespace lctx::eval::words {

const std::vector<std::string> &nouns();        // prose, needle keys, cwe
const std::vector<std::string> &adjectives();   // prose, needle keys, cwe
const std::vector<std::string> &verbs_past();   // prose (transitive, past tense), cwe
const std::vector<std::string> &adverbs();      // prose
const std::vector<std::string> &places();       // prose ("near the harbor")
const std::vector<std::string> &value_words();  // niah word values; in no other list
const std::vector<std::string> &first_names();  // qa
const std::vector<std::string> &last_names();   // qa
const std::vector<std::string> &cities();       // qa
const std::vector<std::string> &professions();  // qa
const std::vector<std::string> &instruments();  // qa
const std::vector<std::string> &org_kinds();    // qa: "Society", "Guild", ...

// Distinct real words for cwe (nouns, adjectives, verbs; duplicates removed).
const std::vector<std::string> &cwe_words();
// The i-th pronounceable pseudo-word ("bamoti"), distinct for distinct i and
// never a word of cwe_words(); used when a long cwe list needs more words.
std::string pseudo_word(size_t i);

} // namespace lctx::eval::words
