//! Embeds the help-center articles of `data/help/*.md` so the binary answers offline from any
//! directory (and in a Lambda package, which has no `data/` next to it).

use std::path::Path;

fn main() {
    // The manifest directory of this build, read when the script runs (not `env!`, which would
    // fix the path of whichever checkout first compiled the script into a shared target directory).
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set by cargo");
    let dir = Path::new(&manifest).join("../../data/help");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut articles: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    articles.sort();
    let mut out = String::from("&[\n");
    for path in articles {
        let slug = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        let path = path.canonicalize().expect("an existing file");
        out.push_str(&format!("    ({slug:?}, include_str!({:?})),\n", path.display().to_string()));
    }
    out.push_str("]\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo")).join("help_articles.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}
