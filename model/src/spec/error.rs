//! Why a spec was refused: the field and the message, and whether it was its size.

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct SpecError {
    /// Dotted path of the offending field (`task.command`), or `None` for the whole body.
    pub field: Option<String>,
    pub message: String,
    pub too_large: bool,
}

impl SpecError {
    pub(crate) fn at(field: &str, message: impl Into<String>) -> Self {
        Self { field: Some(field.to_owned()), message: message.into(), too_large: false }
    }
}
