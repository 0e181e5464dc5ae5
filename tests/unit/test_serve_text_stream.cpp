// lctx serve's TextStream (tools/serve/text_stream.h): what is sent while an
// answer is generated piece by piece, with stop sequences and UTF-8
// characters split across pieces. Expected texts are written out by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/text_stream.h"

using lctx::serve::TextStream;
using lctx::serve::utf8_incomplete_tail;

namespace {

// Pushes every piece; returns what was sent, piece by piece, then the rest.
std::vector<std::string> feed(TextStream &t, const std::vector<std::string> &pieces) {
    std::vector<std::string> out;
    for (const auto &p : pieces) out.push_back(t.push(p));
    out.push_back(t.finish());
    return out;
}

} // namespace

TEST(ServeTextStream, NoStopsSendsEachPieceAtOnce) {
    TextStream t({});
    EXPECT_EQ(feed(t, {"The", " capital", " is"}), (std::vector<std::string>{"The", " capital", " is", ""}));
    EXPECT_FALSE(t.stopped());
    EXPECT_EQ(t.text(), "The capital is");
}

TEST(ServeTextStream, StopInsideOnePieceCutsBeforeIt) {
    TextStream t({"Paris"});
    EXPECT_EQ(feed(t, {"It is", " Paris, France", " more"}), (std::vector<std::string>{"It is", " ", "", ""}));
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(t.text(), "It is ");
}

TEST(ServeTextStream, StopAcrossPiecesIsHeldBackThenCut) {
    TextStream t({"o w"});
    // "Hello" ends with "o", which may begin "o w": held back until " wor" decides.
    EXPECT_EQ(feed(t, {"Hel", "lo", " wor", "ld"}), (std::vector<std::string>{"Hel", "l", "", "", ""}));
    EXPECT_EQ(t.text(), "Hell");
}

TEST(ServeTextStream, HeldBackTextIsSentWhenNoStopFollows) {
    TextStream t({"END", "xyz"});
    EXPECT_EQ(feed(t, {"a E", "N", "d"}), (std::vector<std::string>{"a ", "", "ENd", ""}));
    TextStream u({"END"});
    EXPECT_EQ(feed(u, {"a EN"}), (std::vector<std::string>{"a ", "EN"}));   // the end of the answer sends it
    EXPECT_FALSE(u.stopped());
}

TEST(ServeTextStream, EarliestOfSeveralStopsWins) {
    TextStream t({"cd", "b"});
    EXPECT_EQ(feed(t, {"abcd"}), (std::vector<std::string>{"a", ""}));
}

TEST(ServeTextStream, SplitUtf8CharacterWaitsForItsLastByte) {
    TextStream t({});
    // "é" is C3 A9, "€" is E2 82 AC: a token may end in the middle of either.
    EXPECT_EQ(feed(t, {"caf\xC3", "\xA9 ", "\xE2\x82", "\xAC"}),
              (std::vector<std::string>{"caf", "\xC3\xA9 ", "", "\xE2\x82\xAC", ""}));
}

TEST(ServeTextStream, Utf8IncompleteTail) {
    EXPECT_EQ(utf8_incomplete_tail(""), 0u);
    EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xC3\xA9"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);        // 4-byte emoji, 3 bytes so far
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x80"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\x80\x80\x80\x80\x80"), 0u);   // no lead byte: sent as it is
}
