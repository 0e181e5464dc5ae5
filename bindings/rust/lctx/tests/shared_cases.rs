//! The cases of bindings/tests/shared_cases.json, which the Python, Java and
//! Go tests run too; the expected answers come from `lctx run`
//! (bindings/tests/make_shared_cases.py). No crates.io dependency: a small
//! JSON reader below.
mod common;

use lctx::{Conversation, Method, Model, ModelParams, Sampling, Session, SessionParams};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
#[allow(dead_code)] // Bool is read by nothing yet
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m.get(key).unwrap_or(&Json::Null),
            _ => &Json::Null,
        }
    }
    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    fn strings(&self) -> Vec<String> {
        self.arr().iter().map(|s| s.str().to_string()).collect()
    }
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] as char).is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s[self.i], c, "JSON: expected '{}' at {}", c as char, self.i);
        self.i += 1;
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(m);
                }
                loop {
                    self.ws();
                    let k = self.string();
                    self.eat(b':');
                    m.insert(k, self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b'}' {
                        return Json::Obj(m);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b']' {
                        return Json::Arr(a);
                    }
                }
            }
            b'"' => Json::Str(self.string()),
            b't' => {
                self.i += 4;
                Json::Bool(true)
            }
            b'f' => {
                self.i += 5;
                Json::Bool(false)
            }
            b'n' => {
                self.i += 4;
                Json::Null
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-0123456789.eE".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                Json::Num(std::str::from_utf8(&self.s[start..self.i]).unwrap().parse().unwrap())
            }
        }
    }
    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out: Vec<u16> = Vec::new();
        let mut bytes: Vec<u8> = Vec::new();
        let flush = |bytes: &mut Vec<u8>, out: &mut Vec<u16>| {
            out.extend(std::str::from_utf8(bytes).unwrap().encode_utf16());
            bytes.clear();
        };
        loop {
            let c = self.s[self.i];
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    flush(&mut bytes, &mut out);
                    let e = self.s[self.i];
                    self.i += 1;
                    match e {
                        b'n' => out.push(10),
                        b't' => out.push(9),
                        b'r' => out.push(13),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let h = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                            out.push(u16::from_str_radix(h, 16).unwrap());
                            self.i += 4;
                        }
                        other => out.push(other as u16),
                    }
                }
                _ => bytes.push(c),
            }
        }
        flush(&mut bytes, &mut out);
        String::from_utf16(&out).unwrap()
    }
}

fn cases() -> Json {
    let text = std::fs::read_to_string(common::repo_root().join("bindings/tests/shared_cases.json")).unwrap();
    Reader { s: text.as_bytes(), i: 0 }.value()
}

fn model(c: &Json) -> Model {
    let path = common::repo_root().join(c.get("model").str());
    Model::load(&path, &ModelParams { n_threads: c.get("n_threads").num() as i32, ..Default::default() }).unwrap()
}

/// Params with the method of a registry name (null: the library default).
fn params(c: &Json, method: &Json) -> SessionParams {
    let mut p = SessionParams { n_threads: c.get("n_threads").num() as i32, ..Default::default() };
    if let Json::Str(name) = method {
        p.method = Method::from_name(name).unwrap();
    }
    p
}

#[test]
fn shared_answer_cases() {
    let c = cases();
    let m = model(&c);
    for case in c.get("answer_cases").arr() {
        let name = case.get("name").str();
        let mut s = m.session(&params(&c, case.get("method"))).unwrap();
        let mut chat = Conversation::new(&mut s, false).unwrap();
        chat.feed_text(case.get("document").str()).unwrap();
        for turn in case.get("turns").arr() {
            let sp = turn.get("sampling");
            let sampling = Sampling {
                temperature: sp.get("temperature").num() as f32,
                top_k: sp.get("top_k").num() as i32,
                top_p: sp.get("top_p").num() as f32,
                seed: sp.get("seed").num() as u64,
                ..Sampling::greedy()
            };
            let mut streamed = String::new();
            let n = turn.get("n_predict").num() as usize;
            let stops = turn.get("stop").strings();
            let got = chat
                .ask_with(turn.get("question").str(), n, &sampling, &stops, |p| streamed.push_str(p))
                .unwrap();
            assert_eq!(got, turn.get("answer").str(), "case {name}");
            assert_eq!(streamed, got, "case {name}");
        }
        assert_eq!(chat.history.len(), case.get("turns").arr().len());
    }
}

#[test]
fn shared_error_cases() {
    let c = cases();
    let m = model(&c);
    for case in c.get("error_cases").arr() {
        let name = case.get("name").str();
        let err = match case.get("op").str() {
            "load_model" => Model::load(common::repo_root().join(case.get("path").str()), &ModelParams::default())
                .map(|_| ())
                .unwrap_err(),
            "method_from_name" => Method::from_name(case.get("text").str()).map(|_| ()).unwrap_err(),
            "feed_tokens" => {
                let toks: Vec<i32> = case.get("tokens").arr().iter().map(|t| t.num() as i32).collect();
                let mut s = m.session(&params(&c, &Json::Null)).unwrap();
                s.feed(&toks).unwrap_err()
            }
            "decode_after_feed" => {
                let mut s = m.session(&params(&c, &Json::Null)).unwrap();
                s.feed_text(case.get("document").str()).unwrap();
                s.decode(&Sampling::greedy()).unwrap_err()
            }
            "cancel_in_progress" => {
                let seen = Arc::new(Mutex::new(Vec::<String>::new()));
                let mut p = params(&c, &Json::Null);
                let record = seen.clone();
                p.on_progress = Some(Arc::new(move |stage: &str, _done: f32| {
                    let mut v = record.lock().unwrap();
                    if !v.iter().any(|s| s == stage) {
                        v.push(stage.to_string());
                    }
                    true
                }));
                let mut s: Session = m.session(&p).unwrap();
                let e = s.feed_text(case.get("document").str()).unwrap_err();
                assert_eq!(*seen.lock().unwrap(), case.get("labels").strings(), "case {name}");
                e
            }
            op => panic!("unknown op {op}"),
        };
        assert_eq!(err.status.kind(), case.get("error").str(), "case {name}: {err}");
    }
}

#[test]
fn shared_progress_labels() {
    let c = cases();
    let m = model(&c);
    let pc = c.get("progress_case");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let mut p = params(&c, pc.get("method"));
    p.on_progress = Some(Arc::new(move |stage: &str, _done: f32| {
        let mut v = record.lock().unwrap();
        if v.last().map(|s| s.as_str()) != Some(stage) {
            v.push(stage.to_string());
        }
        false
    }));
    let mut s = m.session(&p).unwrap();
    s.feed_text(pc.get("document").str()).unwrap();
    s.ask(pc.get("question").str(), pc.get("n_predict").num() as usize, &Sampling::greedy()).unwrap();
    drop(s);
    assert_eq!(*seen.lock().unwrap(), pc.get("labels").strings());
}
