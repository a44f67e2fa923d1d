//! What converting a document produces: the [`Conversion`] with its [`Loss`]es and
//! [`Note`]s, or a [`ConvertError`] naming every problem's field.

use std::fmt;

use serde_json::Value;

use crate::validate::{FieldError, ValidationErrors};

/// Something a v1alpha1 document asked for that v1alpha2 cannot express.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Path of the v1alpha1 field (`spec.users`, `spec.volumes["data"]`).
    pub field: String,
    /// What to do instead.
    pub advice: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: no v1alpha2 equivalent: {}", self.field, self.advice)
    }
}

/// A lossless change worth knowing about (a default that moved, a dropped no-op field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Path of the field concerned.
    pub field: String,
    /// What changed.
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.text)
    }
}

/// The result of converting one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// The v1alpha2 document (the input itself when `passed_through`).
    pub output: Value,
    /// What has no v1alpha2 equivalent, in field order.
    pub lost: Vec<Loss>,
    /// Lossless changes worth knowing about.
    pub notes: Vec<Note>,
    /// The document was not a v1alpha1 MiniCluster and is returned unchanged.
    pub passed_through: bool,
}

impl Conversion {
    /// Whether nothing the input asked for was lost.
    pub fn is_lossless(&self) -> bool {
        self.lost.is_empty()
    }

    pub(super) fn unchanged(doc: &Value) -> Self {
        Conversion {
            output: doc.clone(),
            lost: Vec::new(),
            notes: Vec::new(),
            passed_through: true,
        }
    }
}

/// Why a document could not be converted. Every problem names its field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The input is not a valid v1alpha1 (or v1alpha2) MiniCluster: an unknown field, a
    /// wrong type, an unsupported apiVersion or a broken v1alpha1 rule (v1alpha1 paths).
    #[error("invalid MiniCluster: {0}")]
    Input(ValidationErrors),
    /// The converted document, or a v1alpha2 document passed through, is not a valid
    /// v1alpha2 MiniCluster (v1alpha2 paths).
    #[error("not a valid v1alpha2 MiniCluster: {0}")]
    Output(ValidationErrors),
}

impl ConvertError {
    /// Every problem, each with its field path.
    pub fn problems(&self) -> &[FieldError] {
        match self {
            ConvertError::Input(e) | ConvertError::Output(e) => &e.0,
        }
    }

    pub(super) fn prefixed(self, prefix: &str) -> Self {
        let map = |e: ValidationErrors| {
            ValidationErrors(
                e.0.into_iter()
                    .map(|fe| FieldError {
                        field: format!("{prefix}{}", fe.field),
                        rule: fe.rule,
                    })
                    .collect(),
            )
        };
        match self {
            ConvertError::Input(e) => ConvertError::Input(map(e)),
            ConvertError::Output(e) => ConvertError::Output(map(e)),
        }
    }
}
