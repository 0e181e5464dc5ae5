// Chat template detection and error paths. Rendering is compared with
// jinja2 on the real templates in tests/reference/test_chat_template_jinja.py.
#include <gtest/gtest.h>

#include "common/error.h"
#include "model/chat_template.h"

using namespace lctx;

TEST(ChatTemplate, Detect) {
    EXPECT_EQ(detect_chat_format("{{'<|im_start|>' + message['role']}}"), ChatFormat::CHATML);
    EXPECT_EQ(detect_chat_format("{{ '<start_of_turn>' + role }}"), ChatFormat::GEMMA);
    EXPECT_EQ(detect_chat_format("[INST] {{ message }} [/INST]"), ChatFormat::UNKNOWN);
    EXPECT_EQ(detect_chat_format(""), ChatFormat::UNKNOWN);
}

TEST(ChatTemplate, UnknownFormatIsUnsupported) {
    try {
        apply_chat(ChatFormat::UNKNOWN, "", {{"user", "hi"}}, true);
        FAIL() << "no exception";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_UNSUPPORTED);
    }
}

TEST(ChatTemplate, ChatmlDefaultSystemOnlyFromALiteral) {
    // A template whose system turn comes from the messages has no default.
    const std::string from_msgs = "{{'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n'}}";
    EXPECT_EQ(apply_chat(ChatFormat::CHATML, from_msgs, {{"user", "hi"}}, false), "<|im_start|>user\nhi<|im_end|>\n");
    const std::string literal = "{{ '<|im_start|>system\\nBe \\'brief\\'.<|im_end|>\\n' }}<|im_start|>";
    EXPECT_EQ(apply_chat(ChatFormat::CHATML, literal, {{"user", "hi"}}, true),
              "<|im_start|>system\nBe 'brief'.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}
