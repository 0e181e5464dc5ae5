"""Writes a long document with one fact hidden in it, for the examples.

usage: python3 examples/make_haystack.py OUT.txt [n_sentences] [seed]

The filler is plain English built from word lists by a fixed linear
congruential generator, so every Python version writes the same bytes. The
default (580 sentences, about 10.5K SmolLM2 tokens) is longer than the 8K
tokens SmolLM2 was trained on. The hidden sentence sits at 40% of the
document; the question about it is printed on stdout, the sentence itself on
stderr (to check the answer).
"""
import sys

PLACES = ["the harbour", "the old mill", "the library", "the market square", "the north bridge", "the orchard",
          "the train station", "the school", "the bakery", "the town hall", "the river bank", "the museum"]
PEOPLE = ["The gardener", "A fisherman", "The baker", "An old teacher", "The mayor", "A young painter",
          "The postman", "A carpenter", "The doctor", "A traveller", "The shopkeeper", "A student"]
ACTS = ["walked slowly past", "painted a picture of", "wrote a short letter about", "told a long story about",
        "sold fresh bread near", "repaired the fence behind", "took a photograph of", "sang a quiet song at",
        "planted two trees beside", "read a newspaper outside", "waited for a friend at", "cleaned the windows of"]
TIMES = ["early in the morning", "after lunch", "on a rainy afternoon", "late in the evening", "on Sunday",
         "before the storm", "in the spring", "during the festival", "at noon", "in the first week of May"]
ENDS = ["and then went home.", "while the wind was cold.", "and nobody noticed.", "as the bells rang.",
        "and smiled at the children.", "before the shops closed.", "and talked about the weather.",
        "while a dog barked far away."]

NEEDLE = "The special magic number for the blue lighthouse is 7391."
QUESTION = "What is the special magic number for the blue lighthouse?"


class Lcg:
    """Numerical Recipes' 32-bit LCG: the same numbers on every platform."""

    def __init__(self, seed: int) -> None:
        self.state = seed & 0xFFFFFFFF

    def pick(self, items: list) -> str:
        self.state = (1664525 * self.state + 1013904223) & 0xFFFFFFFF
        return items[(self.state >> 8) % len(items)]


def make(n_sentences: int = 580, seed: int = 2026) -> str:
    rng = Lcg(seed)
    sentences = [f"{rng.pick(PEOPLE)} {rng.pick(ACTS)} {rng.pick(PLACES)} {rng.pick(TIMES)} {rng.pick(ENDS)}"
                 for _ in range(n_sentences)]
    sentences.insert(int(n_sentences * 0.4), NEEDLE)
    paragraphs = [" ".join(sentences[i:i + 8]) for i in range(0, len(sentences), 8)]
    return "\n\n".join(paragraphs) + "\n"


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 580
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 2026
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write(make(n, seed))
    print(f"make_haystack: hidden: {NEEDLE}", file=sys.stderr)
    print(QUESTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
