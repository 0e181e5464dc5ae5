#include "eval/words.h"

#include <set>
#include <sstream>

namespace lctx::eval::words {

namespace {

std::vector<std::string> split(const char *s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

} // namespace

const std::vector<std::string> &nouns() {
    static const auto v = split(
        "river mountain garden window teacher village forest letter bridge market kitchen island "
        "painter candle harbor meadow castle lantern journey blanket basket engine mirror pocket "
        "ladder garage violin hammer pencil ribbon saddle tunnel valley wagon anchor barrel cabinet "
        "chimney cottage desert feather fence fountain glacier helmet jacket kettle ledger lighthouse "
        "magnet notebook orchard parcel pillow puzzle quarry rooftop sailor scarf shelter shovel "
        "signal spoon stable statue stone storm summit table tower trumpet umbrella vessel wheel "
        "whistle workshop yard attic balcony bakery beacon bench bottle boulder cable canal carpet "
        "cellar chapel clock cloud compass corner courtyard crown curtain dock drawer engineer "
        "farmer ferry field flag friend gardener gate guard hallway highway hill inn keeper kingdom "
        "lake lamp library map merchant mill miner monk neighbor ocean office path pilot planet "
        "pond porch printer quilt rail rider road sculptor shepherd shore singer soldier station "
        "stranger street student tailor tent theater traveler tree trunk village warden weaver well "
        "widow wind winter wizard writer");
    return v;
}

const std::vector<std::string> &adjectives() {
    static const auto v = split(
        "quiet bright ancient gentle narrow crooked golden hollow humble polished rusty silent "
        "sleepy sturdy tidy wooden clever curious distant eager faded fragile frozen generous "
        "graceful hidden honest lively lonely loyal modest muddy noble patient plain proud rapid "
        "restless rough shallow sharp shiny simple slender smooth soft steady strange swift tall "
        "tender thin tired warm weary wide wild wise worn young brave calm careful cheerful "
        "cloudy cold cozy damp dark dusty early empty fancy fierce flat fresh friendly grand "
        "green grey heavy high jolly kind late little long loud lucky misty narrow neat odd old "
        "pale peaceful pleasant polite purple quick rare ready red round royal rural shy sandy "
        "scarlet secret short sour spare stern stormy sunny sweet thick tiny velvet vivid");
    return v;
}

const std::vector<std::string> &verbs_past() {
    static const auto v = split(
        "carried painted visited repaired followed watched cleaned opened closed borrowed "
        "delivered described discovered examined finished gathered greeted guarded measured "
        "mended noticed ordered packed planted polished pulled pushed questioned recorded "
        "remembered rescued returned sketched studied tested traded treated trusted wrapped "
        "admired answered built caught chose found kept left lifted moved passed praised "
        "raised reached sold showed steered touched washed weighed welcomed wound");
    return v;
}

const std::vector<std::string> &adverbs() {
    static const auto v = split(
        "slowly quietly carefully happily eagerly gently rarely often bravely calmly kindly "
        "patiently quickly softly boldly briskly gladly neatly openly politely proudly "
        "silently steadily warmly wisely loudly lazily nearly barely suddenly");
    return v;
}

const std::vector<std::string> &places() {
    static const auto v = split(
        "harbor meadow station market bridge orchard chapel courtyard library bakery river "
        "forest hillside village square lighthouse quarry workshop theater");
    return v;
}

const std::vector<std::string> &value_words() {
    static const auto v = split(
        "tangerine porcupine sapphire chameleon pomegranate flamingo turquoise armadillo "
        "marmalade kangaroo obsidian pelican saxophone tarantula avocado dolphin emerald "
        "gazelle hyacinth iguana jasmine koala lavender mongoose nectarine octopus papaya "
        "quokka raspberry salamander tortoise vanilla walrus xylophone zucchini apricot "
        "buffalo cinnamon dragonfly eucalyptus giraffe hedgehog jellyfish kiwifruit lobster "
        "mandarin narwhal ostrich panther rhubarb scorpion toucan wombat");
    return v;
}

const std::vector<std::string> &first_names() {
    static const auto v = split(
        "Marta Oskar Helena Tobias Ingrid Felix Clara Anton Lucia Viktor Nora Emil Sofia Jonas "
        "Elena Matteo Greta Paulo Irene Lukas Amara Dmitri Freya Hugo Lena Rafael Selma Theo "
        "Vera Bruno Alma Casimir Dalia Edgar Fiona Gustav Hanna Ivo Julia Kasper");
    return v;
}

const std::vector<std::string> &last_names() {
    static const auto v = split(
        "Kovac Lindqvist Moreau Albescu Brandt Castellano Dvorak Eriksen Fontaine Gallagher "
        "Halvorsen Ivanova Jansen Kowalski Laurent Mendes Novak Okafor Petrov Quinlan Rossi "
        "Sandoval Takahashi Ulrich Varga Whitmore Yilmaz Zeller Almeida Bergstrom Cardoso "
        "Duarte Esposito Fischer Granger Horvat Ibarra Jovanovic Keller Lombardi");
    return v;
}

const std::vector<std::string> &cities() {
    static const auto v = split(
        "Lisbon Bergen Tallinn Porto Krakow Ghent Lyon Trieste Valencia Zagreb Salzburg Aarhus "
        "Bilbao Turin Gdansk Utrecht Seville Graz Bruges Naples Riga Vilnius Malaga Bologna Dresden "
        "Leipzig Toulouse Cork Galway Innsbruck Basel Lucerne Tampere Uppsala Odense Brno Ljubljana "
        "Split Plovdiv Cluj");
    return v;
}

const std::vector<std::string> &professions() {
    static const auto v = split(
        "architect cartographer pharmacist geologist botanist violinist journalist surgeon "
        "astronomer librarian shipbuilder translator watchmaker veterinarian chemist economist "
        "photographer glassblower mathematician archaeologist bookbinder meteorologist "
        "locksmith choreographer historian");
    return v;
}

const std::vector<std::string> &instruments() {
    static const auto v = split(
        "cello oboe harp clarinet bassoon accordion mandolin harpsichord bagpipes banjo "
        "trombone flute viola ukulele zither piccolo");
    return v;
}

const std::vector<std::string> &org_kinds() {
    static const auto v = split("Society Guild Foundation Institute Circle League Academy Association");
    return v;
}

const std::vector<std::string> &cwe_words() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> out;
        std::set<std::string> seen;
        for (const auto *list : {&nouns(), &adjectives(), &verbs_past()})
            for (const auto &w : *list)
                if (seen.insert(w).second) out.push_back(w);
        return out;
    }();
    return v;
}

std::string pseudo_word(size_t i) {
    // Three or four consonant-vowel syllables written in mixed radix: distinct
    // for distinct i. A trailing 'x' makes them unlike any real word listed.
    static const char *cons = "bdfgklmnprstvz";   // 14
    static const char *vows = "aeiou";            // 5
    std::string w;
    size_t n = i + 70 * 70;                       // at least three syllables
    while (n > 0) {
        const size_t syl = n % 70;
        w += cons[syl / 5];
        w += vows[syl % 5];
        n /= 70;
    }
    return w + "x";
}

} // namespace lctx::eval::words
