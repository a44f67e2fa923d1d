//! Process signals that ask the hub to stop (the shared [`flux_shared::ops::shutdown`]).

pub use flux_shared::ops::shutdown::Shutdown;
