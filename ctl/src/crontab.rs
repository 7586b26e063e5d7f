//! crontab(5) files as etcron jobs, for `import --crontab`: pure, text in, job specs out, each
//! problem named by its line.
//!
//! The rules (docs/etcronctl.md, "Importing a crontab"):
//! - a job line is 5 schedule fields (or `@yearly`, `@annually`, `@monthly`, `@weekly`,
//!   `@daily`, `@midnight`, `@hourly`), with `--system` a user, then the command; etcron reads
//!   those schedules as cron does, so they are kept as written;
//! - `@reboot` lines are skipped with a warning: etcron has no "when the machine boots";
//! - `NAME=value` lines (quotes around the value are dropped, as cron does) set the `env` of the
//!   jobs after them; `CRON_TZ` sets their `timezone`, `TZ` too (and stays in their env, as
//!   cron passes it on); `MAILTO`/`MAILFROM` are dropped with a warning (etcron keeps every
//!   output; notifications are webhooks), `SHELL` too (etcron runs `/bin/sh -c`);
//! - comment lines right above a job line are its `description`; a blank line or a `NAME=value`
//!   line in between drops them;
//! - `\%` in a command is a `%`; a bare `%` (cron's newline and standard input) is refused;
//! - each job is named after its program and a hash of its line (schedule, user, command as
//!   written): `backup-sh-1a2b3c4d`, the same on every import, so importing again is
//!   `unchanged`, and a changed schedule or command is a new job;
//! - every job gets the label `imported-from: crontab`; with `--system` the user column is the
//!   task's `user` (workers must list it in `run_as_users`) and the label `crontab-user`;
//! - a `# etcron: name=NAME` comment right above a job line names its job instead;
//! - the crontab's source (its absolute path, or `--source`) owns its jobs (`managed-by`), so an
//!   import replaces what the source made before: the jobs of lines it no longer has are deleted.

use std::collections::BTreeMap;

use etcron_model::spec::{JobSpec, MAX_DESCRIPTION_LEN};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The label every imported job carries.
pub const IMPORTED_FROM: (&str, &str) = ("imported-from", "crontab");
/// The label holding a system crontab's user column.
pub const USER_LABEL: &str = "crontab-user";
/// The schedule macros of crontab(5), all of which etcron reads the same way.
const MACROS: [&str; 7] = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];
/// The longest program part of a generated name.
const MAX_SLUG: usize = 40;

/// How a crontab is read.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `/etc/crontab` and `/etc/cron.d/*`: a user column between the schedule and the command.
    pub system: bool,
    /// The timezone of jobs before any `CRON_TZ`/`TZ` line (etcron's default, UTC, when none).
    pub timezone: Option<String>,
    /// The team every job belongs to (`--team`): what a token with a role on teams only needs.
    pub team: Option<String>,
    /// What the crontab is (`--source`): by default its path, made absolute; standard input has
    /// none. The source owns the jobs it made (their `managed-by` label): importing it again
    /// deletes the jobs of lines it no longer has.
    pub source: Option<String>,
}

/// One job line, as a job.
#[derive(Debug, Clone, PartialEq)]
pub struct CronJob {
    pub name: String,
    /// 1-based.
    pub line: usize,
    /// The spec to `PUT`.
    pub spec: Value,
}

/// A problem of one line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

/// The jobs of a crontab and what was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Crontab {
    pub jobs: Vec<CronJob>,
    /// `line N: ...` notes about what was skipped or dropped.
    pub warnings: Vec<String>,
}

/// Reads a crontab; every problem is reported, each with its line.
pub fn parse(text: &str, options: &Options) -> Result<Crontab, Vec<LineError>> {
    let mut out = Crontab::default();
    let mut errors = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut timezone = options.timezone.clone();
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    let mut unzoned = None;
    let mut users = std::collections::BTreeSet::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r').trim();
        if line.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            comment.push(c.strip_prefix(' ').unwrap_or(c).trim_end().to_owned());
            continue;
        }
        if let Some((name, value)) = assignment(line) {
            comment.clear();
            match setting(&name, &value, &mut env, &mut timezone, options.timezone.as_ref()) {
                Ok(None) => {}
                Ok(Some(warning)) => out.warnings.push(format!("line {n}: {warning}")),
                Err(message) => errors.push(LineError { line: n, message }),
            }
            continue;
        }
        let JobLine { given, description, entry, command } = match job_line(line, options.system, &mut comment) {
            Ok(Some(read)) => read,
            Ok(None) => {
                out.warnings.push(format!(
                    "line {n}: @reboot is skipped: etcron runs jobs on schedules, not when a machine boots (start it \
                     from that machine's init system)"
                ));
                continue;
            }
            Err(message) => {
                errors.push(LineError { line: n, message });
                continue;
            }
        };
        let name = given.unwrap_or_else(|| job_name(&entry.schedule, entry.user.as_deref(), &entry.command));
        if let Some(first) = named.insert(name.clone(), n) {
            errors.push(LineError {
                line: n,
                message: format!(
                    "repeats line {first} (the same schedule and command): cron would run it twice, etcron imports \
                     a line as one job; remove one"
                ),
            });
            continue;
        }
        users.extend(entry.user.clone());
        if timezone.is_none() {
            unzoned = unzoned.or(Some(n));
        }
        let spec = spec_of(&entry, (&command, &env), (timezone.as_deref(), &description), options.team.as_deref());
        if let Err(e) = JobSpec::from_value(spec.clone()) {
            errors.push(LineError { line: n, message: e.to_string() });
            continue;
        }
        out.jobs.push(CronJob { name, line: n, spec });
    }
    out.warnings.extend(whole_file_warnings(&users, unzoned));
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// `NAME = value` (`NAME` as a shell variable name, spaces around `=` allowed): the name and
/// the value without surrounding blanks and, when it is wholly quoted, without its quotes.
fn assignment(line: &str) -> Option<(String, String)> {
    let name_len = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(line.len());
    let name = &line[..name_len];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let value = line[name_len..].trim_start().strip_prefix('=')?.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)).filter(|_| value.len() >= 2));
    Some((name.to_owned(), unquoted.unwrap_or(value).to_owned()))
}

/// Applies a `NAME=value` line: a warning when it is dropped, an error when it cannot be used.
/// An empty `CRON_TZ`/`TZ` is the machine's local time again: `default` (`--timezone`).
fn setting(
    name: &str,
    value: &str,
    env: &mut BTreeMap<String, String>,
    timezone: &mut Option<String>,
    default: Option<&String>,
) -> Result<Option<String>, String> {
    let zone = |tz: &mut Option<String>| -> Result<(), String> {
        if value.is_empty() {
            *tz = default.cloned();
            return Ok(());
        }
        etcron_model::schedule::parse_timezone(value).map_err(|e| format!("{name}: {e}"))?;
        *tz = Some(value.to_owned());
        Ok(())
    };
    match name {
        "CRON_TZ" => zone(timezone).map(|()| None),
        "TZ" => {
            zone(timezone)?;
            env.insert(name.to_owned(), value.to_owned());
            Ok(None)
        }
        "MAILTO" | "MAILFROM" if value.is_empty() => Ok(None),
        "MAILTO" | "MAILFROM" => Ok(Some(format!(
            "{name} is dropped: etcron sends no mail (every output is in the execution records; webhooks notify: \
             see notify in the job spec)"
        ))),
        "SHELL" if value == "/bin/sh" => Ok(None),
        "SHELL" => Ok(Some(format!("SHELL={value} is dropped: etcron runs every command with /bin/sh -c"))),
        _ if name.starts_with("ETCRON_") => {
            Err(format!("{name}: the ETCRON_ prefix is reserved for the variables etcron sets"))
        }
        _ => {
            env.insert(name.to_owned(), value.to_owned());
            Ok(None)
        }
    }
}

/// A job line as read, with what the comment above it says.
struct JobLine {
    /// Its `# etcron: name=NAME`.
    given: Option<String>,
    description: String,
    entry: Entry,
    /// Its command with `\%` read.
    command: String,
}

/// Reads a job line and the comment above it (taken); `None` for `@reboot`.
fn job_line(line: &str, system: bool, comment: &mut Vec<String>) -> Result<Option<JobLine>, String> {
    let mut above = std::mem::take(comment);
    let given = given_name(&mut above)?;
    let description = describe(&above);
    let Some(entry) = entry(line, system)? else { return Ok(None) };
    let command = unescape(&entry.command)?;
    Ok(Some(JobLine { given, description, entry, command }))
}

/// The name a `# etcron: name=NAME` comment above a job gives it (taken out of the comment, so
/// not in the description); an invalid name is the line's error.
fn given_name(comment: &mut Vec<String>) -> Result<Option<String>, String> {
    let Some(at) = comment.iter().position(|c| c.trim_start().starts_with("etcron:")) else { return Ok(None) };
    let directive = comment.remove(at);
    let rest = directive.trim_start().trim_start_matches("etcron:").trim();
    let Some(name) = rest.strip_prefix("name=") else {
        return Err(format!("the comment {directive:?} above it: the one etcron directive is `# etcron: name=NAME`"));
    };
    let name = name.trim();
    etcron_model::spec::validate_name(name).map_err(|e| format!("# etcron: name={name}: {e}"))?;
    Ok(Some(name.to_owned()))
}

/// The comment lines above a job as its description: blank lines at either end dropped, and
/// when too long, the lines nearest the job that fit.
fn describe(lines: &[String]) -> String {
    let mut lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let mut text = lines.join("\n");
    while text.len() > MAX_DESCRIPTION_LEN && lines.len() > 1 {
        lines.remove(0);
        text = lines.join("\n");
    }
    text.truncate(etcron_model::output::char_floor(&text, MAX_DESCRIPTION_LEN));
    text
}

/// What holds for the whole file: its jobs run as users (`users`), or in UTC where cron would
/// read local time (`unzoned`: the first such line).
fn whole_file_warnings(users: &std::collections::BTreeSet<String>, unzoned: Option<usize>) -> Vec<String> {
    let mut warnings = Vec::new();
    if !users.is_empty() {
        let users: Vec<&str> = users.iter().map(String::as_str).collect();
        warnings.push(format!(
            "jobs run as their crontab user ({}): only workers running as root with these users in run_as_users \
             run them",
            users.join(", ")
        ));
    }
    if let Some(n) = unzoned {
        warnings.push(format!(
            "line {n}: schedules without CRON_TZ are read in UTC here, while cron reads them in its machine's local \
             time: give --timezone (or a CRON_TZ line) unless that machine runs in UTC"
        ));
    }
    warnings
}

/// The job spec of one crontab line: its schedule and command, with the environment and time
/// zone set above it, the comment above it as its description, labels saying where it came
/// from.
fn spec_of(
    entry: &Entry,
    (command, env): (&str, &BTreeMap<String, String>),
    (timezone, description): (Option<&str>, &str),
    team: Option<&str>,
) -> Value {
    let mut labels = Map::new();
    labels.insert(IMPORTED_FROM.0.to_owned(), json!(IMPORTED_FROM.1));
    if let Some(user) = &entry.user {
        labels.insert(USER_LABEL.to_owned(), json!(user));
    }
    let mut task = json!({"kind": "shell", "command": command});
    if let Some(user) = &entry.user {
        task["user"] = json!(user);
    }
    if !env.is_empty() {
        task["env"] = json!(env);
    }
    let mut spec = json!({"schedule": entry.schedule, "labels": labels, "task": task});
    if let Some(team) = team {
        spec["team"] = json!(team);
    }
    if let Some(tz) = timezone {
        spec["timezone"] = json!(tz);
    }
    if !description.is_empty() {
        spec["description"] = json!(description);
    }
    spec
}

/// A job line's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The macro, or the 5 fields joined by one space.
    schedule: String,
    user: Option<String>,
    /// As written (`\%` not yet read).
    command: String,
}

/// Splits a job line; `None` for `@reboot`.
fn entry(line: &str, system: bool) -> Result<Option<Entry>, String> {
    let shape = if system {
        "5 schedule fields (minute hour day-of-month month day-of-week) or a @macro, a user, and a command"
    } else {
        "5 schedule fields (minute hour day-of-month month day-of-week) or a @macro, and a command"
    };
    let (schedule, rest) = if line.starts_with('@') {
        let (word, rest) = split_word(line);
        if word.eq_ignore_ascii_case("@reboot") {
            return Ok(None);
        }
        if !MACROS.iter().any(|m| m.eq_ignore_ascii_case(word)) {
            return Err(format!("unknown schedule {word:?}: crontab's are {} and @reboot", MACROS.join(", ")));
        }
        (word.to_owned(), rest)
    } else {
        let mut fields = Vec::new();
        let mut rest = line;
        for _ in 0..5 {
            let (word, after) = split_word(rest);
            if word.is_empty() {
                return Err(format!("expected {shape}"));
            }
            fields.push(word);
            rest = after;
        }
        (fields.join(" "), rest)
    };
    let (user, command) = if system {
        let (user, after) = split_word(rest);
        (Some(user.to_owned()).filter(|u| !u.is_empty()), after)
    } else {
        (None, rest)
    };
    if (system && user.is_none()) || command.trim().is_empty() {
        return Err(format!(
            "expected {shape}; this line has no {}",
            if user.is_none() && system { "user" } else { "command" }
        ));
    }
    Ok(Some(Entry { schedule, user, command: command.trim().to_owned() }))
}

/// The first blank-separated word and the rest after the blanks that follow it.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    (&text[..end], text[end..].trim_start())
}

/// `\%` is a `%`; a bare `%` is cron's newline (the rest going to standard input): refused.
fn unescape(command: &str) -> Result<String, String> {
    let mut out = String::with_capacity(command.len());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                out.push('%');
                chars.next();
            }
            '%' => {
                return Err(
                    "the command has an unescaped % (cron turns it into a newline and sends what follows to the \
                     command's standard input): write \\% for a literal %, or give the input in the command (e.g. \
                     printf 'line\\n' | cmd)"
                        .to_owned(),
                )
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The job name of a line: a slug of its program and 8 hex digits of a SHA-256 of the schedule,
/// user and command as written, e.g. `backup-sh-1a2b3c4d`.
#[must_use]
pub fn job_name(schedule: &str, user: Option<&str>, command: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(schedule.as_bytes());
    hash.update(b"\n");
    if let Some(user) = user {
        hash.update(user.as_bytes());
        hash.update(b"\n");
    }
    hash.update(command.as_bytes());
    let digest = hash.finalize();
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", slug(program(command)))
}

/// The program a command runs: its first word after `VAR=value` assignments and `cd DIR &&`
/// (or `;`), without its directory.
fn program(command: &str) -> &str {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut i = 0;
    loop {
        match words.get(i) {
            Some(w) if assignment(w).is_some() => i += 1,
            Some(&"cd") if matches!(words.get(i + 2), Some(&"&&" | &";")) => i += 3,
            Some(&"cd") if words.get(i + 1).is_some_and(|dir| dir.len() > 1 && dir.ends_with(';')) => i += 2,
            _ => break,
        }
    }
    let word = words.get(i).copied().unwrap_or_default();
    let word = word.trim_matches(|c: char| c == '"' || c == '\'');
    word.rsplit('/').next().unwrap_or(word)
}

/// Lowercase letters and digits with `-` between runs of them, at most [`MAX_SLUG`] long;
/// `cron` when nothing is left.
fn slug(word: &str) -> String {
    let mut out = String::new();
    for c in word.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(MAX_SLUG);
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "cron".to_owned()
    } else {
        out.to_owned()
    }
}

/// `import --crontab FILE...`: reads the crontabs (`-`: standard input), prints what was left
/// out, and applies the jobs as `jobs apply` does (dry run, prune, exit codes). The only part of
/// this module that does I/O.
pub async fn import(
    client: &crate::client::Client,
    paths: &[std::path::PathBuf],
    options: &Options,
    apply: crate::apply::Options,
) -> anyhow::Result<()> {
    if let Some(team) = &options.team {
        etcron_model::spec::validate_team(team).map_err(|e| crate::exit::Usage(format!("--team: {e}")))?;
    }
    if let Some(tz) = &options.timezone {
        etcron_model::schedule::parse_timezone(tz).map_err(|e| crate::exit::Usage(format!("--timezone: {e}")))?;
    }
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut defined: BTreeMap<String, String> = BTreeMap::new();
    for path in paths {
        let label = path.display().to_string();
        let read = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin().lock())
        } else {
            std::fs::read_to_string(path)
        };
        let text = match read {
            Ok(t) => t,
            Err(e) => {
                errors.push(format!("{label}: cannot read: {e}"));
                continue;
            }
        };
        let crontab = match parse(&text, options) {
            Ok(c) => c,
            Err(lines) => {
                errors.extend(lines.into_iter().map(|e| format!("{label}: line {}: {}", e.line, e.message)));
                continue;
            }
        };
        for warning in &crontab.warnings {
            eprintln!("etcronctl: warning: {label}: {warning}");
        }
        for job in crontab.jobs {
            let at = format!("{label}: line {}", job.line);
            if let Some(first) = defined.insert(job.name.clone(), at.clone()) {
                errors.push(format!("{at}: the same schedule and command as {first}; import it once"));
                continue;
            }
            match file_job(path, &job, source_of(path, options).as_deref()) {
                Ok(fj) => files.push(fj),
                Err(e) => errors.push(format!("{at}: {e}")),
            }
        }
    }
    if !errors.is_empty() {
        return Err(crate::exit::InvalidCrontab(errors).into());
    }
    runs_as_note(client, &files).await;
    let mut apply = apply;
    if !apply.prune.prune && !apply.prune.all && files.iter().all(|f| f.managed_by.is_some()) {
        // Each source owns its jobs: a line it no longer has is a job to delete (listed in the
        // plan, deleted by the import), within that source only.
        apply.prune.prune = true;
    } else if files.iter().any(|f| f.managed_by.is_none()) {
        eprintln!("etcronctl: note: a crontab from standard input has no source: give --source NAME so that importing it again replaces these jobs (the jobs of lines it no longer has are deleted)");
    }
    crate::apply::apply_jobs(client, files, apply).await
}

/// What owns the jobs of the crontab at `path`: `--source`, else the path made absolute;
/// `None` for standard input without `--source`.
fn source_of(path: &std::path::Path, options: &Options) -> Option<String> {
    if let Some(source) = &options.source {
        return Some(source.clone());
    }
    (path.as_os_str() != "-")
        .then(|| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string())
}

/// Says who the imported commands will run as, which a crontab left to the account it
/// belonged to: `task.user` where a system crontab named one, otherwise whatever the live
/// workers run tasks as (`uid per team 70000-70999 on local-1, local-2 (the worker process runs
/// as root (uid 0))`). On stderr, before the plan; nothing when no worker is live.
async fn runs_as_note(client: &crate::client::Client, files: &[crate::jobfile::FileJob]) {
    let without_user = files.iter().filter(|f| f.normalized["task"]["user"].is_null()).count();
    if without_user == 0 {
        return;
    }
    let list = match client.get("/api/workers").await {
        Ok(list) => list,
        // No master there (unreachable, or something else answered): said once, by the plan's
        // own listing.
        Err(e) if crate::exit::Exit::of(&e) == crate::exit::Exit::Unreachable => return,
        Err(e) => {
            eprintln!(
                "etcronctl: note: who the commands will run as cannot be said: the workers cannot be read ({e:#})"
            );
            return;
        }
    };
    let workers: Vec<etcron_model::stored::WorkerInfo> = list["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| serde_json::from_value(w.clone()).ok())
        .collect();
    for line in etcron_model::stored::runs_as_lines(&workers) {
        eprintln!("etcronctl: note: {without_user} imported job(s) name no user; their commands run as {line}");
    }
}

/// A crontab's job as `apply` takes it: read through the job-file reader (as a one-job JSON
/// file), then named after the crontab it comes from.
fn file_job(path: &std::path::Path, job: &CronJob, source: Option<&str>) -> Result<crate::jobfile::FileJob, String> {
    let mut doc = json!({ "jobs": { job.name.clone(): job.spec } });
    if let Some(source) = source {
        doc["managed_by"] = json!(source);
    }
    let text = doc.to_string();
    let mut read = crate::jobfile::parse(std::path::Path::new("crontab.json"), &text).map_err(|e| e.message)?;
    match read.pop() {
        Some(Ok(mut fj)) if read.is_empty() => {
            fj.file = path.to_path_buf();
            Ok(fj)
        }
        Some(Err(e)) => Err(e.to_string()),
        _ => Err("not one job".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn jobs(text: &str) -> Crontab {
        parse(text, &Options::default()).unwrap()
    }

    fn errors(text: &str, options: &Options) -> Vec<(usize, String)> {
        parse(text, options).unwrap_err().into_iter().map(|e| (e.line, e.message)).collect()
    }

    const CRONTAB: &str = "\
# Edit this file to introduce tasks to be run by cron.

MAILTO=ops@example.com
PATH=/usr/local/bin:/usr/bin:/bin
CRON_TZ=Europe/Berlin
# Nightly backup of the database
# (keeps 7 days)
30 2 * * * /usr/local/bin/backup.sh --all
BACKUP_DIR = \"/srv/backup\"

# Weekly report
@weekly  cd /srv/reports && ./weekly-report.py > /dev/null 2>&1
@reboot /usr/local/bin/start-agent
*/5 9-17 * * mon-fri date +\\%F >> /tmp/stamps
";

    #[test]
    fn a_crontab_becomes_jobs() {
        let c = jobs(CRONTAB);
        assert_eq!(c.jobs.len(), 3, "{c:?}");
        let backup = &c.jobs[0];
        assert_eq!(backup.line, 8);
        assert!(
            backup.name.starts_with("backup-sh-") && backup.name.len() == "backup-sh-".len() + 8,
            "{}",
            backup.name
        );
        assert_eq!(
            backup.spec,
            json!({"schedule": "30 2 * * *", "timezone": "Europe/Berlin",
                   "description": "Nightly backup of the database\n(keeps 7 days)",
                   "labels": {"imported-from": "crontab"},
                   "task": {"kind": "shell", "command": "/usr/local/bin/backup.sh --all",
                            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"}}})
        );
        let report = &c.jobs[1];
        assert!(report.name.starts_with("weekly-report-py-"), "{}", report.name);
        assert_eq!(report.spec["schedule"], "@weekly");
        assert_eq!(report.spec["description"], "Weekly report");
        assert_eq!(report.spec["task"]["command"], "cd /srv/reports && ./weekly-report.py > /dev/null 2>&1");
        assert_eq!(report.spec["task"]["env"]["BACKUP_DIR"], "/srv/backup", "quotes dropped, env carries on");
        // The comment above @reboot does not reach the next job; \% is a %.
        let stamps = &c.jobs[2];
        assert_eq!(stamps.spec["schedule"], "*/5 9-17 * * mon-fri");
        assert_eq!(stamps.spec["task"]["command"], "date +%F >> /tmp/stamps");
        assert!(stamps.spec.get("description").is_none());
        assert!(stamps.name.starts_with("date-"), "{}", stamps.name);
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("line 3: MAILTO is dropped"), "{:?}", c.warnings);
        assert!(c.warnings[1].starts_with("line 13: @reboot is skipped"), "{:?}", c.warnings);
        // The same text, the same names: importing again is unchanged.
        assert_eq!(jobs(CRONTAB), c);
    }

    #[test]
    fn names_follow_the_line_not_its_place() {
        let a = jobs("0 3 * * * backup.sh\n");
        let b = jobs("# moved down, reindented\nFOO=1\n\n0   3 * *  * backup.sh   \n");
        assert_eq!(a.jobs[0].name, b.jobs[0].name, "blanks and surroundings do not count");
        let c = jobs("0 4 * * * backup.sh\n");
        assert_ne!(a.jobs[0].name, c.jobs[0].name, "another schedule is another job");
        let sys = parse("0 3 * * * root backup.sh\n", &Options { system: true, ..Options::default() }).unwrap();
        assert_ne!(sys.jobs[0].name, a.jobs[0].name);
        assert_eq!(sys.jobs[0].spec["labels"]["crontab-user"], "root");
        assert_eq!(sys.jobs[0].spec["task"]["user"], "root", "the user column is the task's user");
        assert!(sys.warnings.iter().any(|w| w.contains("run as their crontab user (root)")), "{:?}", sys.warnings);
        assert_eq!(sys.jobs[0].spec["task"]["command"], "backup.sh");
        for n in [&a.jobs[0].name, &c.jobs[0].name, &sys.jobs[0].name] {
            etcron_model::spec::validate_name(n).unwrap();
        }
    }

    #[test]
    fn a_name_comment_names_the_job_and_stays_out_of_its_description() {
        let text = "# Nightly dump\n# etcron: name=db-dump\n0 2 * * * pg_dump db\n\n# etcron: name=Bad Name\n@hourly true\n# etcron: user=x\n@daily true\n";
        let errors = parse(text, &Options::default()).unwrap_err();
        assert_eq!(errors.iter().map(|e| e.line).collect::<Vec<_>>(), [6, 8], "{errors:?}");
        assert!(errors[0].message.starts_with("# etcron: name=Bad Name: "), "{errors:?}");
        assert!(errors[1].message.contains("the one etcron directive is `# etcron: name=NAME`"), "{errors:?}");
        let read =
            parse("# Nightly dump\n# etcron: name=db-dump\n0 2 * * * pg_dump db\n", &Options::default()).unwrap();
        assert_eq!(read.jobs[0].name, "db-dump");
        assert_eq!(read.jobs[0].spec["description"], "Nightly dump");
    }

    #[test]
    fn program_slugs() {
        assert_eq!(program("/usr/bin/env FOO=1 python3 x.py"), "env");
        assert_eq!(program("FOO=1 BAR=2 /opt/bin/Run_Me.SH arg"), "Run_Me.SH");
        assert_eq!(program("cd /srv && make all"), "make");
        assert_eq!(program("cd /srv ; ./go"), "go");
        assert_eq!(program("cd /srv; ./go"), "go");
        assert_eq!(program("'/opt/bin/x' -v"), "x");
        assert_eq!(program("dd if=/dev/zero of=/tmp/x"), "dd");
        assert_eq!(slug("Run_Me.SH"), "run-me-sh");
        assert_eq!(slug("---"), "cron");
        assert_eq!(slug(&"x".repeat(100)).len(), MAX_SLUG);
        assert_eq!(slug("a-----------------------------------------b"), "a-b");
    }

    #[test]
    fn timezones_and_settings() {
        let text = "TZ=Asia/Tokyo\n0 9 * * * a\nCRON_TZ=\nTZ=\n0 9 * * * b\n";
        let c = jobs(text);
        assert_eq!(c.jobs[0].spec["timezone"], "Asia/Tokyo");
        assert_eq!(c.jobs[0].spec["task"]["env"]["TZ"], "Asia/Tokyo", "TZ stays in the env, as cron passes it");
        assert!(c.jobs[1].spec.get("timezone").is_none(), "an empty TZ: etcron's default, UTC");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("line 5: schedules without CRON_TZ are read in UTC"), "{:?}", c.warnings);
        // With --timezone: the zone of lines before any TZ, and after an empty one; no warning.
        let c =
            parse(text, &Options { system: false, timezone: Some("Europe/Paris".into()), team: None, source: None })
                .unwrap();
        assert_eq!(c.jobs[0].spec["timezone"], "Asia/Tokyo");
        assert_eq!(c.jobs[1].spec["timezone"], "Europe/Paris");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = jobs("SHELL=/bin/sh\nMAILTO=\"\"\nSHELL=/bin/bash\n0 9 * * * a\n");
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("line 3: SHELL=/bin/bash is dropped"), "{:?}", c.warnings);
        assert!(c.jobs[0].spec["task"].get("env").is_none(), "{:?}", c.jobs[0].spec);
    }

    #[test]
    fn bad_lines_are_named_by_number() {
        let text = "\
CRON_TZ=Mars/Olympus
0 3 * * *
61 * * * * too-late
@fortnightly x
0 3 * * * echo 50%
ETCRON_X=1
not a job line
0 3 * * * a
0  3 * * * a
";
        let e = errors(text, &Options::default());
        let lines: Vec<usize> = e.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7, 9], "{e:#?}");
        assert!(e[0].1.starts_with("CRON_TZ: unknown timezone \"Mars/Olympus\""), "{e:#?}");
        assert!(e[1].1.starts_with("expected 5 schedule fields"), "{e:#?}");
        assert!(e[2].1.starts_with("schedule: "), "{e:#?}");
        assert!(e[3].1.starts_with("unknown schedule \"@fortnightly\""), "{e:#?}");
        assert!(e[4].1.contains("unescaped %"), "{e:#?}");
        assert!(e[5].1.contains("ETCRON_ prefix"), "{e:#?}");
        assert!(e[6].1.starts_with("expected 5 schedule fields"), "{e:#?}");
        assert!(e[7].1.starts_with("repeats line 8"), "{e:#?}");
        let e = errors("0 3 * * * root\n", &Options { system: true, ..Options::default() });
        assert!(e[0].1.ends_with("this line has no command"), "{e:#?}");
    }

    #[test]
    fn descriptions_keep_what_fits_nearest_the_job() {
        let long: Vec<String> = (0..200).map(|i| format!("line {i:03} {}", "x".repeat(40))).collect();
        let d = describe(&long);
        assert!(d.len() <= MAX_DESCRIPTION_LEN && d.ends_with(&long[199]), "{}", d.len());
        assert_eq!(describe(&[String::new(), "a".into(), String::new(), "b".into(), String::new()]), "a\n\nb");
    }
}
