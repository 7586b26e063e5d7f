//! Run parameters: the variables a shell task declares (`task.params`) that a manual run may
//! set (`POST /api/jobs/{job}/run {"env": …}`), each with an optional default and pattern; and
//! the loader, interpreter and tool variables no job may declare, because setting them runs code
//! or moves where a task's traffic and secrets go. A run sets data, never control: a name the
//! spec does not declare is refused, by the master when the run is asked for and again by the
//! worker when it starts the task (the spec may have changed in between).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::spec::SpecError;

/// Most parameters a task declares.
pub const MAX_PARAMS: usize = 32;
/// Longest `description` of a parameter, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 256;

/// One declared parameter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// The value every run gets when it does not set one; absent: the variable is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// A regular expression the whole value must match (it is anchored at both ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A task's declared parameters by name. Written as a map of [`Param`]s, or as a list of names
/// (`["TABLE", "DATE"]`: no defaults, any value); stored and shown as the map.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Params(pub BTreeMap<String, Param>);

impl Params {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParamsVisitor;
        impl<'de> Visitor<'de> for ParamsVisitor {
            type Value = Params;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of names or a map of NAME: {\"default\", \"pattern\", \"description\"}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Params, A::Error> {
                let mut params = BTreeMap::new();
                while let Some(name) = seq.next_element::<String>()? {
                    if params.insert(name.clone(), Param::default()).is_some() {
                        return Err(serde::de::Error::custom(format!("{name} is listed twice")));
                    }
                }
                Ok(Params(params))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
                let mut params = BTreeMap::new();
                while let Some((name, param)) = map.next_entry::<String, Param>()? {
                    params.insert(name, param);
                }
                Ok(Params(params))
            }
        }
        deserializer.deserialize_any(ParamsVisitor)
    }
}

/// Names no task may declare as a parameter: each makes a shell, the dynamic loader, an
/// interpreter or a common tool run code, read its configuration from elsewhere, or send its
/// traffic (and the task's secrets) through another host. Compared without regard to case.
pub const REFUSED_NAMES: [&str; 44] = [
    // The shell: startup files, options, prompts expanded with `$(…)`, word splitting, lookup.
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "PATH",
    "HOME",
    "SHELL",
    "ZDOTDIR",
    "INPUTRC",
    // Programs other programs start.
    "BROWSER",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    // The C library: character set modules, locales, resolver, tunables.
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    "GLIBC_TUNABLES",
    // Interpreters' code paths and startup options.
    "CLASSPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "R_PROFILE",
    "R_PROFILE_USER",
    "R_ENVIRON",
    "R_LIBS",
    // TLS: trust, engines and key logs.
    "OPENSSL_CONF",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Prefixes of names no task may declare (see [`REFUSED_NAMES`]), compared without regard to
/// case; `*_PROXY` names are refused by [`refusal`] too.
pub const REFUSED_PREFIXES: [&str; 19] = [
    "LD_",
    "DYLD_",
    "BASH_FUNC_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "JAVA",
    "_JAVA_",
    "JDK_",
    "LUA_",
    "GIT_",
    "PIP_",
    "CURL_",
    "REQUESTS_",
    "KRB5",
    "SSLKEYLOG",
    "OPENSSL_",
];

/// Why `name` may not be a parameter, or `None` when it may.
#[must_use]
pub fn refusal(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("ETCRON_") {
        return Some("the ETCRON_ prefix is reserved for variables etcron sets");
    }
    let refused = REFUSED_NAMES.contains(&upper.as_str())
        || REFUSED_PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper.ends_with("_PROXY");
    refused
        .then_some("is a loader, interpreter or tool variable (it can run code or redirect traffic); no run may set it")
}

/// Checks a task's declared parameters against the spec's own variables (`env`, `secret_env`
/// names: a parameter gives its default in `params`, never also there).
pub fn validate(params: &Params, spec_names: &[(&str, &String)]) -> Result<(), SpecError> {
    if params.0.len() > MAX_PARAMS {
        return Err(SpecError::at("task.params", format!("at most {MAX_PARAMS} parameters")));
    }
    for (name, param) in &params.0 {
        let field = format!("task.params.{name}");
        if name.len() > crate::spec::MAX_MAP_KEY_LEN || !crate::spec::env_key_ok(name) {
            return Err(SpecError::at(&field, "invalid name (letters, digits and _, not starting with a digit)"));
        }
        if let Some(why) = refusal(name) {
            return Err(SpecError::at(&field, why));
        }
        if let Some((other, _)) = spec_names.iter().find(|(_, n)| *n == name) {
            return Err(SpecError::at(&field, format!("is also in {other}; give its default here instead")));
        }
        let pattern = param
            .pattern
            .as_deref()
            .map(|p| anchored(p).map_err(|why| SpecError::at(&format!("{field}.pattern"), why)))
            .transpose()?;
        if let Some(default) = &param.default {
            value_ok(default, pattern.as_ref()).map_err(|why| SpecError::at(&format!("{field}.default"), why))?;
        }
        if param.description.as_ref().is_some_and(|d| d.len() > MAX_DESCRIPTION_LEN || d.chars().any(char::is_control))
        {
            return Err(SpecError::at(
                &format!("{field}.description"),
                format!("at most {MAX_DESCRIPTION_LEN} bytes, no control characters"),
            ));
        }
    }
    Ok(())
}

/// The variables a run's `overrides` give the task: every declared default, with the run's
/// values over them. Refused, naming `env.NAME`, when a name is not declared or a value does
/// not match its pattern.
pub fn run_env(params: &Params, overrides: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, SpecError> {
    let mut env: BTreeMap<String, String> =
        params.0.iter().filter_map(|(name, p)| Some((name.clone(), p.default.clone()?))).collect();
    for (name, value) in overrides {
        let field = format!("env.{name}");
        let Some(param) = params.0.get(name) else {
            return Err(SpecError::at(&field, undeclared(params)));
        };
        let pattern =
            param.pattern.as_deref().map(|p| anchored(p).map_err(|why| SpecError::at(&field, why))).transpose()?;
        value_ok(value, pattern.as_ref()).map_err(|why| SpecError::at(&field, why))?;
        env.insert(name.clone(), value.clone());
    }
    Ok(env)
}

fn undeclared(params: &Params) -> String {
    if params.is_empty() {
        "is not a parameter of this job: it declares none (declare it in task.params)".to_owned()
    } else {
        let names: Vec<&str> = params.0.keys().map(String::as_str).collect();
        format!("is not a parameter of this job (it declares {})", names.join(", "))
    }
}

/// A pattern compiled to match the whole value.
fn anchored(pattern: &str) -> Result<regex::Regex, String> {
    crate::spec::alerts::bounded_regex(pattern)?;
    crate::spec::alerts::bounded_regex(&format!("^(?:{pattern})$"))
}

fn value_ok(value: &str, pattern: Option<&regex::Regex>) -> Result<(), String> {
    if value.len() > crate::spec::MAX_MAP_VALUE_LEN || value.contains('\0') {
        return Err(format!("value longer than {} bytes or contains NUL", crate::spec::MAX_MAP_VALUE_LEN));
    }
    match pattern {
        Some(p) if !p.is_match(value) => Err(format!("{:?} does not match the pattern {}", clip(value), p.as_str())),
        _ => Ok(()),
    }
}

/// A value as an error message shows it: at most 64 characters.
fn clip(value: &str) -> String {
    let mut out: String = value.chars().take(64).collect();
    if out.len() < value.len() {
        out.push('…');
    }
    out
}

/// Most entries of a job's `params_from`.
pub const MAX_PARAMS_FROM: usize = 32;
/// Longest path in `params_from`.
pub const MAX_PATH_LEN: usize = 256;

/// Checks `params_from`: names the task declares (`declared`), paths [`parse_path`] accepts,
/// naming only jobs of `after` when a path names one.
pub fn validate_params_from(
    params_from: &BTreeMap<String, String>,
    declared: &dyn Fn(&str) -> bool,
    after: &[String],
) -> Result<(), SpecError> {
    if params_from.len() > MAX_PARAMS_FROM {
        return Err(SpecError::at("params_from", format!("at most {MAX_PARAMS_FROM} entries")));
    }
    for (name, path) in params_from {
        let field = format!("params_from.{name}");
        if !declared(name) {
            return Err(SpecError::at(&field, "the task declares no such parameter (task.params)"));
        }
        let (job, _) = parse_path(path).map_err(|e| SpecError::at(&field, e))?;
        if let Some(job) = job {
            if !after.iter().any(|a| a == job) {
                return Err(SpecError::at(&field, format!("{job:?} is not one of after")));
            }
        }
    }
    Ok(())
}

/// A `params_from` path: `$` (the one parent's result), `$job` (that parent's), followed by
/// `.name` and `[n]` steps: the parent it names (if any) and the JSON pointer it means.
pub fn parse_path(path: &str) -> Result<(Option<&str>, String), String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!("a path is at most {MAX_PATH_LEN} bytes"));
    }
    let rest = path.strip_prefix('$').ok_or("a path starts with $ (e.g. $.date or $extract.date)")?;
    let end = rest.find(['.', '[']).unwrap_or(rest.len());
    let (job, mut rest) = rest.split_at(end);
    let job = if job.is_empty() {
        None
    } else {
        crate::keys::validate_job_name(job)?;
        Some(job)
    };
    let mut pointer = String::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(format!("an empty name in {path:?}"));
            }
            pointer.push('/');
            pointer.push_str(&r[..end].replace('~', "~0").replace('/', "~1"));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| format!("an unclosed [ in {path:?}"))?;
            let index: usize = r[..end].parse().map_err(|_| format!("[{}] is not an index in {path:?}", &r[..end]))?;
            pointer.push_str(&format!("/{index}"));
            rest = &r[end + 1..];
        } else {
            return Err(format!("{path:?}: expected .name or [index] at {rest:?}"));
        }
    }
    Ok((job, pointer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> Params {
        serde_json::from_str(json).unwrap()
    }

    fn overrides(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_list_of_names_reads_as_params_without_defaults() {
        let p = params(r#"["TABLE", "DATE"]"#);
        assert_eq!(p.0.len(), 2);
        assert_eq!(p.0["TABLE"], Param::default());
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"DATE":{},"TABLE":{}}"#);
        assert!(serde_json::from_str::<Params>(r#"["A", "A"]"#).is_err());
        assert!(serde_json::from_str::<Params>(r#"{"A": {"defualt": "x"}}"#).is_err());
        assert!(serde_json::from_str::<Params>("5").is_err());
    }

    #[test]
    fn a_run_sets_declared_names_only_over_their_defaults() {
        let p = params(r#"{"DAY": {"default": "today", "pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}|today"}, "TABLE": {}}"#);
        assert_eq!(run_env(&p, &BTreeMap::new()).unwrap(), overrides(&[("DAY", "today")]));
        assert_eq!(
            run_env(&p, &overrides(&[("DAY", "2026-11-01"), ("TABLE", "users")])).unwrap(),
            overrides(&[("DAY", "2026-11-01"), ("TABLE", "users")])
        );
        let e = run_env(&p, &overrides(&[("BASH_ENV", "$(id)")])).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("env.BASH_ENV"));
        assert!(e.message.contains("declares DAY, TABLE"), "{}", e.message);
        // The pattern is anchored: a valid date followed by more is refused.
        let e = run_env(&p, &overrides(&[("DAY", "2026-11-01; id")])).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("env.DAY"));
        assert!(e.message.contains("does not match"), "{}", e.message);
        let e = run_env(&Params::default(), &overrides(&[("X", "1")])).unwrap_err();
        assert!(e.message.contains("declares none"), "{}", e.message);
    }

    #[test]
    fn loader_and_interpreter_variables_cannot_be_declared() {
        for name in [
            "LD_PRELOAD",
            "BASH_ENV",
            "SHELLOPTS",
            "PS4",
            "PATH",
            "PYTHONWARNINGS",
            "BROWSER",
            "https_proxy",
            "GIT_SSH_COMMAND",
            "NODE_OPTIONS",
            "ETCRON_JOB",
            "bash_env",
        ] {
            let p = Params(BTreeMap::from([(name.to_owned(), Param::default())]));
            let e = validate(&p, &[]).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(format!("task.params.{name}").as_str()), "{name}");
        }
        for name in ["TABLE", "REPORT_DAY", "MODE", "LANGUAGE_CODE"] {
            assert_eq!(refusal(name), None, "{name}");
        }
    }

    #[test]
    fn declarations_are_checked() {
        let env = "x".to_owned();
        let e = validate(&params(r#"["MODE"]"#), &[("task.env", &"MODE".to_owned())]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.params.MODE"));
        assert!(e.message.contains("task.env"));
        assert!(validate(&params(r#"["MODE"]"#), &[("task.env", &env)]).is_ok());
        let e = validate(&params(r#"{"A": {"pattern": "("}}"#), &[]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.params.A.pattern"));
        let e = validate(&params(r#"{"A": {"pattern": "[0-9]+", "default": "x"}}"#), &[]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.params.A.default"));
        let e = validate(&params(r#"["1A"]"#), &[]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task.params.1A"));
        let many = Params((0..=MAX_PARAMS).map(|i| (format!("P{i}"), Param::default())).collect());
        assert_eq!(validate(&many, &[]).unwrap_err().field.as_deref(), Some("task.params"));
    }

    #[test]
    fn paths_name_a_parent_and_a_pointer() {
        assert_eq!(parse_path("$.date").unwrap(), (None, "/date".to_owned()));
        assert_eq!(parse_path("$extract.rows[2].id").unwrap(), (Some("extract"), "/rows/2/id".to_owned()));
        assert_eq!(parse_path("$").unwrap(), (None, String::new()));
        for bad in ["date", "$.", "$.a[x]", "$.a[1", "$a b", "$.a..b"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn params_from_is_checked_at_save() {
        let declared = |n: &str| n == "DATE";
        let after = ["extract".to_owned()];
        let map = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        validate_params_from(&map("DATE", "$extract.date"), &declared, &after).unwrap();
        let e = validate_params_from(&map("OTHER", "$.date"), &declared, &after).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params_from.OTHER"));
        let e = validate_params_from(&map("DATE", "$load.date"), &declared, &after).unwrap_err();
        assert!(e.message.contains("not one of after"), "{e:?}");
        let e = validate_params_from(&map("DATE", "date"), &declared, &after).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params_from.DATE"));
    }
}
