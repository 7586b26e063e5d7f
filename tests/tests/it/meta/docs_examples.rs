//! Every shell example in README.md and docs/*.md runs as printed, against a real cluster.
//!
//! The rule (docs/testing.md, "Examples in the docs"): every fenced block whose info string is
//! `sh` or `bash` is run, unless the line before its fence is `<!-- not run: <reason> -->`.
//! Other shell-like info strings (`shell`, `console`, `zsh`, ...) are refused, and so is a
//! command (`curl`, `etcronctl`, `etcdctl`, ...) at the start of a line of any other block, so
//! the only way out is the visible comment with its reason.
//!
//! Each file gets a cluster of its own, as `deploy/local/up.sh` starts it (etcd, a one-node
//! MongoDB replica set, one master, workers `local-1` and `local-2`, namespace `/etcron`,
//! database `etcron`) with its demo job `hello`. Its blocks run in order, each in
//! `bash -euo pipefail` in one working directory, with what earlier blocks of the file defined
//! (variables, exports, the current directory), as if typed into one terminal. The environment
//! holds only what the docs tell a reader to set, pointing at this cluster instead of up.sh's
//! defaults: `PATH` with the built binaries first, `ETCRON_SERVER`, `ETCDCTL_API` and
//! `ETCDCTL_ENDPOINTS`, `ETCRON_ETCD_ENDPOINTS`, `ETCRON_MONGODB_URI`. A block fails when it
//! exits non-zero, prints the API's error envelope (`{"error":{"code":...`) on stdout, or runs
//! longer than [`BLOCK_TIMEOUT`]; the failure names the file and the line of the block.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use etcron_tests::{bin_dir, log_dir, Etcd, Master, Mongo, Worker, WorkerOpts};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// The most one block may take (a `--follow` of a run, a worker registering).
const BLOCK_TIMEOUT: Duration = Duration::from_secs(60);
/// README.md is the ten-minute read; the manual is in docs/.
const README_MAX_BYTES: usize = 12 * 1024;
/// ARCHITECTURE.md is the map, read in half an hour; decisions are in docs/decisions/.
const ARCHITECTURE_MAX_BYTES: usize = 30 * 1024;
/// BENCHMARKS.md holds the current figures; their history is in docs/benchmarks-history.md.
const BENCHMARKS_MAX_BYTES: usize = 15 * 1024;
/// Info strings that are shell but not run; a block must use `sh` (or `bash`) and, when it
/// cannot run here, say why in a comment.
const REFUSED_LANGS: &[&str] = &["shell", "console", "zsh", "shell-session", "bash-session", "sh-session", "terminal"];
/// Commands that mark a line of a non-shell block as an example someone would run.
const COMMANDS: &[&str] =
    &["curl ", "etcronctl ", "etcdctl ", "etcron-master ", "etcron-worker ", "cargo ", "deploy/local/", "$ "];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// One fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// Line of the opening fence, 1-based.
    line: usize,
    lang: String,
    code: String,
    /// The reason of a `<!-- not run: reason -->` right before the fence.
    not_run: Option<String>,
}

impl Block {
    fn runs(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash") && self.not_run.is_none()
    }
}

/// The fenced blocks of `text`, in order.
fn blocks(text: &str) -> Result<Vec<Block>> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, String, Option<String>, String)> = None; // line, indent, lang, not_run, code
    let mut previous = ""; // the last non-blank line outside a block
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let lang = info.split_whitespace().next().unwrap_or("").to_owned();
                    let not_run = previous
                        .trim()
                        .strip_prefix("<!-- not run:")
                        .and_then(|r| r.strip_suffix("-->"))
                        .map(|r| r.trim().to_owned());
                    open = Some((i + 1, line.len() - trimmed.len(), lang, not_run, String::new()));
                } else if !line.trim().is_empty() {
                    previous = line;
                }
            }
            Some((start, indent, lang, not_run, code)) => {
                if trimmed.starts_with("```") && trimmed.trim_end() == "```" {
                    out.push(Block {
                        line: *start,
                        lang: std::mem::take(lang),
                        code: std::mem::take(code),
                        not_run: not_run.take(),
                    });
                    open = None;
                    previous = "";
                } else {
                    let strip = line.len() - line.trim_start_matches(' ').len();
                    code.push_str(&line[strip.min(*indent)..]);
                    code.push('\n');
                }
            }
        }
    }
    if let Some((start, ..)) = open {
        bail!("the block opened at line {start} is never closed");
    }
    Ok(out)
}

/// The Markdown files directly in `dir` (relative to the root), sorted.
fn markdown_in(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    files.sort();
    files
}

/// The Markdown files whose examples run: README.md and every docs/*.md.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    files.extend(markdown_in("docs"));
    files
}

fn read_doc(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("reading {file}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Checks without a cluster

#[test]
fn readme_architecture_and_benchmarks_stay_short() {
    for (file, max, whereto) in [
        ("README.md", README_MAX_BYTES, "docs/"),
        ("ARCHITECTURE.md", ARCHITECTURE_MAX_BYTES, "docs/decisions/"),
        ("BENCHMARKS.md", BENCHMARKS_MAX_BYTES, "docs/benchmarks-history.md"),
    ] {
        let size = std::fs::metadata(root().join(file)).unwrap().len();
        assert!(
            usize::try_from(size).unwrap() <= max,
            "{file} is {size} bytes, more than {max}: move the detail into {whereto}"
        );
    }
}

/// Every block follows the rule: runnable, or marked with its reason; no shell hidden in other
/// fences; every marker stands before a shell block and gives a reason.
#[test]
fn every_shell_block_runs_or_says_why_not() {
    let mut problems = Vec::new();
    let (mut runs, mut not_run) = (0, 0);
    for file in doc_files() {
        let text = read_doc(&file);
        let blocks = match blocks(&text) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{file}: {e}"));
                continue;
            }
        };
        for b in &blocks {
            let at = format!("{file}:{}", b.line);
            let shell = matches!(b.lang.as_str(), "sh" | "bash");
            if REFUSED_LANGS.contains(&b.lang.as_str()) {
                let fix = "fence shell as ```sh, with `<!-- not run: why -->` before it if it cannot run here";
                problems.push(format!("{at}: a ```{} block: {fix}", b.lang));
            }
            match &b.not_run {
                Some(reason) if reason.is_empty() => {
                    problems.push(format!("{at}: `<!-- not run: -->` without a reason"))
                }
                Some(_) if !shell => {
                    problems.push(format!("{at}: `<!-- not run -->` before a ```{} block, which never runs", b.lang))
                }
                Some(_) => not_run += 1,
                None if shell => runs += 1,
                None => {}
            }
            if !shell {
                for (n, l) in b.code.lines().enumerate() {
                    if COMMANDS.iter().any(|c| l.trim_start().starts_with(c)) {
                        problems.push(format!(
                            "{file}:{}: a command in a ```{} block: fence it as ```sh so it runs (or mark it not run)",
                            b.line + 1 + n,
                            b.lang
                        ));
                    }
                }
            }
        }
    }
    eprintln!("{runs} shell blocks run, {not_run} marked not run");
    assert!(problems.is_empty(), "{} problem(s):\n  - {}", problems.len(), problems.join("\n  - "));
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link of README.md, ARCHITECTURE.md, BENCHMARKS.md, docs/ and docs/decisions/
/// leads to a file that exists and, with `#anchor`, to one of its headings: the manual moved,
/// its links moved with it.
#[test]
fn every_relative_link_resolves() {
    let mut files = doc_files();
    files.extend(["ARCHITECTURE.md".to_owned(), "BENCHMARKS.md".to_owned()]);
    // The decision records are read, not run: their links are checked only.
    files.extend(markdown_in("docs/decisions"));
    let mut problems = Vec::new();
    for file in &files {
        let text = read_doc(file);
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for (n, line) in text.lines().enumerate() {
            for part in line.split("](").skip(1) {
                let Some(link) = part.split(')').next() else { continue };
                if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                    continue;
                }
                let (path, frag) = link.split_once('#').unwrap_or((link, ""));
                let target = if path.is_empty() { root().join(file) } else { root().join(dir).join(path) };
                let at = format!("{file}:{}: {link}", n + 1);
                if !target.exists() {
                    problems.push(format!("{at}: no such file"));
                } else if !frag.is_empty() && target.extension().is_some_and(|e| e == "md") {
                    let heads = anchors(&std::fs::read_to_string(&target).unwrap());
                    if !heads.contains(frag) {
                        problems.push(format!("{at}: no heading #{frag}"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} broken link(s):\n  - {}", problems.len(), problems.join("\n  - "));
}

/// ARCHITECTURE.md's code map names every source file of every crate, so the map stays whole;
/// the integration tests' files (`tests/tests/it/`) are named in docs/testing.md instead.
#[test]
fn the_code_map_names_every_source_file() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let tests_map = std::fs::read_to_string(root().join("docs/testing.md")).unwrap();
    let mut missing = Vec::new();
    let mut stack: Vec<PathBuf> = ["common", "master", "worker", "tests"]
        .iter()
        .flat_map(|c| [root().join(c).join("src"), root().join(c).join("tests")])
        .collect();
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                seen += 1;
                let rel = path.strip_prefix(root()).unwrap().display().to_string();
                let named_in = if rel.starts_with("tests/tests/it/") && rel != "tests/tests/it/main.rs" {
                    &tests_map
                } else {
                    &map
                };
                if !named_in.contains(&format!("- `{rel}`")) {
                    missing.push(rel);
                }
            }
        }
    }
    missing.sort();
    assert!(seen > 100, "found only {seen} source files");
    assert!(missing.is_empty(), "the code maps (ARCHITECTURE.md, docs/testing.md) do not name: {missing:#?}");
}

/// Each file has its test below, so a new docs/*.md cannot go unrun.
#[test]
fn every_doc_file_has_its_test() {
    let tested: BTreeSet<&str> = TESTED.iter().copied().collect();
    let files: BTreeSet<String> = doc_files().into_iter().collect();
    let missing: Vec<&String> = files.iter().filter(|f| !tested.contains(f.as_str())).collect();
    let stale: Vec<&&str> = tested.iter().filter(|f| !files.contains(**f)).collect();
    assert!(missing.is_empty() && stale.is_empty(), "add a doc_test! for {missing:?}; remove the one for {stale:?}");
}

// ---------------------------------------------------------------------------------------------
// Running a file's blocks

/// The cluster `deploy/local/up.sh` starts, on free ports.
struct LocalCluster {
    etcd: Etcd,
    mongo: Mongo,
    master: Master,
    _workers: Vec<Worker>,
    logs: PathBuf,
}

impl LocalCluster {
    async fn start(name: &str) -> Result<Self> {
        let logs = log_dir(&format!("docs-{name}"));
        let etcd = Etcd::start(&logs).await?;
        let mongo = Mongo::start_own(&logs).await?;
        let master = Master::start(&etcd.endpoint, "/etcron", &logs, &["--mongodb-uri", &mongo.uri]).await?;
        let mut workers = Vec::new();
        for i in 1..=2 {
            let mut opts = WorkerOpts::new(&format!("local-{i}"));
            opts.session_ttl = "10s".to_owned();
            opts.labels.insert("slot".to_owned(), i.to_string());
            opts.mongodb = Some((mongo.uri.clone(), "etcron".to_owned()));
            workers.push(Worker::start(&etcd.endpoint, "/etcron", &logs, opts)?);
        }
        let cluster = Self { etcd, mongo, master, _workers: workers, logs };
        cluster.wait_workers(2).await?;
        // up.sh's demo job, as up.sh creates it.
        let resp = reqwest::Client::new()
            .put(format!("{}/api/jobs/hello", cluster.master.url))
            .header("content-type", "application/json")
            .body(demo_job_spec()?)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("creating up.sh's demo job: {} {}", resp.status(), resp.text().await?);
        }
        Ok(cluster)
    }

    async fn wait_workers(&self, n: usize) -> Result<()> {
        let url = format!("{}/api/workers", self.master.url);
        etcron_tests::wait_for(Duration::from_secs(30), &format!("{n} registered workers"), || {
            let url = url.clone();
            async move {
                let v: serde_json::Value = reqwest::get(url).await.ok()?.json().await.ok()?;
                (v["workers"].as_array()?.len() == n).then_some(())
            }
        })
        .await
    }

    /// The environment of every block: what the docs tell the reader to set, for this cluster.
    fn env(&self) -> Vec<(String, String)> {
        let path = format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default());
        vec![
            ("PATH".to_owned(), path),
            ("ETCRON_SERVER".to_owned(), self.master.url.clone()),
            ("ETCDCTL_API".to_owned(), "3".to_owned()),
            ("ETCDCTL_ENDPOINTS".to_owned(), self.etcd.endpoint.clone()),
            ("ETCRON_ETCD_ENDPOINTS".to_owned(), self.etcd.endpoint.clone()),
            ("ETCRON_MONGODB_URI".to_owned(), self.mongo.uri.clone()),
        ]
    }
}

/// The spec `deploy/local/up.sh` gives its demo job `hello`: the `-d '...'` of its `PUT`.
fn demo_job_spec() -> Result<String> {
    let up = std::fs::read_to_string(root().join("deploy/local/up.sh"))?;
    let put = up.split("/api/jobs/hello").nth(1).context("up.sh creates no job hello")?;
    let body = put.split("-d '").nth(1).and_then(|b| b.split('\'').next()).context("the -d '...' of hello")?;
    Ok(body.to_owned())
}

/// Runs in bash around each block: restores what the earlier blocks left, runs the block
/// (`set -euo pipefail`), then saves variables, exports and the directory for the next one.
const WRAPPER: &str = r#"
__etcron_base=" $(compgen -v | tr '\n' ' ') "
__etcron_save() {
    {
        export -p | grep -vE '^declare -x (PWD|OLDPWD|SHLVL|_|__ETCRON_[A-Z]*)(=|$)'
        for __etcron_v in $(compgen -v); do
            case "$__etcron_base" in *" $__etcron_v "*) continue ;; esac
            case "$__etcron_v" in __etcron_*|BASH_*|FUNCNAME|PIPESTATUS|LINENO|RANDOM|SECONDS) continue ;; esac
            declare -p "$__etcron_v" 2>/dev/null || true
        done
        printf 'cd %q\n' "$PWD"
    } >"$__ETCRON_STATE.next"
}
if [ -f "$__ETCRON_STATE" ]; then . "$__ETCRON_STATE"; fi
trap __etcron_save EXIT
set -euo pipefail
. "$__ETCRON_BLOCK"
"#;

struct Outcome {
    ok: bool,
    why: String,
    stdout: String,
    stderr: String,
    took: Duration,
}

async fn run_block(code: &str, n: usize, work: &Path, scripts: &Path, env: &[(String, String)]) -> Result<Outcome> {
    let block = scripts.join(format!("block-{n}.sh"));
    std::fs::write(&block, code)?;
    let wrapper = scripts.join("wrapper.sh");
    std::fs::write(&wrapper, WRAPPER)?;
    let state = scripts.join("state.sh");
    let (out_path, err_path) = (scripts.join(format!("block-{n}.out")), scripts.join(format!("block-{n}.err")));
    let mut cmd = Command::new("bash");
    cmd.arg(&wrapper).current_dir(work).env("__ETCRON_STATE", &state).env("__ETCRON_BLOCK", &block);
    // Only what the docs say to set: nothing of this process's own etcron settings.
    for (k, _) in std::env::vars() {
        if k.starts_with("ETCRON_") || k.starts_with("ETCDCTL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(Stdio::null()).stdout(std::fs::File::create(&out_path)?).stderr(std::fs::File::create(&err_path)?);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let started = Instant::now();
    let mut child = cmd.spawn().context("spawning bash")?;
    let group = Pid::from_raw(i32::try_from(child.id())?);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > BLOCK_TIMEOUT {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = started.elapsed();
    // Whatever the block left running in the background (a worker it started) goes with it.
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while killpg(group, None).is_ok() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.wait();
    let next = state.with_extension("sh.next");
    if next.exists() {
        std::fs::rename(&next, &state)?;
    }
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let (ok, why) = match status {
        None => (false, format!("did not finish within {BLOCK_TIMEOUT:?}")),
        Some(s) if !s.success() => (false, format!("exited with {s}")),
        Some(_) if stdout.contains(r#"{"error":{"code":"#) => (false, "printed an API error".to_owned()),
        Some(_) => (true, String::new()),
    };
    Ok(Outcome { ok, why, stdout, stderr, took })
}

/// Runs every runnable block of `file`, in order, against a cluster of its own.
async fn run_doc(file: &str) -> Result<()> {
    let text = read_doc(file);
    let blocks: Vec<Block> = blocks(&text)?.into_iter().filter(Block::runs).collect();
    if blocks.is_empty() {
        eprintln!("{file}: no shell block runs");
        return Ok(());
    }
    let name: String =
        file.trim_end_matches(".md").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let started = Instant::now();
    let cluster = LocalCluster::start(&name).await?;
    eprintln!("{file}: cluster up in {:.1}s (logs in {})", started.elapsed().as_secs_f64(), cluster.logs.display());
    let work = tempfile::tempdir()?;
    let scripts = tempfile::tempdir()?;
    let env = cluster.env();
    for (n, b) in blocks.iter().enumerate() {
        let o = run_block(&b.code, n, work.path(), scripts.path(), &env).await?;
        eprintln!("{file}:{}: {} in {:.1}s", b.line, if o.ok { "ok" } else { "FAILED" }, o.took.as_secs_f64());
        if o.ok {
            // Shown with --nocapture, to read what a reader would see.
            for l in o.stdout.lines().chain(o.stderr.lines()) {
                eprintln!("    | {l}");
            }
        }
        if !o.ok {
            let mut report = format!("{file}:{}: the ```{} block {}\n", b.line, b.lang, o.why);
            let _ =
                write!(report, "--- block ---\n{}--- stdout ---\n{}\n--- stderr ---\n{}", b.code, o.stdout, o.stderr);
            let _ = write!(report, "\n(process logs of the cluster: {})", cluster.logs.display());
            bail!(report);
        }
    }
    eprintln!("{file}: {} blocks ran in {:.1}s", blocks.len(), started.elapsed().as_secs_f64());
    Ok(())
}

/// One test per file (they run in parallel, each with its own cluster); [`TESTED`] lists them.
macro_rules! doc_tests {
    ($($test:ident => $file:literal),* $(,)?) => {
        const TESTED: &[&str] = &[$($file),*];
        $(
            #[tokio::test(flavor = "multi_thread")]
            async fn $test() -> Result<()> {
                run_doc($file).await
            }
        )*
    };
}

doc_tests! {
    readme => "README.md",
    api => "docs/api.md",
    benchmarks_history => "docs/benchmarks-history.md",
    configuration => "docs/configuration.md",
    console => "docs/console.md",
    etcronctl => "docs/etcronctl.md",
    job_spec => "docs/job-spec.md",
    metrics => "docs/metrics.md",
    notifications => "docs/notifications.md",
    operations => "docs/operations.md",
    records => "docs/records.md",
    sdk => "docs/sdk.md",
    security => "docs/security.md",
    sizing => "docs/sizing.md",
    testing => "docs/testing.md",
}
