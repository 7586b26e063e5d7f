//! `jobs edit NAME`, as `kubectl edit`: the job as a YAML job file in a temporary file, opened
//! in `$VISUAL` / `$EDITOR` (`vi` when neither is set), then saved with `If-Match: <revision
//! read>`, so an edit made meanwhile by anyone else is never overwritten (exit 4). The file is
//! read back with the job-file reader `apply` uses. An unchanged file cancels the edit; a file
//! that cannot be saved (invalid, conflict, master away) is kept and its path printed.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::apply::{diff, Difference};
use crate::client::{segment, Client};
use crate::exit::{FileError, InvalidFiles};
use crate::jobfile::{self, FileJob};
use crate::{out, print_doc};

/// The editor to run: `$VISUAL`, else `$EDITOR`, else `vi` (empty values count as unset).
#[must_use]
pub fn editor(visual: Option<String>, editor: Option<String>) -> String {
    [visual, editor]
        .into_iter()
        .flatten()
        .map(|e| e.trim().to_owned())
        .find(|e| !e.is_empty())
        .unwrap_or_else(|| "vi".to_owned())
}

/// The file the editor opens: a comment header, then the job as a YAML job file.
pub fn document(name: &str, job: &Value) -> anyhow::Result<String> {
    let mut header = format!(
        "# Edit job {name:?} below, save and quit to apply it; an unchanged or empty file cancels the\n\
         # edit. Lines starting with '#' are ignored. It is saved only if the job is still at revision\n\
         # {}, the one read: if someone changes it meanwhile, nothing is overwritten and this file is\n\
         # kept. Secret values are never shown: null keeps the stored value.\n",
        job["revision"]
    );
    if let Some(why) = job["invalid"].as_str() {
        header.push_str(&format!("#\n# The stored value is not a valid spec ({why}): fix it here.\n"));
    }
    let file = serde_norway::to_string(&crate::jobs::job_file(name, &job["spec"]))?;
    Ok(format!("{header}#\n{file}"))
}

/// The text without its comment lines and trailing blanks: what decides "unchanged" and "empty".
#[must_use]
pub fn content(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with('#')).map(str::trim_end).collect();
    lines.join("\n").trim().to_owned()
}

/// The one job of the edited file, which must be `name`.
pub fn read_back(name: &str, path: &Path, text: &str) -> Result<FileJob, InvalidFiles> {
    let whole = |message: String| FileError { file: path.to_path_buf(), job: None, field: None, message };
    let jobs = jobfile::parse(path, text).map_err(|e| InvalidFiles(vec![e]))?;
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for job in jobs {
        match job {
            Ok(j) => found.push(j),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(InvalidFiles(errors));
    }
    let names: Vec<&str> = found.iter().map(|j| j.name.as_str()).collect();
    if names != [name] {
        return Err(InvalidFiles(vec![whole(format!(
            "must define job {name:?} and only it, but defines {names:?} (to create or rename a job, use jobs apply)"
        ))]));
    }
    Ok(found.remove(0))
}

/// Creates the temporary file (only its owner may read it: it may come to hold secret values).
fn temp_file(name: &str, text: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = std::env::temp_dir();
    for _ in 0..10 {
        let path = dir.join(format!("etcronctl-edit-{name}-{:08x}.yaml", rand::random::<u32>()));
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(mut f) => {
                f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating a temporary file in {}", dir.display())),
        }
    }
    anyhow::bail!("could not create a temporary file in {}", dir.display())
}

/// Runs the editor on `path` through `sh`, so `EDITOR="code --wait"` works as in git.
fn run_editor(editor: &str, path: &Path) -> anyhow::Result<()> {
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("etcronctl-edit")
        .arg(path)
        .status()
        .with_context(|| format!("starting the editor {editor:?}"))?;
    if !status.success() {
        anyhow::bail!("the editor {editor:?} exited with {status}");
    }
    Ok(())
}

/// Says where the edit is kept and how to use it, and returns the error.
fn kept(name: &str, path: &Path, e: anyhow::Error) -> anyhow::Error {
    eprintln!(
        "etcronctl: your edit is kept in {0}: edit the job again (etcronctl jobs edit {name}), or apply the file \
         as it is (etcronctl jobs apply -f {0})",
        path.display()
    );
    e
}

pub async fn edit(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let path = format!("/api/jobs/{}", segment(name));
    let job = client.get(&path).await.with_context(|| format!("job {name:?}"))?;
    let revision = job["revision"].as_i64().context("the job the master sent has no revision")?;
    let original = document(name, &job)?;
    let file = temp_file(name, &original)?;
    let editor = editor(std::env::var("VISUAL").ok(), std::env::var("EDITOR").ok());
    let ran = run_editor(&editor, &file);
    let edited = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let unchanged = content(&edited) == content(&original);
    if let Err(e) = ran {
        if unchanged {
            let _ = std::fs::remove_file(&file);
            return Err(e.context("the job was not changed"));
        }
        return Err(kept(name, &file, e.context("the job was not changed")));
    }
    let cancelled = |why: &str| -> anyhow::Result<()> {
        let _ = std::fs::remove_file(&file);
        if json {
            return print_doc(&json!({"job": name, "edited": false, "revision": revision}));
        }
        out(&format!("edit cancelled, {why}\n"))
    };
    if unchanged {
        return cancelled("no changes made");
    }
    if content(&edited).is_empty() {
        return cancelled("the file is empty");
    }
    let fj = match read_back(name, &file, &edited) {
        Ok(fj) => fj,
        Err(e) => return Err(kept(name, &file, e.into())),
    };
    let changes = diff(&job["spec"], &fj.normalized);
    if changes.is_empty() && fj.secret_values.is_empty() && job["invalid"].is_null() {
        return cancelled("no changes made");
    }
    let headers = [("If-Match", revision.to_string())];
    let saved = match client.send(Method::PUT, &path, Some(&fj.body), &headers).await {
        Ok(reply) => reply.body,
        Err(e) => return Err(kept(name, &file, e.context(format!("saving job {name:?}")))),
    };
    let _ = std::fs::remove_file(&file);
    crate::apply::warn(name, &saved["warnings"]);
    report(name, &saved, &changes, &fj.secret_values, json)
}

/// What the edit changed.
fn report(name: &str, saved: &Value, changes: &[Difference], secrets: &[String], json: bool) -> anyhow::Result<()> {
    if json {
        let diff: Vec<Value> = changes.iter().map(|d| json!({"path": d.path, "old": d.old, "new": d.new})).collect();
        return print_doc(&json!({
            "job": name, "edited": true, "revision": saved["revision"], "diff": diff, "secrets_sent": secrets,
        }));
    }
    let mut text = format!("job {name} edited (revision {})\n", crate::table::text(&saved["revision"]));
    for d in changes {
        text.push_str(&format!("{}\n", d.render("    ")));
    }
    if !secrets.is_empty() {
        text.push_str(&format!("    (secret values sent: {})\n", secrets.join(", ")));
    }
    out(&text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn view() -> Value {
        json!({"name": "nightly", "revision": 12, "spec": {
            "schedule": "0 3 * * *", "timezone": "UTC", "enabled": true, "concurrency": "allow",
            "task": {"kind": "shell", "command": "report.sh", "secret_env": {"PW": null}}}})
    }

    #[test]
    fn the_editor_is_visual_then_editor_then_vi() {
        assert_eq!(editor(Some("nano".into()), Some("vim".into())), "nano");
        assert_eq!(editor(Some("  ".into()), Some("code --wait".into())), "code --wait");
        assert_eq!(editor(None, None), "vi");
    }

    #[test]
    fn the_document_reads_back_as_the_job_and_comments_do_not_count() {
        let doc = document("nightly", &view()).unwrap();
        assert!(doc.starts_with("# Edit job \"nightly\""), "{doc}");
        assert!(doc.contains("revision\n# 12,"), "{doc}");
        let path = Path::new("/tmp/etcronctl-edit-nightly-1.yaml");
        let job = read_back("nightly", path, &doc).unwrap();
        assert_eq!(job.body["task"]["command"], "report.sh");
        assert_eq!(job.kept_secrets, ["task.secret_env.PW"]);
        assert!(diff(&view()["spec"], &job.normalized).iter().all(|d| d.path != "task.command"));
        let mut edited = doc.replace("# Edit job", "# I read: Edit job");
        assert_eq!(content(&edited), content(&doc), "a comment changed only");
        edited = edited.replace("report.sh", "report.sh --all");
        assert_ne!(content(&edited), content(&doc));
        assert_eq!(content("# only\n#comments\n\n"), "");
    }

    #[test]
    fn the_file_must_hold_that_job_alone() {
        let path = Path::new("/tmp/x.yaml");
        let spec = "{schedule: '@daily', task: {kind: shell, command: x}}";
        let e = read_back("a", path, &format!("jobs:\n  b: {spec}\n")).unwrap_err();
        assert!(e.to_string().contains("must define job \"a\" and only it, but defines [\"b\"]"), "{e}");
        let e = read_back("a", path, &format!("jobs:\n  a: {spec}\n  b: {spec}\n")).unwrap_err();
        assert!(e.to_string().contains("defines [\"a\", \"b\"]"), "{e}");
        let e = read_back("a", path, "jobs:\n  a: {schedule: '@daily', task: {kind: shell, comand: x}}\n").unwrap_err();
        assert!(e.to_string().contains("job \"a\": task.comand: unknown field"), "{e}");
        let e = read_back("a", path, "jobs: [\n").unwrap_err();
        assert!(e.to_string().starts_with("/tmp/x.yaml: "), "{e}");
        assert!(read_back("a", path, &format!("jobs:\n  a: {spec}\n")).is_ok());
    }
}
