//! What the in-process runner tests share: reading back what a run published into its
//! `file://` store.

use std::path::Path;

/// The text of every published Resource List document in the store at `store` (the list, or
/// the parts its index names), in no particular order; blobs and state are not walked.
pub fn resource_lists(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![store.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !matches!(name.as_str(), "blobs" | "state") {
                    stack.push(p);
                }
            } else if name.starts_with("resourcelist") && name.ends_with(".xml") {
                let text = std::fs::read_to_string(&p).unwrap();
                if text.contains("capability=\"resourcelist\"") {
                    out.push(text);
                }
            }
        }
    }
    out
}
