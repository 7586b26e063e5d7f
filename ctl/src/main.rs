//! `etcronctl`: the operator's command line for an etcron cluster. It is a client of a master's
//! HTTP API only (it never talks to etcd or MongoDB): jobs (describe, edit), job files (apply,
//! export, import, crontabs), backfills, executions (search, watch, logs, live output),
//! notification deliveries, workers, skip calendars, resource pools and schedule previews. Output: tables, or each command's
//! document as JSON or YAML (`-o`).

mod apply;
mod backfill;
mod calendars;
mod check;
mod client;
mod crontab;
mod describe;
mod edit;
mod executions;
mod exit;
mod history;
mod jobfile;
mod jobs;
mod notifications;
mod pools;
mod sse;
mod table;
mod when;
mod workers;
mod workflows;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::client::Client;
use crate::exit::{Exit, InvalidCrontab, InvalidFiles, Unsuccessful, Usage};
use crate::jobfile::Format;
use crate::when::{Toward, When, Zone};

#[derive(Debug, Parser)]
#[command(
    name = "etcronctl",
    version,
    about = "Operate an etcron cluster through a master's HTTP API",
    after_help = exit::HELP
)]
struct Cli {
    /// The master's address: a URL, or `host:port` for plain HTTP.
    #[arg(long, global = true, env = "ETCRON_SERVER", default_value = "http://127.0.0.1:8070")]
    server: String,
    /// API token, sent as `Authorization: Bearer <token>`.
    #[arg(long, global = true, env = "ETCRON_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Output: aligned columns for people (`wide`: more of them, where a command has more),
    /// or the API's JSON (pretty-printed) for scripts, or the same document as YAML.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Time limit of each request, e.g. 30s or 2m (streams are limited only while connecting).
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// The namespace to address on a master serving several (sent as `X-Etcron-Namespace`);
    /// default: the master's own. (`ETCRON_NAMESPACE` is the servers' setting, hence the name.)
    #[arg(short = 'n', long, global = true, env = "ETCRONCTL_NAMESPACE")]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    /// Columns, more of them (`jobs ls`: labels and description).
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List, show, apply, delete, run, kill, pause, resume and backfill jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Search execution records, watch for new ones, show one with its output or stream it live.
    #[command(subcommand)]
    Executions(ExecutionsCommand),
    /// Print the output of an execution, or of a job's latest execution that ran; `--follow`
    /// streams it live (exit 5 unless the final attempt succeeded).
    Logs {
        /// An execution id (`job@tick#attempt`: it has an `@`), or a job name: its newest
        /// execution that ran (a run in progress included; skipped and missed ticks are not runs).
        #[arg(value_name = "EXECUTION|JOB")]
        target: String,
        /// Stream the output as it is produced, then the retries up to the final attempt.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Webhook deliveries (notifications and SLA alerts) newest first: when, job, event, state,
    /// target, tries, execution and how the last try ended.
    Notifications {
        /// Only this job's deliveries.
        #[arg(long)]
        job: Option<String>,
        /// Only this event.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(notifications::events()))]
        event: Option<String>,
        /// Only deliveries about this execution (`job@tick#attempt`).
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
        /// How many, newest first (the API's default is 50, at most 500).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// Whose token this is: its name, global role and role per team.
    Whoami,
    /// Live workers.
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Check a schedule before using it.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Skip calendars: dates on which the jobs naming them (`skip_calendars`) do not run.
    #[command(subcommand)]
    Calendars(CalendarsCommand),
    /// Resource pools: slots shared by the jobs naming them (`pool`), the runs holding them and
    /// the ticks waiting.
    #[command(subcommand)]
    Pools(PoolsCommand),
    /// Workflow runs: the jobs a root's run starts, step by step; the rerun of failed steps.
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Write every job into one job file, or one file per job (secret values are withheld by
    /// the API: see README).
    Export {
        /// Only these jobs (every job when none is named).
        names: Vec<String>,
        /// The file to write (its extension gives the format); stdout when absent.
        #[arg(short = 'f', long = "file", conflicts_with = "dir")]
        file: Option<PathBuf>,
        /// A directory to write one file per job into (`NAME.toml`, or --format's extension),
        /// created when missing; other files in it are left alone.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// toml, yaml or json; by default the file's extension, or toml (json with `-o json` on stdout).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Leave out the fields that hold their default value (the file says only what the job
        /// sets; importing it saves the same job).
        #[arg(long)]
        omit_defaults: bool,
    },
    /// Restore jobs from a job file or directory (`jobs apply` of it).
    Import {
        /// A job file (`-`: standard input, as `export` writes it), or a directory of them.
        #[arg(required_unless_present_any = ["file", "crontab"], conflicts_with = "crontab")]
        files: Vec<PathBuf>,
        /// The same, as `jobs apply` takes them; repeatable.
        #[arg(short = 'f', long = "file", conflicts_with = "crontab")]
        file: Vec<PathBuf>,
        /// A crontab (`-`: standard input, e.g. `crontab -l | etcronctl import --crontab -`):
        /// each job line becomes a job named after its program and line; repeatable.
        #[arg(long, value_name = "FILE")]
        crontab: Vec<PathBuf>,
        /// The crontabs are system ones (/etc/crontab, /etc/cron.d/*): a user column comes
        /// before the command (kept as the label crontab-user).
        #[arg(long, requires = "crontab")]
        system: bool,
        /// The timezone the crontab's machine runs in (cron reads schedules in local time):
        /// the jobs' timezone where no CRON_TZ line says otherwise (UTC by default).
        #[arg(long, requires = "crontab")]
        timezone: Option<String>,
        /// The team of every job the crontab makes (a token with roles on teams only can save
        /// nothing else).
        #[arg(long, requires = "crontab")]
        team: Option<String>,
        /// What the crontab is, for the `managed-by` label of its jobs (by default its path,
        /// made absolute): importing the same source again deletes the jobs of lines it no
        /// longer has. Needed to replace a crontab read from standard input.
        #[arg(long, requires = "crontab")]
        source: Option<String>,
        #[command(flatten)]
        prune: PruneArgs,
        /// Print what would change, change nothing; exit 7 when something would change.
        #[arg(long)]
        dry_run: bool,
        /// A line for every job, unchanged ones too (by default: the changes and the summary).
        #[arg(short = 'v', long)]
        verbose: bool,
    },
    /// Print a shell completion script (e.g. `etcronctl completions bash > /etc/bash_completion.d/etcronctl`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `--prune` and its scope (apply, import).
#[derive(Debug, Clone, clap::Args)]
struct PruneArgs {
    /// Also delete the server's jobs the files do not define, within a scope: `-l`, the files'
    /// `managed_by` (jobs with that managed-by label), or `--prune-all`.
    #[arg(long)]
    prune: bool,
    /// Scope of --prune: only jobs with these labels (k=v; comma-separated or repeated).
    #[arg(short = 'l', long = "selector", value_delimiter = ',', value_parser = parse_label)]
    selector: Vec<(String, String)>,
    /// Prune every job on the server that the files do not define, whoever owns it.
    #[arg(long)]
    prune_all: bool,
}

impl From<PruneArgs> for apply::PruneFlags {
    fn from(a: PruneArgs) -> Self {
        apply::PruneFlags { prune: a.prune, selector: a.selector, all: a.prune_all }
    }
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// List jobs: name, schedule, timezone, enabled, next run, last status.
    #[command(visible_alias = "list")]
    Ls {
        /// Only jobs of this team (the master lists only the jobs of the token's teams anyway).
        #[arg(long)]
        team: Option<String>,
        /// Only jobs with this label (k=v; repeat for several, all must match).
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// Only jobs in one of these states (enabled, paused, invalid) or whose last execution
        /// has one of these statuses (never = no execution yet); comma-separated.
        #[arg(long = "status", value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(jobs::LIST_STATUSES))]
        statuses: Vec<String>,
    },
    /// List the stored jobs whose spec this version refuses (they would not run), with the
    /// field and why: run the new etcronctl before upgrading. Exit 8 when any is refused.
    Check {
        /// Only jobs of this team.
        #[arg(long)]
        team: Option<String>,
    },
    /// Show one job: its state, next runs, last execution and spec; `-o yaml|json`: the job as a
    /// job file that `jobs apply -f` takes as it is.
    Get { name: String },
    /// Describe one job: its spec in short, next runs, health (state, last finished run,
    /// failures in a row), running executions and last runs.
    Describe { name: String },
    /// Edit a job in $VISUAL or $EDITOR (vi by default) as a YAML job file; saved only if nobody
    /// changed the job meanwhile (exit 4, the edited file kept).
    Edit { name: String },
    /// Create or update jobs from job files (TOML, YAML, JSON) so that the server matches them.
    Apply {
        /// A job file (`-`: standard input; a name without .toml/.yaml/.yml/.json is read by its
        /// content), or a directory of them (every *.toml, *.yaml, *.yml, *.json in it); repeatable.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        prune: PruneArgs,
        /// Print the plan (create/update/unchanged/delete, with the fields that change); change
        /// nothing; exit 7 when something would change.
        #[arg(long)]
        dry_run: bool,
        /// A line for every job, unchanged ones too (by default: the changes and the summary).
        #[arg(short = 'v', long)]
        verbose: bool,
    },
    /// Delete jobs.
    #[command(visible_alias = "delete")]
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Run a job now (prints the request and execution ids), optionally with parameters.
    Run {
        name: String,
        /// An environment variable over the spec's, `NAME=value` (repeatable; shell tasks).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// Run "as of" this time (any form of docs/etcronctl.md#times; a local time in the
        /// job's zone): `ETCRON_SCHEDULED_AT` (and the record's `scheduled_at`) is it. The run
        /// still starts now.
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        as_of: Option<When>,
        /// This run's priority (0..100) instead of the job's: it goes before runs of a lower
        /// one waiting for a pool's slots or a worker's capacity.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=100))]
        priority: Option<u8>,
        /// Follow the run: its output as it is produced and how it ended, then its retries up
        /// to the final attempt (exit 5 unless that one succeeded).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Kill the running executions of a job (or one of them).
    Kill {
        name: String,
        /// Only this execution (an id from `executions search`).
        #[arg(long)]
        execution: Option<String>,
    },
    /// Pause a job: its ticks are recorded `skipped` until resumed.
    Pause {
        name: String,
        /// Why, shown with the job everywhere and in the skipped ticks' records (at most 500
        /// characters).
        #[arg(long)]
        reason: Option<String>,
        /// End the pause by itself then: an RFC 3339 time, a duration from now (`2h`, `30m`),
        /// a date or local time in the job's zone (`08:00`: the next one).
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        until: Option<When>,
    },
    /// Resume a paused job.
    Resume { name: String },
    /// The saved versions of a job's spec (who, when, how), newest first.
    History {
        name: String,
        /// What changed: alone, the last save (the version before the current one → the
        /// current one); `FROM` (to the current version) or `FROM..TO` (revisions).
        #[arg(long, value_name = "FROM[..TO]", num_args = 0..=1, default_missing_value = history::LAST,
              value_parser = history::parse_range)]
        diff: Option<(String, Option<String>)>,
    },
    /// Save an earlier version of a job's spec again (its secrets: the stored ones).
    Rollback {
        name: String,
        /// The revision of the version to restore (from `jobs history`).
        #[arg(long, value_name = "REVISION")]
        to: i64,
        /// Only if the job is still at this revision (409 otherwise).
        #[arg(long, value_name = "REVISION")]
        if_match: Option<i64>,
    },
    /// Run a range of a job's past ticks again, each as one more attempt of its tick (paused
    /// jobs too); prints the backfill's id, state and counts. `--dry-run`: the ticks it would
    /// run, and why others are left out.
    Backfill {
        name: String,
        /// First instant of the range (included): RFC 3339, a date or local time in the job's
        /// zone (`2026-03-01`, `2026-03-01 08:00`), or a duration ago (`-3h`, `3h`).
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        from: When,
        /// Last instant of the range (included; not in the future), in the same forms; now by
        /// default.
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        to: Option<When>,
        /// missing: ticks without a successful run (the default); failed: ticks whose latest
        /// attempt ended failed, timed_out or lost; all: every tick.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(backfill::WHICH))]
        which: Option<String>,
        /// serial: one run at a time, oldest first (the default); parallel: up to --max-parallel.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(backfill::OVERLAP))]
        overlap: Option<String>,
        /// Runs at once with `--overlap parallel` (1..50; 5 by default).
        #[arg(long, value_name = "N")]
        max_parallel: Option<u32>,
        /// Refuse a range that selects more ticks than this (1..500; 100 by default).
        #[arg(long, value_name = "N")]
        max_runs: Option<u32>,
        /// Why, kept with the backfill (at most 500 characters).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// List the ticks it would run; create nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// A job's backfills, newest first; with ID, that one and each of its ticks' status.
    Backfills {
        name: String,
        /// A backfill's id (from `jobs backfill` or the list).
        id: Option<String>,
    },
    /// Cancel a backfill: no further tick is requested (a run already started finishes).
    BackfillCancel { name: String, id: String },
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process: boxing buys nothing
enum ExecutionsCommand {
    /// Search execution records, newest first.
    #[command(visible_alias = "ls")]
    Search {
        #[arg(long)]
        job: Option<String>,
        /// Only records of this team's jobs (a team token sees only its teams' anyway).
        #[arg(long)]
        team: Option<String>,
        /// Comma-separated: running, succeeded, failed, timed_out, killed, lost, skipped, missed.
        #[arg(long = "status", value_delimiter = ',')]
        statuses: Vec<String>,
        #[arg(long)]
        worker: Option<String>,
        /// schedule, manual, retry, dependency, catchup, failover or backfill.
        #[arg(long)]
        trigger: Option<String>,
        /// Scheduled at or after: RFC 3339, a duration ago (`1h`, `-30m`), or a date or local
        /// time (in --job's zone, else this machine's).
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        since: Option<When>,
        /// Scheduled at or before, in the same forms.
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        until: Option<When>,
        /// Words in the output, error or reason.
        #[arg(short = 'q', long = "query")]
        q: Option<String>,
        /// Records per page (the API's default is 50, at most 500).
        #[arg(long)]
        limit: Option<u32>,
        /// Continue from a page's `next_cursor`.
        #[arg(long, conflicts_with_all = ["all", "watch"])]
        cursor: Option<String>,
        /// Fetch every page.
        #[arg(long, conflicts_with = "watch")]
        all: bool,
        /// Print the matches, then keep polling every second and print new or changed records
        /// as they come, until Ctrl-C (`--follow`, `-f`: the same).
        #[arg(short = 'w', long, visible_alias = "follow", visible_short_alias = 'f', conflicts_with = "until")]
        watch: bool,
    },
    /// Show one execution with its output.
    Get {
        id: String,
        /// Stream the live output of a running execution until it ends; exit code 5 unless it succeeded.
        #[arg(short = 'f', long)]
        follow: bool,
    },
}

#[derive(Debug, Subcommand)]
enum WorkersCommand {
    /// List live workers: id, state (ready, cordoned, draining, drained), host, labels, teams,
    /// capacity, running, version, up since.
    #[command(visible_alias = "list")]
    Ls,
    /// Take a live worker out of the race for new runs; what runs on it goes on (global admin).
    Cordon { id: String },
    /// Cordon a live worker and report when nothing runs on it (global admin).
    Drain {
        id: String,
        /// Wait until the worker is empty, at most this long (e.g. 10m); exit 5 if it is not.
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
    },
    /// Let a worker race for new runs again (global admin).
    Uncordon { id: String },
}

#[derive(Debug, Subcommand)]
enum CalendarsCommand {
    /// Every calendar.
    Ls,
    /// One calendar with its dates and ranges.
    Get { name: String },
    /// Create or replace a calendar (admin).
    Put {
        name: String,
        /// A day to skip, YYYY-MM-DD; repeatable.
        #[arg(long = "date")]
        dates: Vec<String>,
        /// Days to skip, FROM..TO (both included); repeatable.
        #[arg(long = "range")]
        ranges: Vec<String>,
        /// IANA timezone the days are in (UTC by default).
        #[arg(long)]
        timezone: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a calendar (refused while jobs name it).
    Delete { name: String },
}

#[derive(Debug, Subcommand)]
enum PoolsCommand {
    /// Every pool: slots, slots in use, ticks waiting, the jobs naming it.
    #[command(visible_alias = "list")]
    Ls,
    /// One pool: the runs holding its slots and the ticks waiting, with priorities and ages.
    Get { name: String },
    /// Create or replace a pool (global admin).
    Put {
        name: String,
        /// How many slots the pool's runs hold at most, together (1..10000).
        #[arg(long)]
        slots: u32,
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a pool (refused while jobs name it).
    Delete { name: String },
}

#[derive(Debug, Subcommand)]
enum WorkflowsCommand {
    /// A workflow run (a record's `workflow`): each step's state, attempt, execution and end,
    /// the results of the steps that succeeded, and the edges between the jobs.
    Get { run: String },
    /// Rerun the failed steps of a workflow run (the next attempt of each); the steps that
    /// succeeded keep their results (operator on each rerun job).
    Resume { run: String },
}

#[derive(Debug, Subcommand)]
enum ScheduleCommand {
    /// The next fire times of a schedule (as the workers compute them); several expressions
    /// merge their ticks, as a job's `schedules` do.
    Preview {
        #[arg(required = true)]
        schedule: Vec<String>,
        /// IANA timezone the schedule is read in (UTC by default).
        #[arg(long)]
        timezone: Option<String>,
        /// How many fire times (1..100; 10 by default).
        #[arg(long)]
        count: Option<u32>,
        /// Fire times after this time (now by default): RFC 3339, a duration ahead (`2h`), or a
        /// date or local time in --timezone (`2026-03-08`, `2026-03-08 01:00`).
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        after: Option<When>,
        /// No fire time before this time (a job's `active_from`), in the same forms.
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        active_from: Option<When>,
        /// No fire time after this time (a job's `active_until`), in the same forms.
        #[arg(long, value_name = "TIME", value_parser = When::parse, allow_hyphen_values = true)]
        active_until: Option<When>,
        /// A job's `jitter` (e.g. 30s): fire times moved as the workers move them; needs --job.
        #[arg(long, requires = "job")]
        jitter: Option<String>,
        /// The job whose jitter to apply (the delays depend on its name).
        #[arg(long)]
        job: Option<String>,
        /// A job's skip calendar: marks the fire times it skips; repeatable.
        #[arg(long = "skip-calendar")]
        skip_calendars: Vec<String>,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| format!("{e}; e.g. 30s or 2m"))?;
    if d.is_zero() {
        return Err("must be more than 0".to_owned());
    }
    Ok(d)
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{text:?} is not k=v")),
    }
}

/// Writes to stdout; a closed pipe (`etcronctl ... | head`) ends the command quietly.
pub fn out(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// `-o`, set once before the command runs: every command prints its document (the value that
/// `-o json` shows) through [`print_doc`] and [`stream_doc`], which write it in this format.
static OUTPUT: OnceLock<Output> = OnceLock::new();

/// The `-o` of this run (`table` until it is set).
pub fn output() -> Output {
    OUTPUT.get().copied().unwrap_or(Output::Table)
}

/// `value` as `-o` asks: YAML for `-o yaml`, else JSON, pretty-printed.
fn render_doc(value: &Value, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Yaml => serde_norway::to_string(value)?,
        Output::Json | Output::Table | Output::Wide => format!("{}\n", serde_json::to_string_pretty(value)?),
    })
}

/// Prints a command's document: the API's JSON pretty-printed, or the same as YAML.
pub fn print_doc(value: &Value) -> anyhow::Result<()> {
    out(&render_doc(value, output())?)
}

/// One document of a stream (`--follow`, `--watch`): one JSON line, or with `-o yaml` a YAML
/// document opened by `---` (a YAML stream, as `kubectl get -w -o yaml` prints).
pub fn stream_doc(value: &Value) -> anyhow::Result<String> {
    Ok(match output() {
        Output::Yaml => format!("---\n{}", serde_norway::to_string(value)?),
        Output::Json | Output::Table | Output::Wide => format!("{value}\n"),
    })
}

/// The subcommands given (`etcronctl jobs apply`), never their arguments: what the master
/// keeps as the tool of a saved version.
fn command_path(matches: &clap::ArgMatches) -> String {
    let mut path = "etcronctl".to_owned();
    let mut at = matches;
    while let Some((name, sub)) = at.subcommand() {
        path.push(' ');
        path.push_str(name);
        at = sub;
    }
    path
}

async fn run(cli: Cli, command: String) -> anyhow::Result<()> {
    // `json`: print the command's document (JSON or YAML as `-o` says) instead of a table.
    let json = matches!(cli.output, Output::Json | Output::Yaml);
    let _ = OUTPUT.set(cli.output);
    if let Command::Completions { shell } = cli.command {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "etcronctl", &mut buf);
        return out(&String::from_utf8_lossy(&buf));
    }
    let client =
        Client::new(&cli.server, cli.token.clone(), cli.timeout)?.with_note(command).with_namespace(cli.namespace)?;
    match cli.command {
        Command::Jobs(cmd) => jobs_command(&client, cmd, json).await,
        Command::Executions(cmd) => executions_command(&client, cmd, json).await,
        Command::Logs { target, follow } => {
            executions::logs(&client, &executions::LogsTarget::parse(&target)?, follow, json).await
        }
        Command::Notifications { job, event, execution, limit } => {
            notifications::list(&client, &notifications::Filters { job, execution, event, limit }, json).await
        }
        Command::Whoami => jobs::whoami(&client, json).await,
        Command::Workers(WorkersCommand::Ls) => workers::list(&client, json).await,
        Command::Workers(WorkersCommand::Cordon { id }) => workers::cordon(&client, &id, false, None, json).await,
        Command::Workers(WorkersCommand::Drain { id, wait }) => workers::cordon(&client, &id, true, wait, json).await,
        Command::Workers(WorkersCommand::Uncordon { id }) => workers::uncordon(&client, &id, json).await,
        Command::Calendars(CalendarsCommand::Ls) => calendars::list(&client, json).await,
        Command::Calendars(CalendarsCommand::Get { name }) => calendars::get(&client, &name, json).await,
        Command::Calendars(CalendarsCommand::Put { name, dates, ranges, timezone, description }) => {
            let args = calendars::CalendarArgs { timezone, dates, ranges, description };
            calendars::put(&client, &name, args, json).await
        }
        Command::Calendars(CalendarsCommand::Delete { name }) => calendars::delete(&client, &name).await,
        Command::Pools(PoolsCommand::Ls) => pools::list(&client, json).await,
        Command::Pools(PoolsCommand::Get { name }) => pools::get(&client, &name, json).await,
        Command::Pools(PoolsCommand::Put { name, slots, description }) => {
            pools::put(&client, &name, slots, description, json).await
        }
        Command::Pools(PoolsCommand::Delete { name }) => pools::delete(&client, &name).await,
        Command::Workflows(WorkflowsCommand::Get { run }) => workflows::get(&client, &run, json).await,
        Command::Workflows(WorkflowsCommand::Resume { run }) => workflows::resume(&client, &run, json).await,
        Command::Schedule(ScheduleCommand::Preview {
            schedule,
            timezone,
            count,
            after,
            active_from,
            active_until,
            jitter,
            job,
            skip_calendars,
        }) => {
            let zone =
                Zone::named(timezone.as_deref().unwrap_or("UTC")).map_err(|e| Usage(format!("--timezone: {e}")))?;
            let future = |arg: &str, w: Option<When>| zone.resolve_opt(arg, w, Toward::Future);
            let (after, active_from, active_until) = (
                future("--after", after)?,
                future("--active-from", active_from)?,
                future("--active-until", active_until)?,
            );
            let options =
                jobs::PreviewOptions { timezone, count, after, active_from, active_until, jitter, job, skip_calendars };
            jobs::preview(&client, &schedule, options, json).await
        }
        Command::Export { names, file, dir, format, omit_defaults } => {
            jobs::export(&client, &names, &jobs::ExportTo::of(file, dir), (format, omit_defaults), json).await
        }
        Command::Import { mut files, file, crontab, system, timezone, team, source, prune, dry_run, verbose } => {
            let options = apply::Options { prune: prune.into(), dry_run, json, verbose };
            if !crontab.is_empty() {
                let read = crontab::Options { system, timezone, team, source };
                return crontab::import(&client, &crontab, &read, options).await;
            }
            files.extend(file);
            apply::apply(&client, &files, options).await
        }
        Command::Completions { .. } => Ok(()),
    }
}

/// `etcronctl jobs …`.
async fn jobs_command(client: &Client, cmd: JobsCommand, json: bool) -> anyhow::Result<()> {
    match cmd {
        JobsCommand::Ls { team, labels, statuses } => {
            jobs::ls(client, (team.as_deref(), &labels, &statuses), json).await
        }
        JobsCommand::Check { team } => check::check(client, team.as_deref(), json).await,
        JobsCommand::Get { name } => jobs::get(client, &name, json).await,
        JobsCommand::Describe { name } => describe::describe(client, &name, json).await,
        JobsCommand::Edit { name } => edit::edit(client, &name, json).await,
        JobsCommand::Apply { files, prune, dry_run, verbose } => {
            apply::apply(client, &files, apply::Options { prune: prune.into(), dry_run, json, verbose }).await
        }
        JobsCommand::Rm { names } => jobs::rm(client, &names, json).await,
        JobsCommand::Run { name, env, as_of, priority, follow } => {
            let zone = Zone::of_job(client, &name, &[as_of]).await?;
            let as_of = zone.resolve_opt("--as-of", as_of, Toward::Past)?;
            let params = jobs::run_params(&env, as_of.as_deref(), priority)?;
            jobs::run(client, &name, params.as_ref(), follow, json).await
        }
        JobsCommand::Kill { name, execution } => jobs::kill(client, &name, execution, json).await,
        JobsCommand::Pause { name, reason, until } => {
            let until = Zone::of_job(client, &name, &[until]).await?.resolve_opt("--until", until, Toward::Future)?;
            jobs::pause(client, &name, reason.as_deref(), until.as_deref(), json).await
        }
        JobsCommand::Resume { name } => jobs::resume(client, &name, json).await,
        JobsCommand::History { name, diff } => history::history(client, &name, diff, json).await,
        JobsCommand::Rollback { name, to, if_match } => history::rollback(client, &name, to, if_match, json).await,
        JobsCommand::Backfill { name, from, to, which, overlap, max_parallel, max_runs, reason, dry_run } => {
            let zone = Zone::of_job(client, &name, &[Some(from), to]).await?;
            let from = zone.resolve("--from", from, Toward::Past)?;
            let to = zone.resolve("--to", to.unwrap_or(When::Now), Toward::Past)?;
            let request = backfill::Request { from, to, which, overlap, max_parallel, max_runs, reason, dry_run };
            backfill::backfill(client, &name, &request, json).await
        }
        JobsCommand::Backfills { name, id } => backfill::list(client, &name, id.as_deref(), json).await,
        JobsCommand::BackfillCancel { name, id } => backfill::cancel(client, &name, &id, json).await,
    }
}

/// `etcronctl executions …`.
async fn executions_command(client: &Client, cmd: ExecutionsCommand, json: bool) -> anyhow::Result<()> {
    match cmd {
        ExecutionsCommand::Search {
            job,
            team,
            statuses,
            worker,
            trigger,
            since,
            until,
            q,
            limit,
            cursor,
            all,
            watch,
        } => {
            let zone = match &job {
                Some(name) => Zone::of_job(client, name, &[since, until]).await?,
                None => Zone::Machine,
            };
            let (since, until) =
                (zone.resolve_opt("--since", since, Toward::Past)?, zone.resolve_opt("--until", until, Toward::Past)?);
            let filters = executions::Filters { job, team, statuses, worker, trigger, since, until, q, limit };
            if watch {
                executions::follow(client, &filters, json).await
            } else {
                executions::search(client, &filters, cursor, all, json).await
            }
        }
        ExecutionsCommand::Get { id, follow: true } => executions::stream(client, &id, json).await,
        ExecutionsCommand::Get { id, follow: false } => executions::get(client, &id, json).await,
    }
}

/// Prints a failure as one line per problem: `etcronctl: <what>: <why>`.
fn report(e: &anyhow::Error) {
    if let Some(files) = e.chain().find_map(|c| c.downcast_ref::<InvalidFiles>()) {
        for f in &files.0 {
            eprintln!("etcronctl: invalid job file: {f}");
        }
        return;
    }
    if let Some(lines) = e.chain().find_map(|c| c.downcast_ref::<InvalidCrontab>()) {
        for line in &lines.0 {
            eprintln!("etcronctl: invalid crontab: {line}");
        }
        return;
    }
    if e.chain().any(|c| c.is::<Unsuccessful>()) {
        // The command printed how the execution ended.
        return;
    }
    eprintln!("etcronctl: {e:#}");
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let command = command_path(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("etcronctl: starting the async runtime: {e}");
            return ExitCode::from(Exit::Failed.code());
        }
    };
    match runtime.block_on(run(cli, command)) {
        Ok(()) => ExitCode::from(Exit::Ok.code()),
        Err(e) if broken_pipe(&e) => ExitCode::from(Exit::Ok.code()),
        Err(e) => {
            report(&e);
            ExitCode::from(Exit::of(&e).code())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_anywhere_and_labels_parse() {
        let cli = Cli::try_parse_from([
            "etcronctl",
            "jobs",
            "ls",
            "-o",
            "json",
            "--label",
            "team=data",
            "--status",
            "paused,failed",
        ])
        .unwrap();
        assert_eq!(cli.output, Output::Json);
        let Command::Jobs(JobsCommand::Ls { labels, statuses, .. }) = cli.command else { panic!() };
        assert_eq!(labels, vec![("team".to_owned(), "data".to_owned())]);
        assert_eq!(statuses, vec!["paused", "failed"]);
        assert!(Cli::try_parse_from(["etcronctl", "jobs", "ls", "--status", "sleeping"]).is_err());
        assert!(Cli::try_parse_from(["etcronctl", "jobs", "ls", "--label", "nokey"]).is_err());
        assert!(Cli::try_parse_from(["etcronctl", "--timeout", "0s", "workers", "ls"]).is_err());
        assert!(Cli::try_parse_from(["etcronctl", "executions", "search", "--follow", "--all"]).is_err());
        for flag in ["--watch", "-w", "--follow", "-f"] {
            let cli = Cli::try_parse_from(["etcronctl", "executions", "search", flag, "--job", "a"]).unwrap();
            let Command::Executions(ExecutionsCommand::Search { watch, .. }) = cli.command else { panic!() };
            assert!(watch, "{flag}");
        }
        assert!(Cli::try_parse_from(["etcronctl", "executions", "search", "-w", "--cursor", "c"]).is_err());
    }

    #[test]
    fn backfill_flags_parse_and_refuse_unknown_choices() {
        let cli = Cli::try_parse_from([
            "etcronctl",
            "jobs",
            "backfill",
            "report",
            "--from",
            "2026-03-01T00:00:00Z",
            "--to",
            "2026-03-02T00:00:00Z",
            "--which",
            "failed",
            "--overlap",
            "parallel",
            "--max-parallel",
            "3",
            "--max-runs",
            "500",
            "--dry-run",
        ])
        .unwrap();
        let Command::Jobs(JobsCommand::Backfill { name, which, overlap, max_parallel, max_runs, dry_run, .. }) =
            cli.command
        else {
            panic!()
        };
        assert_eq!((name.as_str(), which.as_deref(), overlap.as_deref()), ("report", Some("failed"), Some("parallel")));
        assert_eq!((max_parallel, max_runs, dry_run), (Some(3), Some(500), true));
        let range = ["etcronctl", "jobs", "backfill", "report", "--from", "2026-03-01", "--to", "-3h"];
        assert!(Cli::try_parse_from(range).is_ok());
        let bad = Cli::try_parse_from(["etcronctl", "jobs", "backfill", "report", "--from", "a"]).unwrap_err();
        assert!(bad.to_string().contains("\"a\" is not a time"), "{bad}");
        assert!(Cli::try_parse_from([&range[..], &["--which", "some"]].concat()).is_err());
        assert!(Cli::try_parse_from([&range[..], &["--overlap", "burst"]].concat()).is_err());
        assert!(Cli::try_parse_from([&range[..], &["--max-runs", "-1"]].concat()).is_err());
        let to_now = Cli::try_parse_from(["etcronctl", "jobs", "backfill", "report", "--from", "-1d"]).unwrap();
        assert!(matches!(to_now.command, Command::Jobs(JobsCommand::Backfill { to: None, .. })), "--to: now");
        let cli = Cli::try_parse_from(["etcronctl", "jobs", "backfills", "report", "18f2c3"]).unwrap();
        let Command::Jobs(JobsCommand::Backfills { id, .. }) = cli.command else { panic!() };
        assert_eq!(id.as_deref(), Some("18f2c3"));
        let cli = Cli::try_parse_from(["etcronctl", "jobs", "backfills", "report"]).unwrap();
        assert!(matches!(cli.command, Command::Jobs(JobsCommand::Backfills { id: None, .. })));
        assert!(Cli::try_parse_from(["etcronctl", "jobs", "backfill-cancel", "report"]).is_err(), "needs the id");
    }

    #[test]
    fn pools_and_run_priorities_parse() {
        let cli =
            Cli::try_parse_from(["etcronctl", "pools", "put", "db", "--slots", "5", "--description", "x"]).unwrap();
        let Command::Pools(PoolsCommand::Put { name, slots, description }) = cli.command else { panic!() };
        assert_eq!((name.as_str(), slots, description.as_deref()), ("db", 5, Some("x")));
        assert!(Cli::try_parse_from(["etcronctl", "pools", "put", "db"]).is_err(), "--slots is required");
        assert!(matches!(
            Cli::try_parse_from(["etcronctl", "pools", "ls"]).unwrap().command,
            Command::Pools(PoolsCommand::Ls)
        ));
        let cli = Cli::try_parse_from(["etcronctl", "jobs", "run", "a", "--priority", "100"]).unwrap();
        let Command::Jobs(JobsCommand::Run { priority, .. }) = cli.command else { panic!() };
        assert_eq!(priority, Some(100));
        assert!(Cli::try_parse_from(["etcronctl", "jobs", "run", "a", "--priority", "101"]).is_err());
        let body = jobs::run_params(&[], None, Some(0)).unwrap().unwrap();
        assert_eq!(body, serde_json::json!({"priority": 0}));
    }

    #[test]
    fn notifications_flags_parse_and_events_are_checked() {
        let cli = Cli::try_parse_from([
            "etcronctl",
            "notifications",
            "--job",
            "nightly",
            "--event",
            "long_running",
            "--execution",
            "nightly@1767225600000#1",
            "--limit",
            "20",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.output, Output::Json);
        let Command::Notifications { job, event, execution, limit } = cli.command else { panic!() };
        assert_eq!(job.as_deref(), Some("nightly"));
        assert_eq!(event.as_deref(), Some("long_running"));
        assert_eq!(execution.as_deref(), Some("nightly@1767225600000#1"));
        assert_eq!(limit, Some(20));
        let cli = Cli::try_parse_from(["etcronctl", "notifications"]).unwrap();
        assert!(matches!(cli.command, Command::Notifications { job: None, event: None, execution: None, limit: None }));
        let e = Cli::try_parse_from(["etcronctl", "notifications", "--event", "killed"]).unwrap_err().to_string();
        assert!(e.contains("output_match"), "{e}");
        assert!(Cli::try_parse_from(["etcronctl", "notifications", "--limit", "-1"]).is_err());
    }

    #[test]
    fn yaml_output_is_the_json_document() {
        let doc = serde_json::json!({"jobs": [{"name": "a", "spec": {"schedule": "0 3 * * *", "enabled": true,
            "task": {"command": "echo 'x: y' # not a comment\nline 2", "env": {}}}, "revision": 7, "paused": null}]});
        let yaml = render_doc(&doc, Output::Yaml).unwrap();
        assert_eq!(serde_norway::from_str::<Value>(&yaml).unwrap(), doc, "{yaml}");
        let json = render_doc(&doc, Output::Json).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), doc);
        assert!(json.ends_with("}\n") && yaml.ends_with('\n'));
        let cli = Cli::try_parse_from(["etcronctl", "workers", "ls", "-o", "yaml"]).unwrap();
        assert_eq!(cli.output, Output::Yaml);
    }

    #[test]
    fn completions_name_the_subcommands() {
        let mut buf = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut Cli::command(), "etcronctl", &mut buf);
        let script = String::from_utf8(buf).unwrap();
        for word in
            ["jobs", "apply", "describe", "edit", "executions", "logs", "workers", "schedule", "export", "import"]
        {
            assert!(script.contains(word), "{word}");
        }
        assert!(script.contains("notifications") && script.contains("long_running"), "the command and its events");
    }
}
