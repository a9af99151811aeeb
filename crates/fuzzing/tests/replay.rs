//! Replays every fuzz target's committed corpus (`fuzz/corpus/<target>/`: seeds and the inputs that
//! once crashed, hung or ran out of memory) and deterministic mutations of it, on the stable
//! toolchain and without coverage guidance: a regression on a known bad input fails the normal test
//! run. `FUZZ_REPLAY_MUTATIONS` sets the mutations per target (default 1500; 0 replays the corpus
//! only). Coverage-guided runs are `cargo fuzz` in `fuzz/` (docs/fuzzing.md).
//!
//! `cargo test -p fuzzing --test replay -- --ignored write_seeds` rewrites the generated seeds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest any one input may take here (a debug build); libFuzzer runs use `-timeout=5` on release.
const SLOW: Duration = Duration::from_secs(10);

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// xorshift64*: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn new(seed: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in seed.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        Rng(h | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes and tokens that tend to matter to the decoders.
const INTERESTING: &[&[u8]] = &[
    b"\0",
    b"\xff",
    b"\x80",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b".",
    b"-",
    b"e",
    b"9",
    b"0",
    b"=",
    b"!",
    b"(",
    b")",
    b"\\",
    b"\n",
    b"~",
    b"/",
    b"&",
    b"%",
    b"*",
    b"null",
    b"\"\"",
    b"-1",
    b"1e308",
    b"99999999999999999999",
    b"\xc3\xa9",
    b"\xe0\xa5\xa9",
    b"$patch",
    b"$retainKeys",
    b"$setElementOrder/containers",
    b"$deleteFromPrimitiveList/finalizers",
    b"\"op\":\"copy\"",
    b"f:",
    b"k:{\"name\":\"web\"}",
    b"v:",
    b"i:",
    b".:",
    b"Ei",
    b"Ki",
    b"m",
    b"n",
    b"u",
    b"E",
    b"notin",
    b"in",
    b"exists",
    b"!=",
    b"==",
    b"&&",
    b"<<",
    b"*anchor",
    b"&anchor ",
];

fn mutate(rng: &mut Rng, input: &[u8], others: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                let token = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(i..i, token.iter().copied());
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                out.drain(i..i + n);
            }
            4 if len > 0 => {
                // Repeat a slice: nesting and long runs.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let piece = out[i..i + n].to_vec();
                for _ in 0..1 + rng.below(8) {
                    out.splice(i..i, piece.iter().copied());
                }
            }
            5 if !others.is_empty() => {
                // Splice in part of another input.
                let other = &others[rng.below(others.len())].1;
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = a + rng.below(other.len() - a) + 1;
                    let i = rng.below(len + 1);
                    out.splice(i..i, other[a..b].iter().copied());
                }
            }
            6 if len > 0 => out.truncate(rng.below(len)),
            7 if len > 0 => {
                // A digit run: numbers past every width.
                let i = rng.below(len + 1);
                let n = 1 + rng.below(40);
                out.splice(i..i, std::iter::repeat_n(b'9', n));
            }
            _ if len > 1 => {
                let (i, j) = (rng.below(len), rng.below(len));
                out.swap(i, j);
            }
            _ => out.push(rng.next() as u8),
        }
    }
    out.truncate(64 * 1024);
    out
}

fn run_one(target: &str, f: fn(&[u8]), what: &str, input: &[u8]) {
    let start = Instant::now();
    let result = std::panic::catch_unwind(|| f(input));
    let took = start.elapsed();
    if result.is_err() {
        panic!(
            "fuzz target {target} panicked on {what}; input (escaped): \"{}\"",
            input.escape_ascii()
        );
    }
    assert!(
        took < SLOW,
        "fuzz target {target} took {took:?} on {what}; input (escaped): \"{}\"",
        input.escape_ascii()
    );
}

fn replay(target: &str) {
    let f = fuzzing::target(target).expect("a target of fuzzing::TARGETS");
    let inputs = corpus(target);
    assert!(!inputs.is_empty(), "{target} has no corpus");
    for (name, input) in &inputs {
        run_one(target, f, &format!("corpus file {name}"), input);
    }
    let mutations: usize = std::env::var("FUZZ_REPLAY_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let mut rng = Rng::new(target);
    for n in 0..mutations {
        let (name, base) = &inputs[rng.below(inputs.len())];
        let input = mutate(&mut rng, base, &inputs);
        run_one(target, f, &format!("mutation {n} of {name}"), &input);
    }
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { replay(stringify!($name)); })*

        #[test]
        fn every_target_is_replayed() {
            let here = [$(stringify!($name)),*];
            for (name, _) in fuzzing::TARGETS {
                assert!(here.contains(name), "{name} has no replay test");
                let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../fuzz/fuzz_targets")
                    .join(format!("{name}.rs"));
                assert!(bin.is_file(), "{name} has no cargo-fuzz target {}", bin.display());
            }
        }
    };
}

replay_tests!(
    decode_json,
    decode_yaml,
    decode_protobuf,
    decode_cbor,
    patch_json,
    patch_merge,
    patch_strategic,
    apply,
    managed_fields,
    label_selector,
    field_selector,
    quantity,
    jwt,
    bootstrap_token,
    route,
    spdy_frames,
    spdy_conn,
    websocket,
);

#[test]
#[ignore = "writes the generated seed corpus (run by hand)"]
fn write_seeds() {
    for (target, seeds) in seeds::all() {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed).unwrap();
        }
    }
}

mod seeds;
