//! ask: load a model, read a text file, ask a question, stream the answer.
//! usage: cargo run -- MODEL.gguf FILE.txt "question" [max_tokens]
use std::io::Write;
use std::process::ExitCode;

fn run(model_path: &str, text_path: &str, question: &str, max_tokens: usize) -> Result<(), Box<dyn std::error::Error>> {
    let doc = std::fs::read_to_string(text_path)?;
    let model = lctx::Model::load(model_path, &lctx::ModelParams::default())?;
    let mut session = model.session(&lctx::SessionParams::default())?;
    // The document framed as the start of a user turn, then the question.
    let (prefix, suffix) = model.prompt_parts();
    session.feed(&model.tokenize(&format!("{prefix}{doc}"), true, true)?)?;
    let mut out = std::io::stdout();
    for piece in session.ask_stream(&format!("\n\n{question}{suffix}"), max_tokens, &lctx::Sampling::greedy())? {
        out.write_all(piece?.as_bytes())?;
        out.flush()?;
    }
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
