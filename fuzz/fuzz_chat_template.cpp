// Chat template detection and formatting: the template text and the
// messages come from the input (a GGUF's tokenizer.chat_template is user data).
#include "model/chat_template.h"
#include "common/error.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Bytes in{data, size};
    const bool add_assistant = in.u8() & 1;
    const std::string tmpl = in.str(255);
    std::vector<lctx::ChatMessage> msgs;
    while (!in.empty() && msgs.size() < 8) msgs.push_back({in.str(16), in.str(64)});
    try {
        const lctx::ChatFormat f = lctx::detect_chat_format(tmpl);
        const std::string out = lctx::apply_chat(f, tmpl, msgs, add_assistant);
        // Every message's content is in the output, in order.
        size_t at = 0;
        // Gemma folds a leading system message into the first turn after it:
        // alone, it renders nothing (as the Jinja template does).
        const bool lone_gemma_system = f == lctx::ChatFormat::GEMMA && msgs.size() == 1 && msgs[0].role == "system";
        for (const auto &m : lone_gemma_system ? std::vector<lctx::ChatMessage>{} : msgs) {
            // Gemma's template trims each message (`| trim`), and so does lctx.
            std::string c = m.content;
            if (f == lctx::ChatFormat::GEMMA) {
                const char *ws = " \t\n\r\v\f";
                const size_t b = c.find_first_not_of(ws);
                c = b == std::string::npos ? "" : c.substr(b, c.find_last_not_of(ws) - b + 1);
            }
            const size_t p = out.find(c, at);
            if (p == std::string::npos) {
                std::fprintf(stderr, "fuzz_chat_template: the content of a '%s' message is missing from the output "
                             "(format %d):\n---\n%s\n---\n", m.role.c_str(), int(f), out.c_str());
                std::abort();
            }
            at = p + c.size();
        }
    } catch (const lctx::Error &e) {
        if (e.status() == LCTX_ERR_INTERNAL) std::abort();
    }
    // And through the C API with the micro model's ChatML template.
    std::vector<lctx_chat_message> cm;
    for (const auto &m : msgs) cm.push_back({m.role.c_str(), m.content.c_str()});
    char buf[64];
    size_t need = 0;
    lctx_status st = fuzz::check(lctx_chat_apply(fuzz::micro_model(), cm.data(), cm.size(), add_assistant, buf,
                                                 sizeof buf, &need), "lctx_chat_apply");
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        std::string big(need + 1, '\0');
        if (fuzz::check(lctx_chat_apply(fuzz::micro_model(), cm.data(), cm.size(), add_assistant, big.data(),
                                        big.size(), &need), "lctx_chat_apply") != LCTX_OK)
            std::abort();
    }
    return 0;
}
