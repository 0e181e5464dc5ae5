//! ask: load a model, read a (long) text file, ask a question, stream the answer.
//! usage: cargo run -- MODEL.gguf FILE.txt "question" [max_tokens]
//!
//! The session uses the library's default method, REFORM, so FILE.txt may be
//! far longer than the model's trained context (examples/make_haystack.py
//! writes one). Progress goes to stderr with the stage of each long call.
use std::io::Write;
use std::process::ExitCode;

fn run(model_path: &str, text_path: &str, question: &str, max_tokens: usize) -> Result<(), Box<dyn std::error::Error>> {
    let doc = std::fs::read_to_string(text_path)?;
    let model = lctx::Model::load(model_path, &lctx::ModelParams::default())?;
    let progress = |stage: &str, done: f32| {
        eprint!("\r{stage} {:3.0}%{}", 100.0 * done, if done >= 1.0 { "\n" } else { "" });
        false // true would cancel
    };
    let params = lctx::SessionParams { on_progress: Some(std::sync::Arc::new(progress)), ..Default::default() };
    let mut session = model.session(&params)?; // REFORM
    let mut chat = lctx::Conversation::new(&mut session, true)?; // the model's chat template, history kept
    let n = chat.feed_text(&doc)?;
    eprintln!("ask: {n} tokens (trained context {})", model.n_ctx_train());
    let mut out = std::io::stdout();
    chat.ask_with(question, max_tokens, &lctx::Sampling::greedy(), &[] as &[&str], |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    println!();
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: ask MODEL.gguf FILE.txt \"question\" [max_tokens]");
        return ExitCode::from(2);
    }
    let max_tokens = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(128);
    match run(&args[1], &args[2], &args[3], max_tokens) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ask: {e}");
            ExitCode::FAILURE
        }
    }
}
