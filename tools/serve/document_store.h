// Documents uploaded to lctx serve: each is encoded once (feed + build_index,
// REFORM by default) by a background thread, one document at a time, with its
// progress readable meanwhile; questions then borrow a session holding the
// encoding.
//
// REFORM and ILRe encodings are saved to the data directory
// (lctx_index_save: <id>.index, with <id>.json describing it) and found again
// when the server restarts; every question gets a session of its own, loaded
// from that file unless an idle one is at hand, so questions run side by side
// and none can change what the next one reads. The other methods have no
// saved form: their one session stays in memory (lost at exit) and answers
// one question at a time (lctx_select starts each question afresh on the
// sealed document, as `lctx run --questions` does).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"

namespace lctx::serve {

struct Document {
    std::string id;
    std::string name;
    lctx_method method = LCTX_METHOD_REFORM;
    int64_t created = 0;            // Unix seconds

    // Status, guarded by mu.
    mutable std::mutex mu;
    std::string state = "queued";   // queued, encoding, ready, failed
    std::string stage = "queued";   // queued, tokenizing, encoding, indexing, saving, ready, failed
    std::string message;            // why it failed
    int64_t tokens_done = 0, tokens_total = 0;
    double encode_s = 0;

    std::atomic<bool> cancelled{false};
    std::atomic<bool> persisted{false};   // the encoding is in the data directory (set before ready)
    std::string text;               // the upload, until it is encoded

    // Sessions holding the encoding, guarded by sess_mu.
    std::mutex sess_mu;
    std::condition_variable sess_cv;
    std::vector<std::unique_ptr<SessionBox>> idle;
    int in_memory_out = 0;          // unsaved methods: 1 while their one session answers a question

    nlohmann::json to_json() const;
    bool ready() const;
};

class DocumentStore {
  public:
    DocumentStore(const Engine &engine, std::string data_dir, int max_documents);
    ~DocumentStore();

    // Registers the encodings saved in the data directory by an earlier run.
    void load_saved();
    // Queues a document for encoding; 429 when the store is full.
    std::shared_ptr<Document> add(std::string text, lctx_method method, std::string name);
    std::shared_ptr<Document> get(const std::string &id) const;   // nullptr: unknown
    bool remove(const std::string &id);
    nlohmann::json list() const;

    // A session holding the document's encoding for one question (waits for
    // an unsaved method's session while another question uses it), and its
    // return afterwards.
    std::unique_ptr<SessionBox> borrow(const std::shared_ptr<Document> &doc, const RequestControl &ctl);
    void give_back(const std::shared_ptr<Document> &doc, std::unique_ptr<SessionBox> box);

    // Stops the encoder (the running encoding is cancelled) and waits for it.
    void shutdown();

  private:
    void encoder_loop();
    void encode(const std::shared_ptr<Document> &doc);
    std::string index_path(const std::string &id) const;
    std::string meta_path(const std::string &id) const;
    void remove_files(const std::string &id) const;

    const Engine &engine_;
    std::string data_dir_;
    int max_documents_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, std::shared_ptr<Document>> docs_;
    std::deque<std::shared_ptr<Document>> queue_;
    bool stopping_ = false;
    std::thread encoder_;
};

// REFORM and ILRe encodings can be saved (lctx_index_save).
bool method_can_save(lctx_method m);

} // namespace lctx::serve
