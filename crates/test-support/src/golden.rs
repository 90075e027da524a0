//! Reading the golden files under `testdata/` (placements recorded from the real programs): `# key: value`
//! header lines, then `HEXKEY<TAB>VALUE` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One golden file.
#[derive(Debug)]
pub struct Golden {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its `# key: value` lines: how the program that wrote it was set up.
    pub header: BTreeMap<String, String>,
    /// Each key (unhexed) and the value the program gave for it.
    pub rows: Vec<(Vec<u8>, String)>,
}

/// The workspace's `testdata/<mode>` directory.
pub fn testdata(mode: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(mode)
}

/// The bytes a lowercase hex string spells.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Reads one golden file; panics naming the file when it cannot be read.
pub fn read(path: &Path) -> Golden {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut header = BTreeMap::new();
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("# ") {
            if let Some((k, v)) = h.split_once(": ") {
                header.insert(k.to_string(), v.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once('\t').expect("HEX<TAB>VALUE");
        rows.push((unhex(k), v.to_string()));
    }
    Golden {
        path: path.to_path_buf(),
        header,
        rows,
    }
}

/// Every `*.tsv` file of a testdata directory, sorted.
pub fn files(mode: &str) -> Vec<PathBuf> {
    let dir = testdata(mode);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tsv"))
        .collect();
    files.sort();
    files
}

/// Checks every row with `place`, and panics listing the first mismatches and the totals.
pub fn check(golden: &Golden, mut place: impl FnMut(&[u8]) -> String) -> usize {
    let mut bad = Vec::new();
    for (key, want) in &golden.rows {
        let got = place(key);
        if &got != want {
            bad.push(format!("  {} want {want} got {got}", hex(key)));
        }
    }
    assert!(
        bad.is_empty(),
        "{}: {} of {} keys differ:\n{}",
        golden.path.display(),
        bad.len(),
        golden.rows.len(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    golden.rows.len()
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
