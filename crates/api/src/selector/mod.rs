//! Label and field selectors, parsed and matched as Kubernetes does, with its error messages.

pub mod field;
pub mod label;
pub mod validation;

pub use field::{FieldOp, FieldRequirement, FieldSelector};
pub use label::{LabelSelector, Operator, Requirement};
pub use validation::{FieldError, FieldErrorType};

/// A selector that does not parse or validate. The message is Kubernetes' text; the API server
/// answers it with 400 Bad Request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    message: String,
}

impl SelectorError {
    pub fn new(message: impl Into<String>) -> Self {
        SelectorError {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}
