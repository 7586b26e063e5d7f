//! etcronctl's exit codes, all in one place, and the errors that carry one.
//!
//! Every failure reaches `main` as an `anyhow::Error`; [`Exit::of`] looks through its chain for
//! the typed errors below (an API answer, an unreachable master, an invalid job file, an
//! execution that did not succeed) and picks the code. Anything else is exit 1.

use std::fmt;
use std::path::PathBuf;

/// What the process exit code means (`etcronctl --help` lists them too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked for was done.
    Ok = 0,
    /// The master refused or failed (a 4xx/5xx not listed below).
    Failed = 1,
    /// Usage error: bad arguments (clap's own exit code, or a 400 from the master naming the
    /// argument) or an invalid job file.
    Usage = 2,
    /// The job or execution does not exist (404).
    NotFound = 3,
    /// A concurrent change: the job was edited since it was read, or already exists; or a
    /// backfill to cancel is done or cancelled already (409).
    Conflict = 4,
    /// `executions get --follow`, `logs --follow`, `jobs run --follow`: the final attempt ended
    /// in a status other than `succeeded`.
    Unsuccessful = 5,
    /// No etcron master answered at `--server`: refused, timed out, or something else answered
    /// (another server's page, a proxy's error).
    Unreachable = 6,
    /// `--dry-run`: changes are pending (as `git diff --exit-code`); 0 when there are none.
    Pending = 7,
    /// `jobs check`: stored specs that this version refuses (they would not run).
    Refused = 8,
}

/// The text `--help` shows after the commands.
pub const HELP: &str = "Exit codes:
  0  success (also: kill with nothing running, which says so)
  1  the master refused or failed the request
  2  usage error: bad arguments, an invalid job file or crontab line (nothing was changed)
  3  not found (404)
  4  conflict (409): the job changed since it was read, or already exists (or the backfill is over)
  5  executions get --follow, logs --follow, jobs run --follow: the final attempt did not succeed
  6  no etcron master answered at --server (refused, timed out, or another server answered)
  7  --dry-run: changes are pending
  8  jobs check: stored job specs this version refuses (they would not run)";

impl Exit {
    /// The code for an HTTP error status from the master.
    #[must_use]
    pub fn for_status(status: u16) -> Self {
        match status {
            400 => Exit::Usage,
            404 => Exit::NotFound,
            409 => Exit::Conflict,
            _ => Exit::Failed,
        }
    }

    /// The code for a failure: the first typed error found in its chain decides.
    #[must_use]
    pub fn of(error: &anyhow::Error) -> Self {
        for cause in error.chain() {
            if let Some(e) = cause.downcast_ref::<ApiError>() {
                // Not the API's error shape: whatever answered is not an etcron master.
                if e.code == NOT_THE_API {
                    return Exit::Unreachable;
                }
                return Exit::for_status(e.status);
            }
            if cause.is::<Unreachable>() {
                return Exit::Unreachable;
            }
            if cause.is::<InvalidFiles>() || cause.is::<InvalidCrontab>() || cause.is::<Usage>() {
                return Exit::Usage;
            }
            if let Some(e) = cause.downcast_ref::<Unsuccessful>() {
                return e.exit;
            }
        }
        Exit::Failed
    }

    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// The code of an [`ApiError`] whose body was not the API's error shape.
pub const NOT_THE_API: &str = "http_error";

/// The master could not be reached or did not answer in time.
#[derive(Debug)]
pub struct Unreachable {
    pub server: String,
    pub cause: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reach the master at {} ({}); point --server or ETCRON_SERVER at a master",
            self.server, self.cause
        )
    }
}

impl std::error::Error for Unreachable {}

/// An error answer of the API: `{"error":{"code","message","field"}}` with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub field: Option<String>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.code, self.status)?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The error in an answer body; an answer that is not the API's error shape (a proxy's
    /// page, an empty body) becomes `http_error` with the start of the body as message.
    #[must_use]
    pub fn from_body(status: u16, body: &serde_json::Value, raw: &str) -> Self {
        let e = &body["error"];
        match e["code"].as_str() {
            Some(code) => Self {
                status,
                code: code.to_owned(),
                message: e["message"].as_str().unwrap_or_default().to_owned(),
                field: e["field"].as_str().map(str::to_owned),
            },
            None => {
                let text: String = raw.trim().chars().take(200).collect();
                Self {
                    status,
                    code: NOT_THE_API.to_owned(),
                    message: if text.is_empty() { "(empty answer)".to_owned() } else { text },
                    field: None,
                }
            }
        }
    }
}

/// One problem in a job file: the file, the job and the field it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: PathBuf,
    pub job: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(job) = &self.job {
            write!(f, ": job {job:?}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Job files that cannot be applied; each problem is one line of the message.
#[derive(Debug)]
pub struct InvalidFiles(pub Vec<FileError>);

impl fmt::Display for InvalidFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for InvalidFiles {}

/// Crontab lines that cannot be imported (`import --crontab`): one `FILE: line N: why` each.
#[derive(Debug)]
pub struct InvalidCrontab(pub Vec<String>);

impl fmt::Display for InvalidCrontab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for InvalidCrontab {}

/// A usage error found after clap parsed the arguments (e.g. a bad `--server` URL).
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The command ran, but what it watched did not succeed (the line was already printed).
#[derive(Debug)]
pub struct Unsuccessful {
    pub exit: Exit,
    pub what: String,
}

impl fmt::Display for Unsuccessful {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Unsuccessful {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use anyhow::Context as _;
    use serde_json::json;

    fn api(status: u16) -> anyhow::Error {
        let body = json!({"error": {"code": "x", "message": "m", "field": null}});
        anyhow::Error::new(ApiError::from_body(status, &body, "")).context("doing it")
    }

    #[test]
    fn statuses_map_to_exit_codes() {
        assert_eq!(Exit::of(&api(400)), Exit::Usage);
        assert_eq!(Exit::of(&api(401)), Exit::Failed);
        assert_eq!(Exit::of(&api(403)), Exit::Failed);
        assert_eq!(Exit::of(&api(404)), Exit::NotFound);
        assert_eq!(Exit::of(&api(409)), Exit::Conflict);
        assert_eq!(Exit::of(&api(503)), Exit::Failed);
        assert_eq!(Exit::of(&anyhow::anyhow!("something else")), Exit::Failed);
        let page = ApiError::from_body(404, &serde_json::Value::Null, "<html>Not Found</html>");
        assert_eq!(Exit::of(&anyhow::Error::new(page).context("listing jobs")), Exit::Unreachable);
        let files = InvalidFiles(vec![FileError {
            file: "a.toml".into(),
            job: Some("j".into()),
            field: Some("task.x".into()),
            message: "unknown field".into(),
        }]);
        assert_eq!(Exit::of(&anyhow::Error::new(files).context("loading")), Exit::Usage);
        let lines = InvalidCrontab(vec!["crontab: line 3: expected 5 schedule fields".into()]);
        assert_eq!(Exit::of(&anyhow::Error::new(lines)), Exit::Usage);
        let e: anyhow::Result<()> =
            Err(Unsuccessful { exit: Exit::Unsuccessful, what: "failed".into() }).context("following");
        assert_eq!(Exit::of(&e.unwrap_err()), Exit::Unsuccessful);
        assert_eq!(
            [Exit::Ok, Exit::Failed, Exit::Usage, Exit::NotFound, Exit::Conflict].map(Exit::code),
            [0, 1, 2, 3, 4]
        );
        assert_eq!([Exit::Unsuccessful, Exit::Unreachable, Exit::Pending].map(Exit::code), [5, 6, 7]);
    }

    #[test]
    fn errors_read_as_one_line_naming_code_field_and_message() {
        let body = json!({"error": {"code": "invalid", "message": "must not be empty", "field": "task.command"}});
        let e = ApiError::from_body(400, &body, "");
        assert_eq!(e.to_string(), "invalid (400): task.command: must not be empty");
        let e = ApiError::from_body(502, &serde_json::Value::Null, "<html>Bad gateway</html>\n");
        assert_eq!(e.to_string(), "http_error (502): <html>Bad gateway</html>");
        let f = FileError {
            file: "jobs/a.yaml".into(),
            job: Some("nightly".into()),
            field: Some("task.comand".into()),
            message: "unknown field".into(),
        };
        assert_eq!(f.to_string(), "jobs/a.yaml: job \"nightly\": task.comand: unknown field");
    }
}
