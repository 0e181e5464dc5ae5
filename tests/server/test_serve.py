"""`lctx serve` end to end with the official `openai` client: models, chat
completions (plain and streamed, stop sequences), a ~10K-token document with
a needle asked about by id, concurrent clients, a client that leaves
mid-stream, a full wait line, bad requests, SIGTERM.
Runtime: about 3 minutes on 2 busy cores (load 12), most of it the document's
encoding and REFORM's recompute of 4096 gathered tokens per question."""
import concurrent.futures
import json
import subprocess
import sys
import threading
import time

import http.client

import openai
import pytest

from conftest import BUILD, MODEL_ID, ROOT, SMOLLM2, Server

sys.path.insert(0, str(ROOT / "bench"))
import needle_data  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


class Reply:
    """A raw HTTP answer (stdlib http.client: the tests of bad requests need
    bytes no client library would send)."""

    def __init__(self, status, headers, body):
        self.status_code, self.headers, self.text = status, headers, body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.text)


def raw(server, method, path, body=None, headers=None, timeout=60):
    if isinstance(body, (dict, list)):
        body, headers = json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    elif isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    except (ConnectionResetError, BrokenPipeError) as e:   # the server may answer 413 before the body is sent
        raise AssertionError(f"{method} {path}: connection closed without an answer ({e})")
    finally:
        conn.close()


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=170, **kw)


def wait_idle(server, timeout=30):
    """Waits until no slot is busy (a request's slot is given back when it ends)."""
    end = time.time() + timeout
    while time.time() < end:
        h = raw(server, "GET", "/health").json()
        if h["slots_busy"] == 0:
            return h
        time.sleep(0.1)
    raise AssertionError(f"slots still busy after {timeout} s: {h}")


def test_models(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    assert client(server).models.retrieve(MODEL_ID).id == MODEL_ID
    with pytest.raises(openai.NotFoundError):
        client(server).models.retrieve("no-such-model")


def test_chat_and_stream_agree(server):
    c = client(server)
    r = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24, seed=1)
    text = r.choices[0].message.content
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert "Paris" in text, text
    assert 0 < r.usage.completion_tokens <= 24 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same greedy request streamed: the pieces join into the same text.
    pieces, finish, usage = [], None, None
    for ch in c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24, seed=1,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == text
    assert finish == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens


def test_max_tokens_and_stop(server):
    c = client(server)
    full = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24)
    text = full.choices[0].message.content
    assert "Paris" in text
    short = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=2)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    assert text.startswith(short.choices[0].message.content)
    # A stop sequence cuts the answer just before it, streamed or not.
    cut = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24, stop=["Paris"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index("Paris")]
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24, stop=["aris", "zzz"], stream=True)
        if ch.choices)
    assert streamed == text[: text.index("aris")]
    # Sampling: the same seed gives the same answer.
    a, b = (c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0.9, top_p=0.9, seed=42,
                                      max_tokens=12).choices[0].message.content for _ in range(2))
    assert a == b


def upload(server, text, **fields):
    r = raw(server, "POST", "/v1/documents", {"text": text, **fields})
    assert r.status_code == 202, r.text
    return r.json()


def wait_ready(server, doc_id, timeout=150):
    end, seen = time.time() + timeout, []
    while time.time() < end:
        d = raw(server, "GET", f"/v1/documents/{doc_id}").json()
        seen.append(d)
        if d["state"] in ("ready", "failed"):
            return d, seen
        time.sleep(0.25)
    raise AssertionError(f"document not ready after {timeout} s: {seen[-1]}")


def test_document_needle(server):
    doc, needle, key, value = needle_data.make_doc(n_chars=44000, depth=0.6, seed=11)
    d = upload(server, doc, name="needle")
    assert d["object"] == "document" and d["method"] == "reform" and d["state"] in ("queued", "encoding")
    d, seen = wait_ready(server, d["id"])
    assert d["state"] == "ready", d
    assert 9000 < d["tokens_total"] < 13000 and d["tokens_done"] == d["tokens_total"] and d["persisted"]
    done = [s["tokens_done"] for s in seen]
    assert done == sorted(done), "progress went backwards"
    assert (server.data_dir / f"{d['id']}.index").exists()

    c = client(server)
    ask = [{"role": "user", "content": needle_data.question(key)}]
    r = c.chat.completions.create(model=MODEL_ID, messages=ask, temperature=0, max_tokens=32,
                                  extra_body={"document_id": d["id"]})
    answer = r.choices[0].message.content
    assert value in answer, f"answer {answer!r} lacks {value}"
    # The same question twice at once (two slots), one streamed: one runs on the
    # session that answered above, the other on one loaded from the saved
    # index; both answer as the first did, so asking left the encoding as it was.
    def streamed():
        return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=MODEL_ID, messages=ask, temperature=0, max_tokens=32, stream=True,
            extra_body={"document_id": d["id"]}) if ch.choices)

    def plain():
        return c.chat.completions.create(model=MODEL_ID, messages=ask, temperature=0, max_tokens=32,
                                         extra_body={"document_id": d["id"]}).choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        outs = [f.result() for f in [ex.submit(streamed), ex.submit(plain)]]
    assert outs == [answer, answer]

    assert raw(server, "DELETE", f"/v1/documents/{d['id']}").json()["deleted"] is True
    assert raw(server, "GET", f"/v1/documents/{d['id']}").status_code == 404
    assert not (server.data_dir / f"{d['id']}.index").exists()
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model=MODEL_ID, messages=ask, extra_body={"document_id": d["id"]})
    assert e.value.body["code"] == "document_not_found"


def test_document_as_text_and_methods(server):
    text = ("The lighthouse on Gull Island was built in 1871 by the engineer Mara Quill. It stands 42 metres tall.\n"
            * 3)
    r = raw(server, "POST", "/v1/documents?method=full&name=light", text, {"Content-Type": "text/plain"})
    assert r.status_code == 202, r.text
    d, _ = wait_ready(server, r.json()["id"], 60)
    assert d["state"] == "ready" and d["method"] == "full" and d["name"] == "light" and not d["persisted"]
    out = client(server).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Who built the lighthouse?"}], temperature=0,
        max_tokens=16, extra_body={"document_id": d["id"]})
    assert "Quill" in out.choices[0].message.content
    bad = raw(server, "POST", "/v1/documents", {"text": "x", "method": "nope"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "method"
    for body in ({"text": ""}, {"text": 5}, {"nothing": 1}, [1, 2]):
        r = raw(server, "POST", "/v1/documents", body)
        assert r.status_code == 400 and "message" in r.json()["error"], (body, r.text)
    raw(server, "DELETE", f"/v1/documents/{d['id']}")
    # Deleted while it waits or is encoded: gone at once, its encoding stops, nothing is left on disk.
    big = upload(server, "All work and no play. " * 20000)
    assert raw(server, "DELETE", f"/v1/documents/{big['id']}").json()["deleted"] is True
    assert raw(server, "GET", f"/v1/documents/{big['id']}").status_code == 404
    assert all(d["id"] != big["id"] for d in raw(server, "GET", "/v1/documents").json()["data"])
    time.sleep(1)
    assert not list(server.data_dir.glob(big["id"] + ".*"))


def test_concurrent_clients(server):
    c = client(server)

    def one(i):
        r = c.chat.completions.create(model=MODEL_ID, temperature=0, max_tokens=8,
                                      messages=[{"role": "user", "content": f"Say the number {i}."}])
        return r.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(one, range(4)))
    assert all(isinstance(o, str) and o for o in outs), outs


def test_client_leaves_mid_stream(server):
    c = client(server)
    stream = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Write a long story."}],
                                       temperature=0.8, max_tokens=2000, stream=True)
    got = 0
    for ch in stream:
        got += 1
        if got == 5:
            break
    stream.close()   # the connection is dropped mid-answer
    # The server notices at its next write, stops generating and frees the slot.
    t0 = time.time()
    wait_idle(server, 20)
    assert time.time() - t0 < 20
    r = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, temperature=0, max_tokens=24)
    assert "Paris" in r.choices[0].message.content


def post(server, body):
    return raw(server, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})


def error_of(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert isinstance(e["message"], str) and e["message"] and "type" in e and "code" in e and "param" in e
    return e


def test_bad_requests(server):
    ok = {"model": MODEL_ID, "messages": QUESTION, "max_tokens": 4}
    error_of(post(server, b"{not json"), 400)
    error_of(post(server, b""), 400)
    error_of(post(server, b"[" * 200000), 400)                      # deep nesting
    error_of(post(server, b'{"model": "\xff\xfe"}'), 400)           # invalid UTF-8
    error_of(post(server, json.dumps([1, 2])), 400)
    for field, value in [("max_tokens", "x"), ("max_tokens", 0), ("max_tokens", -3), ("temperature", "hot"),
                         ("temperature", 9), ("top_p", 0), ("stream", "yes"), ("stop", 5), ("stop", ["a"] * 5),
                         ("seed", 1.5), ("messages", "hi"), ("messages", []), ("messages", [{"role": "cat",
                                                                                             "content": "x"}]),
                         ("messages", [{"role": "user"}]), ("messages", [5]), ("n", 2), ("document_id", 7),
                         ("model", 3)]:
        e = error_of(post(server, json.dumps({**ok, field: value})), 400)
        assert field in (e["param"] or "") or field in e["message"], (field, value, e)
    e = error_of(post(server, json.dumps({**ok, "model": "gpt-9"})), 404)
    assert e["code"] == "model_not_found"
    e = error_of(post(server, json.dumps({**ok, "document_id": "doc-0000000000000000"})), 404)
    assert e["code"] == "document_not_found"
    e = error_of(post(server, json.dumps({**ok, "messages": [{"role": "user", "content": "word " * 9000}]})), 400)
    assert e["code"] == "context_length_exceeded"
    e = error_of(post(server, b"x" * 3_000_000), 413)               # past --max-body 2000000
    assert e["code"] == "payload_too_large"
    # The same without Content-Length (chunked): the server stops reading at the limit.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=(b"y" * 100_000 for _ in range(30)), encode_chunked=True,
                     headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"})
    except (BrokenPipeError, ConnectionResetError):
        pass   # the answer came before the whole body was sent
    r = conn.getresponse()
    assert r.status == 413 and json.loads(r.read())["error"]["code"] == "payload_too_large"
    conn.close()
    error_of(raw(server, "GET", "/v1/nothing"), 404)
    error_of(raw(server, "GET", "/v1/documents/doc-0000000000000000"), 404)
    error_of(raw(server, "DELETE", "/v1/documents/nope"), 404)
    with pytest.raises(openai.BadRequestError):
        client(server).chat.completions.create(model=MODEL_ID, messages=QUESTION, max_tokens=-1)
    # Not HTTP at all, and a request cut off in its headers.
    import socket
    for junk in (b"\x00\xff GARBAGE\r\n\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(4096)
    # Still serving.
    assert post(server, json.dumps(ok)).status_code == 200


def test_full_queue_then_sigterm(tmp_path):
    """One slot and no wait line: a second request while the first streams
    gets 503; SIGTERM during the stream stops the server cleanly (exit 0)."""
    s = Server(["--parallel", "1", "--queue", "0", "--threads", "1", "--data-dir", str(tmp_path)])
    try:
        c = client(s)
        stream = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Tell a story."}],
                                           temperature=0.8, max_tokens=3000, stream=True)
        it = iter(stream)
        next(it)
        r = raw(s, "POST", "/v1/chat/completions", {"model": MODEL_ID, "messages": QUESTION})
        e = error_of(r, 503)
        assert e["code"] == "server_busy" and r.headers.get("retry-after")
        # A second server on the same port is refused (no SO_REUSEPORT sharing of the port).
        second = subprocess.run([str(BUILD / "tools" / "lctx"), "serve", "-m", str(SMOLLM2), "--port", str(s.port)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "cannot listen" in second.stderr, second.stderr
        t0 = time.time()
        assert s.stop() == 0, "\n".join(s.log[-20:])
        assert time.time() - t0 < 15
        assert any("SIGTERM" in line for line in s.log)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_saved_document_survives_restart(tmp_path):
    """A REFORM document's encoding is kept in --data-dir: a server started
    again on it lists the document as ready and answers from it as before."""
    text = ("The lighthouse on Gull Island was built in 1871 by the engineer Mara Quill. It stands 42 metres tall "
            "and its lamp can be seen 30 kilometres out at sea.\n") * 4
    ask = [{"role": "user", "content": "Who built the lighthouse?"}]
    answers = []
    s = Server(["--threads", "2", "--data-dir", str(tmp_path)])
    try:
        d, _ = wait_ready(s, upload(s, text)["id"], 60)
        assert d["state"] == "ready" and d["persisted"], d
        answers.append(client(s).chat.completions.create(model=MODEL_ID, messages=ask, temperature=0, max_tokens=16,
                                                         extra_body={"document_id": d["id"]}))
    finally:
        assert s.stop() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{d['id']}.index", f"{d['id']}.json"]
    s = Server(["--threads", "2", "--data-dir", str(tmp_path)])
    try:
        again = raw(s, "GET", f"/v1/documents/{d['id']}").json()
        assert again["state"] == "ready" and again["tokens_total"] == d["tokens_total"], again
        answers.append(client(s).chat.completions.create(model=MODEL_ID, messages=ask, temperature=0, max_tokens=16,
                                                         extra_body={"document_id": d["id"]}))
    finally:
        assert s.stop() == 0
    assert "Quill" in answers[0].choices[0].message.content
    assert answers[1].choices[0].message.content == answers[0].choices[0].message.content


def test_timeout(tmp_path):
    """--timeout bounds a request: a long answer is stopped with 504 (plain)
    or an error event (streamed), and the slot is free again.

    The request must outlast the timeout on any machine whatever the model
    says: how long its answer runs depends on the CPU's rounding (a CI
    machine once stopped after 121 tokens, within 1 s). So the timeout is
    50 ms and the prompt alone is about 1,500 tokens, which one thread does
    not read that fast; the deadline is checked during the prompt too."""
    s = Server(["--threads", "1", "--timeout", "0.05", "--data-dir", str(tmp_path)])
    try:
        filler = "The river keeps its own counsel and the town keeps its own hours. " * 100
        long = [{"role": "user", "content": filler + "Count from 1 to 1000, separated by commas."}]
        e = error_of(raw(s, "POST", "/v1/chat/completions", {"model": MODEL_ID, "messages": long, "temperature": 0,
                                                             "max_tokens": 4000}), 504)
        assert e["code"] == "timeout"
        with pytest.raises(openai.APIError) as err:
            for _ in client(s).chat.completions.create(model=MODEL_ID, messages=long, temperature=0, max_tokens=4000,
                                                       stream=True):
                pass
        assert "--timeout" in str(err.value)
        assert wait_idle(s, 10)["slots_busy"] == 0
    finally:
        assert s.stop() == 0


def test_memory_bound(tmp_path):
    """--max-memory bounds every session: a request past it gets 400
    memory_limit_exceeded, a document's encoding fails with the reason, and
    a document still encoding or failed cannot be asked about (409)."""
    s = Server(["--threads", "1", "--max-memory", "1", "--data-dir", str(tmp_path)])
    try:
        with pytest.raises(openai.BadRequestError) as e:
            client(s).chat.completions.create(model=MODEL_ID, messages=QUESTION, max_tokens=3)
        assert e.value.body["code"] == "memory_limit_exceeded"
        d, _ = wait_ready(s, upload(s, "a short document")["id"], 30)
        assert d["state"] == "failed" and "max_memory" in d["message"], d
        e = error_of(raw(s, "POST", "/v1/chat/completions", {"model": MODEL_ID, "messages": QUESTION,
                                                             "document_id": d["id"]}), 409)
        assert e["code"] == "document_not_ready"
        assert raw(s, "GET", "/health").json()["status"] == "ok"
    finally:
        assert s.stop() == 0
