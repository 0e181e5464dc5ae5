#include "serve/document_store.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

namespace lctx::serve {

using nlohmann::json;

bool method_can_save(lctx_method m) { return m == LCTX_METHOD_REFORM || m == LCTX_METHOD_ILRE; }

namespace {

std::string new_id() {
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard<std::mutex> lock(mu);
    char b[32];
    std::snprintf(b, sizeof b, "doc-%016llx", static_cast<unsigned long long>(rng()));
    return b;
}

bool valid_id(const std::string &id) {
    if (id.size() != 20 || id.compare(0, 4, "doc-") != 0) return false;
    for (size_t i = 4; i < id.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(id[i]))) return false;
    return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Writes a small file whole or not at all: a temporary beside it, then rename.
bool write_file_atomic(const std::string &path, const std::string &text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return false;
        f << text;
        f.flush();
        if (!f) return false;
    }
    return std::rename(tmp.c_str(), path.c_str()) == 0;
}

} // namespace

json Document::to_json() const {
    std::lock_guard<std::mutex> lock(mu);
    json j = {{"id", id},
              {"object", "document"},
              {"name", name},
              {"method", lctx_method_name(method) ? lctx_method_name(method) : "unknown"},
              {"created", created},
              {"state", state},
              {"stage", stage},
              {"tokens_done", tokens_done},
              {"tokens_total", tokens_total},
              {"progress", tokens_total > 0 ? double(tokens_done) / double(tokens_total) : (state == "ready" ? 1.0 : 0.0)},
              {"encode_seconds", encode_s},
              {"persisted", persisted.load()}};
    if (!message.empty()) j["message"] = message;
    return j;
}

bool Document::ready() const {
    std::lock_guard<std::mutex> lock(mu);
    return state == "ready";
}

DocumentStore::DocumentStore(const Engine &engine, std::string data_dir, int max_documents)
    : engine_(engine), data_dir_(std::move(data_dir)), max_documents_(max_documents) {
    encoder_ = std::thread([this] { encoder_loop(); });
}

DocumentStore::~DocumentStore() { shutdown(); }

std::string DocumentStore::index_path(const std::string &id) const { return data_dir_ + "/" + id + ".index"; }
std::string DocumentStore::meta_path(const std::string &id) const { return data_dir_ + "/" + id + ".json"; }

void DocumentStore::remove_files(const std::string &id) const {
    std::remove(index_path(id).c_str());
    std::remove(meta_path(id).c_str());
}

void DocumentStore::load_saved() {
    DIR *d = opendir(data_dir_.c_str());
    if (!d) return;
    std::vector<std::string> names;
    while (dirent *e = readdir(d)) names.emplace_back(e->d_name);
    closedir(d);
    for (const auto &n : names) {
        if (n.size() != 25 || n.compare(20, 5, ".json") != 0 || !valid_id(n.substr(0, 20))) continue;
        const std::string id = n.substr(0, 20);
        std::ifstream f(meta_path(id));
        std::stringstream ss;
        ss << f.rdbuf();
        json m = json::parse(ss.str(), nullptr, false);
        lctx_method method;
        if (m.is_discarded() || !m.is_object() || !m.contains("method") || !m["method"].is_string() ||
            lctx_method_from_name(m["method"].get<std::string>().c_str(), &method) != LCTX_OK ||
            !method_can_save(method) || access(index_path(id).c_str(), R_OK) != 0) {
            std::fprintf(stderr, "lctx serve: skipping %s/%s (not a document this server saved whole)\n",
                         data_dir_.c_str(), n.c_str());
            continue;
        }
        auto doc = std::make_shared<Document>();
        doc->id = id;
        doc->method = method;
        try {   // fields of the wrong type (a file edited by hand) throw
            doc->name = m.value("name", "");
            doc->created = m.value("created", int64_t(0));
            doc->tokens_total = doc->tokens_done = m.value("tokens_total", int64_t(0));
            doc->encode_s = m.value("encode_seconds", 0.0);
        } catch (const json::exception &e) {
            std::fprintf(stderr, "lctx serve: skipping %s/%s (%s)\n", data_dir_.c_str(), n.c_str(), e.what());
            continue;
        }
        doc->state = doc->stage = "ready";
        doc->persisted = true;
        std::lock_guard<std::mutex> lock(mu_);
        docs_[id] = doc;
    }
}

std::shared_ptr<Document> DocumentStore::add(std::string text, lctx_method method, std::string name) {
    auto doc = std::make_shared<Document>();
    doc->id = new_id();
    doc->name = std::move(name);
    doc->method = method;
    doc->created = static_cast<int64_t>(std::time(nullptr));
    doc->text = std::move(text);
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) throw ApiError(503, "server_error", "the server is shutting down", "shutting_down");
        if (int(docs_.size()) >= max_documents_)
            throw ApiError(429, "rate_limit_error",
                           "the server holds " + std::to_string(docs_.size()) +
                               " documents, its --max-documents: delete one first",
                           "too_many_documents");
        docs_[doc->id] = doc;
        queue_.push_back(doc);
    }
    cv_.notify_all();
    return doc;
}

std::shared_ptr<Document> DocumentStore::get(const std::string &id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = docs_.find(id);
    return it == docs_.end() ? nullptr : it->second;
}

bool DocumentStore::remove(const std::string &id) {
    std::shared_ptr<Document> doc;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = docs_.find(id);
        if (it == docs_.end()) return false;
        doc = it->second;
        docs_.erase(it);
        for (auto q = queue_.begin(); q != queue_.end(); ++q)
            if (*q == doc) {
                queue_.erase(q);
                break;
            }
    }
    // Cancelled first: an encoding that saves after this sees it and removes its files itself.
    doc->cancelled = true;
    if (method_can_save(doc->method)) remove_files(id);
    std::lock_guard<std::mutex> lock(doc->sess_mu);
    doc->idle.clear();   // a session out answering a question is freed when it comes back
    return true;
}

json DocumentStore::list() const {
    std::vector<std::shared_ptr<Document>> all;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto &kv : docs_) all.push_back(kv.second);
    }
    json data = json::array();
    for (const auto &d : all) data.push_back(d->to_json());
    return {{"object", "list"}, {"data", data}};
}

std::unique_ptr<SessionBox> DocumentStore::borrow(const std::shared_ptr<Document> &doc, const RequestControl &ctl) {
    std::unique_lock<std::mutex> lock(doc->sess_mu);
    if (doc->persisted) {
        if (!doc->idle.empty()) {
            auto box = std::move(doc->idle.back());
            doc->idle.pop_back();
            return box;
        }
        lock.unlock();
        auto box = std::make_unique<SessionBox>();
        lctx_session_params sp = engine_.session_params(doc->method, *box);
        const lctx_status st = lctx_session_load_index(engine_.model(), index_path(doc->id).c_str(), &sp, &box->session);
        if (st != LCTX_OK) {
            if (doc->cancelled) throw ApiError(404, "invalid_request_error", "document " + doc->id + " was deleted",
                                               "document_not_found", "document_id");
            throw lctx_error(st, "loading the encoding of " + doc->id, lctx_last_error());
        }
        return box;
    }
    // One in-memory session: one question at a time.
    while (doc->in_memory_out || doc->idle.empty()) {
        if (doc->cancelled) throw ApiError(404, "invalid_request_error", "document " + doc->id + " was deleted",
                                           "document_not_found", "document_id");
        if (ctl.reason() != StopReason::NONE) throw ctl.error();
        doc->sess_cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    doc->in_memory_out = 1;
    auto box = std::move(doc->idle.back());
    doc->idle.pop_back();
    return box;
}

void DocumentStore::give_back(const std::shared_ptr<Document> &doc, std::unique_ptr<SessionBox> box) {
    {
        std::lock_guard<std::mutex> lock(doc->sess_mu);
        if (!doc->persisted) doc->in_memory_out = 0;
        // One idle session is kept per document (its memory stays taken); more are freed.
        if (!doc->cancelled && box && doc->idle.empty()) doc->idle.push_back(std::move(box));
    }
    doc->sess_cv.notify_all();
}

void DocumentStore::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_ && !encoder_.joinable()) return;
        stopping_ = true;
        // Every document not encoded yet, the one the encoder has just taken
        // from the queue included (neither queued nor marked encoding yet).
        for (auto &kv : docs_) {
            std::lock_guard<std::mutex> dl(kv.second->mu);
            if (kv.second->state != "ready" && kv.second->state != "failed") kv.second->cancelled = true;
        }
    }
    cv_.notify_all();
    if (encoder_.joinable()) encoder_.join();
}

void DocumentStore::encoder_loop() {
    for (;;) {
        std::shared_ptr<Document> doc;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (stopping_) return;
            doc = queue_.front();
            queue_.pop_front();
        }
        encode(doc);
    }
}

void DocumentStore::encode(const std::shared_ptr<Document> &doc) {
    if (doc->cancelled) return;   // deleted (or the server stopped) while it waited
    auto set = [&](const char *state, const char *stage) {
        std::lock_guard<std::mutex> lock(doc->mu);
        doc->state = state;
        doc->stage = stage;
    };
    auto fail = [&](const std::string &msg) {
        std::lock_guard<std::mutex> lock(doc->mu);
        doc->state = doc->stage = "failed";
        doc->message = msg;
        std::fprintf(stderr, "lctx serve: document %s failed: %s\n", doc->id.c_str(), msg.c_str());
    };
    const auto t0 = std::chrono::steady_clock::now();
    try {
        set("encoding", "tokenizing");
        // The document is read as the start of the first user message (the
        // template's text before it included); questions continue that message.
        std::string before, after;
        engine_.document_parts({{"user", ""}}, before, after);
        std::vector<lctx_token> tokens = engine_.tokenize(before, false, true);
        {
            const std::vector<lctx_token> body = engine_.tokenize(doc->text, false, false);
            tokens.insert(tokens.end(), body.begin(), body.end());
        }
        std::string().swap(doc->text);
        {
            std::lock_guard<std::mutex> lock(doc->mu);
            doc->tokens_total = static_cast<int64_t>(tokens.size());
            doc->stage = "encoding";
        }
        auto box = std::make_unique<SessionBox>();
        lctx_session_params sp = engine_.session_params(doc->method, *box);
        // Whole-document methods keep the document and the longest answer in one cache.
        if (doc->method == LCTX_METHOD_FULL || doc->method == LCTX_METHOD_REFRESHKV) {
            const int64_t need = int64_t(tokens.size()) + engine_.n_ctx_train();
            sp.n_ctx = need > INT32_MAX ? INT32_MAX : int32_t(need);
        }
        lctx_status st = lctx_session_create(engine_.model(), &sp, &box->session);
        if (st != LCTX_OK) throw lctx_error(st, "creating the session", lctx_last_error());
        size_t at = 0, n = 0;
        box->on_progress = [&](float done) {
            std::lock_guard<std::mutex> lock(doc->mu);
            if (doc->stage == "encoding") doc->tokens_done = int64_t(at) + int64_t(double(done) * double(n));
            return doc->cancelled.load();
        };
        const size_t step = size_t(std::max(512, engine_.n_ctx_train() / 4));
        for (at = 0; at < tokens.size(); at += step) {
            n = std::min(step, tokens.size() - at);
            st = lctx_feed_chunk(box->session, tokens.data() + at, n);
            if (st == LCTX_ERR_CANCELLED) throw std::runtime_error("cancelled");
            if (st != LCTX_OK) throw lctx_error(st, "encoding", lctx_session_last_error(box->session));
        }
        {
            std::lock_guard<std::mutex> lock(doc->mu);
            doc->tokens_done = doc->tokens_total;
            doc->stage = "indexing";
        }
        st = lctx_build_index(box->session);
        if (st == LCTX_ERR_CANCELLED) throw std::runtime_error("cancelled");
        if (st != LCTX_OK) throw lctx_error(st, "build_index", lctx_session_last_error(box->session));
        box->on_progress = nullptr;
        const double encode_s = seconds_since(t0);
        bool saved = false;
        if (method_can_save(doc->method)) {
            set("encoding", "saving");
            st = lctx_index_save(box->session, index_path(doc->id).c_str());
            if (st != LCTX_OK) throw lctx_error(st, "saving the encoding", lctx_session_last_error(box->session));
            const json meta = {{"id", doc->id},
                               {"name", doc->name},
                               {"method", lctx_method_name(doc->method)},
                               {"created", doc->created},
                               {"tokens_total", int64_t(tokens.size())},
                               {"encode_seconds", encode_s}};
            if (!write_file_atomic(meta_path(doc->id), meta.dump(2, ' ', false, json::error_handler_t::replace)))
                throw ApiError(500, "server_error", "cannot write " + meta_path(doc->id));
            saved = true;
            if (doc->cancelled) {   // deleted while saving
                remove_files(doc->id);
                return;
            }
        }
        doc->persisted = saved;
        {
            std::lock_guard<std::mutex> sl(doc->sess_mu);
            doc->idle.push_back(std::move(box));
        }
        {
            std::lock_guard<std::mutex> lock(doc->mu);
            doc->encode_s = encode_s;
            doc->state = doc->stage = "ready";
        }
        doc->sess_cv.notify_all();
        std::fprintf(stderr, "lctx serve: document %s ready (%s, %lld tokens, %.1f s%s)\n", doc->id.c_str(),
                     lctx_method_name(doc->method), (long long)tokens.size(), encode_s,
                     saved ? ", saved" : ", in memory");
    } catch (const ApiError &e) {
        fail(e.what());
    } catch (const std::exception &e) {
        fail(doc->cancelled ? "cancelled (deleted, or the server stopped)" : e.what());
    }
}

} // namespace lctx::serve
