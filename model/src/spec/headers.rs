//! The one rule for headers and URLs a job gives for requests etcron sends: HTTP tasks
//! (`task.headers`, `task.secret_headers`, `task.url`) and notification targets
//! (`notify[i].headers`, `…secret_headers`, `…url`). Pure; errors are messages, the caller names
//! the field.

/// Secret values by name; `None` is a value withheld by the API (or, in a PUT, "keep it").
pub type Secrets = std::collections::BTreeMap<String, Option<String>>;

/// Longest header name.
pub const MAX_HEADER_NAME_LEN: usize = 128;
/// Longest header value.
pub const MAX_HEADER_VALUE_LEN: usize = 4096;
/// Headers that frame the request or name where it goes: only the HTTP client sets them (a job
/// that set `Content-Length: 5` had its body cut to 5 bytes and its run recorded `succeeded`).
pub const TRANSPORT_HEADERS: [&str; 3] = ["host", "content-length", "transfer-encoding"];
/// Prefix of etcron's own headers (`X-Etcron-Execution-Id`, `X-Etcron-Fencing-Token`,
/// `X-Etcron-Delivery`…): receivers rely on them to deduplicate and fence, so no job sets them.
pub const ETCRON_HEADER_PREFIX: &str = "x-etcron-";

/// Checks a header name: 1..[`MAX_HEADER_NAME_LEN`] letters, digits, `-` or `_`, not one of
/// [`TRANSPORT_HEADERS`], not `X-Etcron-*`, and not one of `also_reserved` (lowercase names the
/// caller sets itself).
pub fn check_name(name: &str, also_reserved: &[&str]) -> Result<(), String> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_HEADER_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    if !well_formed {
        return Err(format!("header names are 1..{MAX_HEADER_NAME_LEN} letters, digits, '-' or '_'"));
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with(ETCRON_HEADER_PREFIX) {
        return Err("X-Etcron-* headers are set by etcron on every request".to_owned());
    }
    if TRANSPORT_HEADERS.contains(&lower.as_str()) || also_reserved.contains(&lower.as_str()) {
        return Err(format!("{name} is set by etcron's HTTP client on every request"));
    }
    Ok(())
}

/// Checks a header value: at most [`MAX_HEADER_VALUE_LEN`] bytes, no control characters (line
/// breaks, NUL, DEL…; a tab is allowed), which no HTTP client would send.
pub fn check_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_HEADER_VALUE_LEN {
        return Err(format!("value longer than {MAX_HEADER_VALUE_LEN} bytes"));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err("value contains a control character (line break, NUL…)".to_owned());
    }
    Ok(())
}

/// Checks that `url` is an absolute `http://` or `https://` URL with a host, a valid port and
/// no whitespace or control characters, at most `max_len` bytes: one that a request can be
/// sent to (`http://[::1` or `http://h:99999/` are refused here, not on every run).
pub fn check_url(url: &str, max_len: usize) -> Result<(), String> {
    let expected = || format!("must be an absolute http:// or https:// URL of at most {max_len} bytes");
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    let shaped = rest.is_some_and(|r| !r.is_empty() && !r.starts_with(['/', '?', '#']))
        && !url.contains(|c: char| c.is_whitespace() || c.is_control())
        && url.len() <= max_len;
    if !shaped {
        return Err(expected());
    }
    match url::Url::parse(url) {
        Ok(parsed) if parsed.host().is_some() => Ok(()),
        Ok(_) => Err(format!("{}: it has no host", expected())),
        Err(e) => Err(format!("{}: {e}", expected())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_and_etcron_headers_are_refused_whatever_their_case() {
        for name in ["Host", "content-length", "Transfer-Encoding", "X-Etcron-Fencing-Token", "x-etcron-job"] {
            assert!(check_name(name, &[]).is_err(), "{name}");
        }
        assert!(check_name("User-Agent", &["user-agent"]).is_err());
        for name in ["User-Agent", "X-Api-Key", "Authorization", "Content-Type", "X_A"] {
            assert!(check_name(name, &[]).is_ok(), "{name}");
        }
        assert!(check_name("", &[]).is_err());
        assert!(check_name("a b", &[]).is_err());
        assert!(check_name(&"a".repeat(MAX_HEADER_NAME_LEN + 1), &[]).is_err());
    }

    #[test]
    fn values_with_control_characters_are_refused() {
        for value in ["a\nb", "a\rb", "a\0b", "a\u{7f}b", "a\u{1b}[31m", "\u{85}"] {
            assert!(check_value(value).is_err(), "{value:?}");
        }
        assert!(check_value("Bearer abc\tdef é").is_ok());
        assert!(check_value(&"v".repeat(MAX_HEADER_VALUE_LEN + 1)).is_err());
    }

    #[test]
    fn urls_that_cannot_be_requested_are_refused() {
        for url in [
            "http://[::1",
            "http://h:99999/",
            "http://h:port/",
            "https://",
            "http:///x",
            "ftp://h/",
            "http://a b/",
            "http://h/\u{7}",
            "http://[zz]/",
        ] {
            assert!(check_url(url, 4096).is_err(), "{url}");
        }
        for url in ["http://[::1]:8080/x", "https://h.example:443/p?q=1#f", "http://127.0.0.1:65535", "http://u:p@h/"] {
            assert!(check_url(url, 4096).is_ok(), "{url}");
        }
        assert!(check_url("http://h/xx", 10).is_err());
    }
}

/// What views show in place of a password inside a URL (`https://user:redacted@host/`); a PUT
/// that sends it back keeps the stored password, as a `null` secret does.
pub const SHOWN_PASSWORD: &str = "redacted";

/// `url` as views show it: a password in its userinfo replaced by [`SHOWN_PASSWORD`].
#[must_use]
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some(SHOWN_PASSWORD));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Whether `url` carries the password views show ([`SHOWN_PASSWORD`]): a PUT asking to keep it.
#[must_use]
pub fn shows_password(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| u.password() == Some(SHOWN_PASSWORD))
}

/// Where a URL sends its requests: scheme, host and port (the secrets a job keeps for a URL
/// are for that destination only).
#[must_use]
pub fn destination(url: &str) -> Option<(String, String, u16)> {
    let parsed = url::Url::parse(url).ok()?;
    Some((parsed.scheme().to_owned(), parsed.host_str()?.to_owned(), parsed.port_or_known_default()?))
}

/// `url` with the stored password put back where a view showed [`SHOWN_PASSWORD`]: only for the
/// same destination and user. `Ok(url)` unchanged when it carries no shown password; `Err` with
/// why when the password cannot be kept.
pub fn keep_url_password(url: &str, stored: Option<&str>) -> Result<String, String> {
    let Ok(mut parsed) = url::Url::parse(url) else { return Ok(url.to_owned()) };
    if parsed.password() != Some(SHOWN_PASSWORD) {
        return Ok(url.to_owned());
    }
    let kept = stored.and_then(|s| url::Url::parse(s).ok()).filter(|s| {
        destination(s.as_str()) == destination(url) && s.username() == parsed.username() && s.password().is_some()
    });
    let Some(kept) = kept else {
        return Err(format!(
            "the password {SHOWN_PASSWORD:?} keeps the stored one only for the same user, scheme, host and port; give the password"
        ));
    };
    let _ = parsed.set_password(kept.password());
    Ok(parsed.to_string())
}

/// Why secrets kept for `stored_url` may not go to `url`: their destinations differ.
#[must_use]
pub fn destination_changed(url: &str, stored_url: &str) -> Option<String> {
    let (new, old) = (destination(url), destination(stored_url));
    (new != old).then(|| {
        let show = |d: Option<(String, String, u16)>| d.map_or("?".to_owned(), |(s, h, p)| format!("{s}://{h}:{p}"));
        format!(
            "the URL's destination changed from {} to {}: secrets kept for the old one are not sent to the new one; give them again",
            show(old),
            show(new)
        )
    })
}

#[cfg(test)]
mod url_secret_tests {
    use super::*;

    #[test]
    fn url_passwords_are_shown_redacted_and_kept_only_for_the_same_destination_and_user() {
        let stored = "https://alice:s3cret@api.example/v1?x=1";
        let shown = shown_url(stored);
        assert_eq!(shown, "https://alice:redacted@api.example/v1?x=1");
        assert_eq!(shown_url("https://api.example/v1"), "https://api.example/v1");
        assert_eq!(keep_url_password(&shown, Some(stored)).unwrap(), stored);
        let edited = "https://alice:redacted@api.example/v2";
        assert_eq!(keep_url_password(edited, Some(stored)).unwrap(), "https://alice:s3cret@api.example/v2");
        assert!(keep_url_password("https://alice:redacted@evil.example/", Some(stored)).is_err());
        assert!(keep_url_password("https://bob:redacted@api.example/", Some(stored)).is_err());
        assert!(keep_url_password("http://alice:redacted@api.example/", Some(stored)).is_err());
        assert!(keep_url_password(&shown, None).is_err());
        assert_eq!(
            keep_url_password("https://alice:new@api.example/", Some(stored)).unwrap(),
            "https://alice:new@api.example/"
        );
        assert!(destination_changed("https://api.example/a", "https://api.example:443/b").is_none());
        assert!(destination_changed("https://evil.example/", "https://api.example/").is_some());
        assert!(destination_changed("http://api.example/", "https://api.example/").is_some());
    }
}
