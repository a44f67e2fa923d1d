//! The error type: every problem found, each naming the field and the rule it breaks.

use std::fmt;

/// One problem: the field path (`spec.containers[0].image`) and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field.
    pub field: String,
    /// The rule, in words.
    pub rule: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// Every problem found in a MiniCluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    /// A single problem.
    pub fn single(field: impl Into<String>, rule: impl Into<String>) -> Self {
        ValidationErrors(vec![FieldError {
            field: field.into(),
            rule: rule.into(),
        }])
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
